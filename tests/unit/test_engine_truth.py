"""Engine truth against the SGLang test double run for real on loopback (its protocol is taken from
each release's sources, cited in tests/doubles/sglang/launch_server.py), through the real
inference_health module: what a ready server refuses fails at once with its own words, the drain
reads live counts, and the double's flag tables are the releases' own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_modules_adhoc import adhoc

from lab import free_port  # lab/lab.py (tests/conftest.py puts lab/ on the path)

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests/doubles"
CT200 = ["--model-path", "/root/models/Kimi-K2.6", "--served-model-name", "kimi-k2.6", "--tp-size", "8", "--host", "127.0.0.1",
         "--context-length", "262144", "--mem-fraction-static", "0.88", "--enable-metrics", "--trust-remote-code",
         "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2", "--watchdog-timeout", "900"]


def spawn(*args: str, version: str = "0.5.10", **env: str) -> tuple[subprocess.Popen, str]:
    """The double on a free loopback port, its port open (it opens after the load, as SGLang's does)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", *args, "--port", str(port)], cwd=DOUBLE,
                            env=dict(os.environ, PYTHONPATH=str(DOUBLE), BC_DOUBLE_SGLANG_VERSION=version, BC_DOUBLE_LOAD_S="0.1",
                                     BC_DOUBLE_WARMUP_S="0.1", **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/model_info" % port, timeout=2).read()
        except urllib.error.HTTPError:
            pass  # an answer all the same (401 under a key): the port is open
        except OSError:
            time.sleep(0.1)
            continue
        time.sleep(0.3)  # past the 0.1 s warmup
        return proc, "http://127.0.0.1:%d" % port
    proc.kill()
    raise AssertionError(proc.communicate()[0][-2000:])


@pytest.fixture
def double():
    procs: list[subprocess.Popen] = []

    def run(*args: str, **kw: str) -> str:
        proc, url = spawn(*args, **kw)
        procs.append(proc)
        return url

    yield run
    for proc in procs:
        proc.kill()
        proc.wait()


def test_the_real_sites_command_line_starts_every_release_it_may_run(double):
    for version in ("0.5.10", "0.5.15", "0.5.16"):
        assert double(*CT200, version=version)


def test_an_unknown_flag_exits_2_as_the_releases_argparse_does():
    for version, flag in (("0.5.10", "--no-such-flag"), ("0.5.10", "--cuda-graph-max-bs-decode"), ("0.5.23", "--cuda-graph-max-bs")):
        proc = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", flag, "8"], cwd=DOUBLE,
                              env=dict(os.environ, PYTHONPATH=str(DOUBLE), BC_DOUBLE_SGLANG_VERSION=version),
                              capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 2, (version, flag, proc.stderr[-300:])


@pytest.mark.parametrize("version", ["0.5.10", "0.5.15", "0.5.16", "0.5.23"])
def test_flag_tables_are_the_releases_own(version):
    table = json.loads((DOUBLE / "sglang/flags" / f"{version}.json").read_text())
    flags = table["flags"]
    assert table["version"] == version and len(flags) > 300
    assert flags["--enable-metrics"] == "switch" and flags["--model-path"] == "value" and "--config" in flags
    # the rename the unit role's flag history follows (roles/service_unit/vars/main.yml)
    assert ("--cuda-graph-max-bs" in flags) == (version in ("0.5.10", "0.5.15", "0.5.16"))
    assert ("--cuda-graph-max-bs-decode" in flags) == (version != "0.5.10")


def test_a_missing_key_fails_the_completion_at_once_with_the_servers_words_and_any_model_name_is_served(double):
    url = double(*CT200, "--api-key", "sk-engine-truth-1")
    # SGLang serves any model name (serving_completions.py validates only the prompt; the real 0.5.16 on the
    # H200 answered "tiny-k3" with 200): only vLLM refuses one (404, tests/unit/test_health.py)
    other = adhoc("inference_health", {"url": url, "probe": "completion", "model": "kimi-k3", "api_key": "sk-engine-truth-1"})
    assert other["_status"] == "SUCCESS" and other["ready"], other
    nokey = adhoc("inference_health", {"url": url, "probe": "completion", "model": "kimi-k2.6"})
    assert nokey["_status"] == "FAILED!" and "HTTP 401: Unauthorized" in nokey["msg"], nokey
    # /health* and /metrics are exempt from the key (utils/auth.py:100), /v1/loads is not
    assert adhoc("inference_health", {"url": url})["ready"] is True
    loads = adhoc("inference_load_info", {"url": url})
    assert loads["in_flight"] is None and "HTTP 401" in loads["in_flight_unknown"]


def test_the_drain_reads_live_counts_not_the_sampled_gauges(double):
    url = double(*CT200, BC_DOUBLE_GAUGE_S="3600", BC_DOUBLE_TOKEN_MS="500")
    body = json.dumps({"prompt": "x", "max_tokens": 20, "model": "kimi-k2.6"}).encode()
    client = subprocess.Popen(["curl", "-s", "-m", "30", "-d", body.decode(), url + "/v1/completions"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        metrics = subprocess.run(["curl", "-s", url + "/metrics"], capture_output=True, text=True, timeout=10, check=True).stdout
        assert 'sglang:num_running_reqs{' in metrics and "} 0.0" in metrics.splitlines()[1]  # the stale sample says 0
        r = adhoc("inference_load_info", {"url": url, "engine_version": "0.5.10"})
        assert r["in_flight"] == 1.0, r  # /v1/loads says 1: the drain waits
    finally:
        client.kill()


@pytest.mark.parametrize("version", ["0.5.10", "0.5.16"])
def test_a_request_waiting_for_its_prefill_is_in_flight_though_the_load_snapshot_says_none(double, version):
    """From 0.5.16 /v1/loads is the scheduler's snapshot, published at a prefill batch and when idle: a request
    in its waiting queue reads as none there. The front end's live gauge (sglang:http_requests_active) counts it,
    on 0.5.10 too; the drain reads both."""
    url = double(*CT200, version=version, BC_DOUBLE_QUEUE_S="8")
    client = subprocess.Popen(["curl", "-s", "-m", "30", "-d", '{"prompt": "x", "max_tokens": 1}', url + "/v1/completions"],
                              stdout=subprocess.DEVNULL)
    try:
        time.sleep(1)
        loads = json.loads(subprocess.run(["curl", "-s", url + "/v1/loads"], capture_output=True, text=True, timeout=10,
                                          check=True).stdout)
        waiting = loads["loads"][0]["num_waiting_reqs"]
        assert waiting == (1 if version == "0.5.10" else 0), loads  # 0.5.10 asks the scheduler; 0.5.16 reads the snapshot
        r = adhoc("inference_load_info", {"url": url, "engine_version": version})
        assert r["in_flight"] == 1.0 and r["in_flight_by_metric"]["front end (sglang:http_requests_active)"] == 1.0, r
    finally:
        client.kill()


def test_without_metrics_the_front_end_is_unknown_and_unknown_is_not_zero(double):
    url = double(*[a for a in CT200 if a != "--enable-metrics"], version="0.5.16")
    r = adhoc("inference_load_info", {"url": url, "engine_version": "0.5.16"})
    assert r["in_flight"] is None and "front end are not counted" in r["in_flight_unknown"], r


def test_a_hung_scheduler_fails_the_readiness_probe_naming_it(double):
    # up, but no token comes back: http_server.py health_generate waits SGLANG_HEALTH_CHECK_TIMEOUT, then 503
    url = double(*CT200, BC_DOUBLE_HANG="1", SGLANG_HEALTH_CHECK_TIMEOUT="16")
    r = adhoc("inference_health", {"url": url, "timeout": 30})
    assert r["_status"] == "FAILED!" and "hung scheduler" in r["msg"], r


def test_sigterm_of_a_server_with_a_request_in_flight_waits_for_it(double):
    url = double(*CT200, BC_DOUBLE_TOKEN_MS="200")
    client = subprocess.Popen(["curl", "-s", "-m", "30", "-d", '{"prompt": "x", "max_tokens": 10}', url + "/v1/completions"],
                              stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    server = next(p for p in psutil_like() if url.rsplit(":", 1)[1] in p[1])
    os.kill(server[0], 15)
    assert '"text": "4"' in client.communicate(timeout=30)[0]  # the request finished: a graceful drain


def psutil_like() -> list[tuple[int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                out.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()))
            except OSError:
                pass
    return [p for p in out if "sglang.launch_server" in p[1]]


def test_the_vllm_unit_runs_vllm_serve_and_the_stop_knows_both_programs():
    import yaml

    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import engine_process

    engines = yaml.safe_load((ROOT / "roles/service_unit/vars/main.yml").read_text())["service_unit_engines"]
    assert engines["vllm"]["exec"] == ["{{ cycle_bc.bc_engine_python | dirname }}/vllm", "serve"]
    # vLLM's API server exits 0 when its engine dies (the real 0.32 server): on-failure would never restart it
    assert engines["vllm"]["restart"] == "always"
    assert {e: engines[e]["restart"] for e in ("sglang", "llamacpp")} == {"sglang": "on-failure", "llamacpp": "on-failure"}
    template = (ROOT / "roles/service_unit/templates/unit.service.j2").read_text()
    assert "Restart={{ service_unit_restart_policy }}" in template
    spec = ENGINES["vllm"]["processes"]
    # what the kernel gives for `vllm serve` (a console script run through its shebang), read from the real vLLM 0.32
    # API server's /proc/<pid>/cmdline (tests/integration/test_vllm.py asserts it against the running server)
    assert engine_process(["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "--model", "/m"], spec)
    assert engine_process(["/opt/vllm/bin/python3.11", "/opt/vllm/bin/vllm", "serve"], spec)
    # a shell or an editor with the script's path is not the server; nor a script merely named like it
    assert not engine_process(["/bin/sh", "/opt/vllm/bin/vllm", "serve"], spec)
    assert not engine_process(["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm-bench", "serve"], spec)
    assert not engine_process(["/usr/bin/vim", "/opt/vllm/bin/vllm"], spec)
    assert engine_process(["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"], spec)
    assert engine_process(["VLLM::Worker_TP3"], spec) and engine_process(["VLLM::EngineCore"], spec)


@pytest.mark.parametrize("version", ["0.5.10", "0.5.15", "0.5.16", "0.5.23"])
def test_what_a_whole_release_reads_of_the_server_is_a_start_flag_of_every_release(version):
    """/server_info is dataclasses.asdict(server_args) (http_server.py 0.5.16:743-762): every field the whole release
    reads as "the server was started with it" is a flag of that release's argparse, and the setting that turns the
    backup on renders a flag the release takes."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES

    flags = json.loads((DOUBLE / "sglang/flags" / f"{version}.json").read_text())["flags"]
    whole = ENGINES["sglang"]["release"]["whole"]
    fields = {f for spec in whole["tags"].values() for f in spec.get("info_on", [])} | set(whole["ranks"].values())
    assert {f for f in fields if "--" + f.replace("_", "-") not in flags} == set()
    assert flags[ENGINES["sglang"]["flags"][whole["setting"]]] == "switch" == flags["--enable-memory-saver"]
    assert whole["required"] == ["kv_cache", "weights"] and set(whole["tags"]) == {"kv_cache", "weights", "cuda_graph"}
    # the graph pool is backed up from 0.5.21 (full_cuda_graph_backend.py 0.5.21:168-171; none in 0.5.16-0.5.20)
    assert whole["tags"]["cuda_graph"]["backed_up_since"] == "0.5.21"
    assert whole["checker"] == {"path": "/weights_checker", "payload": {"action": "checksum"}, "since": "0.5.15"}
