"""The release strategy: the decision from measured numbers, and the steps against the SGLang double
over real HTTP on loopback (the double reproduces what the real 0.5.16 did on the H200: the crash on
a second resume, the crash on a release while busy, the held requests, no-op without the saver), with
the nvidia-smi double reading the memory the double holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import HttpResult, request
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_identity import identity
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_release import (
    Release,
    ReleaseError,
    env_true,
    host_gpus,
    identity_figures,
    json_values,
    meminfo_available_mib,
    server_problem,
    support,
    whole_support,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import choose
from lab import free_port  # lab/lab.py (tests/conftest.py puts lab/ on the path)

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests/doubles/sglang/launch_server.py"
SMI = ROOT / "tests/doubles/nvidia_smi.py"
PROF, _ = resolve("sglang", "0.5.16")
GPU = "81559,60000,18000"  # total, weights, KV cache (MiB)


class Server:
    def __init__(self, tmp: Path, saver: bool = True, extra: tuple[str, ...] = (), **env: str) -> None:
        self.port, self.state_dir = free_port(), tmp / "gpu"
        self.url = "http://127.0.0.1:%d" % self.port
        args = [sys.executable, str(DOUBLE), "--model-path", "/m", "--served-model-name", "kimi-k2.6",
                "--host", "127.0.0.1", "--port", str(self.port)] + (["--enable-memory-saver"] if saver else []) + list(extra)
        self.log = open(tmp / "server.log", "w+")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=dict(
            os.environ, BC_DOUBLE_SGLANG_VERSION=env.pop("version", "0.5.16"), BC_DOUBLE_LOAD_S="0", BC_DOUBLE_WARMUP_S="0",
            BC_DOUBLE_GPU=GPU, BC_DOUBLE_GPU_STATE=str(self.state_dir / "s.json"), SGLANG_HEALTH_CHECK_TIMEOUT="1", **env))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if request("GET", self.url + "/health", 2).status == 200:
                return
            time.sleep(0.05)
        raise AssertionError("the double did not come up: " + self.text())

    def http(self, method: str, path: str, payload: dict | None, timeout: float):
        return request(method, self.url + path, timeout, payload)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def used_mib(self) -> int:
        out = subprocess.run([sys.executable, str(SMI), "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, BC_DOUBLE_GPU_DIR=str(self.state_dir)))
        return int(out.stdout.strip())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self.log.close()


@pytest.fixture
def server(tmp_path):
    made: list[Server] = []

    def make(**kw) -> Server:
        where = tmp_path / str(len(made))
        where.mkdir()
        made.append(Server(where, **kw))
        return made[-1]
    yield make
    for s in made:
        if not s.log.closed:
            s.stop()


def completion(s: Server, tokens: int = 4, out: list | None = None) -> dict:
    r = s.http("POST", "/v1/completions", {"model": "kimi-k2.6", "prompt": "2+2=", "max_tokens": tokens}, 60)
    body = json.loads(r.body) if r.status == 200 else {"status": r.status}
    if out is not None:
        out.append(body)
    return body


# -- the decision ---------------------------------------------------------------------------------
SUP = {"supported": True, "releasable_gib": 17.58, "why": ""}


@pytest.mark.parametrize(("policy", "sizing", "sup", "strategy", "words"), [
    ("auto", {"fits": True, "has_gpu": True, "need_mib": 900, "free_mib": 3000}, SUP, "beside", "fits beside"),
    ("auto", {"fits": False, "has_gpu": True, "need_mib": 9900, "free_mib": 3000}, SUP, "release", "3000 MiB free + 18001"),
    ("auto", {"fits": False, "has_gpu": True, "need_mib": 30000, "free_mib": 3000}, SUP, "stop", "even after a KV release"),
    ("auto", {"fits": False, "has_gpu": True, "need_mib": 9900, "free_mib": 3000},
     {"supported": False, "releasable_gib": None, "why": "sglang runs without enable_memory_saver"}, "stop", "without enable_memory_saver"),
    ("auto", {"fits": False, "has_gpu": True, "need_mib": 9900, "free_mib": 3000},
     {"supported": True, "releasable_gib": None, "why": ""}, "stop", "does not say how much"),
    ("auto", {"fits": False, "has_gpu": False, "need_mib": 9900, "free_mib": 3000}, SUP, "stop", "no GPU"),
    ("auto", {"fits": False, "has_gpu": True, "need_mib": 9900, "free_mib": 3000}, None, "stop", "was not asked"),
    ("always", {"fits": True, "has_gpu": True, "need_mib": 1, "free_mib": 3000}, SUP, "stop", "always"),
    ("never", {"fits": False, "has_gpu": True, "need_mib": 99999, "free_mib": 3000}, SUP, "beside", "never"),
    ("release", {"fits": True, "has_gpu": False, "need_mib": 1, "free_mib": 3000}, SUP, "release", "release"),
])
def test_the_least_disruptive_strategy_that_fits_is_chosen(policy, sizing, sup, strategy, words):
    got = choose(policy, sizing, sup)
    assert got["strategy"] == strategy and words in got["why"]


def test_a_release_asked_for_that_the_server_cannot_do_names_the_fix():
    sup = {"supported": False, "releasable_gib": None, "why": "sglang runs without enable_memory_saver, so a release frees "
           "nothing: set bc_engine_settings.enable_memory_saver: true"}
    with pytest.raises(ValueError, match=r"bc_stop_policy=release, but .*bc_engine_settings.enable_memory_saver: true"):
        choose("release", {"fits": False, "has_gpu": True, "need_mib": 1, "free_mib": 0}, sup)
    with pytest.raises(ValueError, match=r"bc_stop_policy=sometimes: use one of auto\|always\|never\|release"):
        choose("sometimes", {}, None)


def test_the_servers_numbers_as_the_real_one_gives_them():
    info = json.loads((ROOT / "evidence/gpu-runs/2026-12-01-release-probe.log").read_text().split("memory_usage=")[1]
                      .split("\n")[0].replace("'", '"'))
    states = [{"memory_usage": usage} for usage in info]  # the real 0.5.16's /server_info, per rank
    assert json_values({"internal_states": states}, "internal_states[].memory_usage.kvcache") == [41.64]
    assert json_values({"internal_states": [{"memory_usage": {"kvcache": 3}}, {"memory_usage": {}}]},
                       "internal_states[].memory_usage.kvcache") == [3.0]


def test_engines_without_a_release_are_stopped_instead():
    llama, _ = resolve("llamacpp", None)
    got = support(llama, "llamacpp", None)
    assert got.pop("whole")["why"] == "llamacpp cannot release its weights in place (no whole release in its profile)"
    assert got == {"supported": False, "saver_on": None, "releasable_gib": None,
                   "why": "llamacpp cannot free its GPU memory in place (no release in its profile)", "setting": None}
    with pytest.raises(ReleaseError):
        Release(llama, "llamacpp", lambda *a: None, 5)


VLLM_SLEEPER = {"pid": 4242, "argv": ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "/m", "--host", "127.0.0.1",
                                      "--enable-sleep-mode"], "environ": {"VLLM_SERVER_DEV_MODE": "1"}}


@pytest.mark.parametrize(("server", "why"), [
    (VLLM_SLEEPER, ""),
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"][:4], "--host", "::1", "--enable-sleep-mode"]), ""),
    # not read (no unit given, not running, not ours to read): unknown, never supported; an /is_sleeping 200 is no proof
    (None, "its main process was not read"),
    (dict(VLLM_SLEEPER, argv=VLLM_SLEEPER["argv"][:-1]), "set bc_engine_settings.enable_sleep_mode: true"),
    (dict(VLLM_SLEEPER, environ={}), "VLLM_SERVER_DEV_MODE=1"),
    (dict(VLLM_SLEEPER, environ={"VLLM_SERVER_DEV_MODE": "0"}), "VLLM_SERVER_DEV_MODE=1"),
    # the dev routes are outside the API key: anyone who reaches the port could sleep, pause or reload the weights
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"][:4], "--host", "0.0.0.0", "--enable-sleep-mode"]),
     "refused: vllm listens on 0.0.0.0"),
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"][:4], "--enable-sleep-mode"]), "every interface (no --host)"),
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"][:4], "--host=10.0.0.5", "--enable-sleep-mode"]),
     "refused: vllm listens on 10.0.0.5"),
    # argparse reads --ho as --host: the address it listens on is not the one the first --host says
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"], "--ho", "0.0.0.0"]), "refused"),
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"], "--no_enable_sleep_mode"]), "runs without --enable-sleep-mode"),
    (dict(VLLM_SLEEPER, argv=[*VLLM_SLEEPER["argv"], "--enable-sleep"]), "abbreviation"),
    (dict(VLLM_SLEEPER, environ=None), "environment could not be read"),
])
def test_vllm_releases_only_from_what_the_running_server_really_has(server, why):
    """vLLM's release is judged from the server's main process (its argv and environment), not from the unit file
    or from /is_sleeping, which answers 200 without sleep mode; and only a server no one else can reach, since
    VLLM_SERVER_DEV_MODE=1 serves its dev routes outside the API key."""
    prof = resolve("vllm", "0.32")[0]
    got = support(prof, "vllm", HttpResult(200, '{"is_sleeping": false}'), server)
    assert got["supported"] is (why == "") and why in got["why"], got
    assert prof["release"]["steps"]["release"][0] == "/release_kv_cache_memory"  # the KV cache only, weights kept


def test_sglang_needs_no_process_reading_to_say_it_can_release():
    assert server_problem(PROF["release"], "sglang", None) == ""


# -- against the double, over HTTP ----------------------------------------------------------------
def test_what_the_server_says_it_can_release(server):
    on, off = server(), server(saver=False)
    got = support(PROF, "sglang", on.http("GET", "/server_info", None, 5))
    assert got["supported"] and got["saver_on"] and got["releasable_gib"] == 17.58
    got = support(PROF, "sglang", off.http("GET", "/server_info", None, 5))
    assert not got["supported"] and "set bc_engine_settings.enable_memory_saver: true" in got["why"]
    off.stop()
    got = support(PROF, "sglang", request("GET", off.url + "/server_info", 2))
    assert not got["supported"] and "whether it can release its memory is unknown" in got["why"]


def test_release_and_resume_free_and_return_the_memory_and_the_answer(server):
    s = server()
    before = s.used_mib()
    rel = Release(PROF, "sglang", s.http, 10)
    rel.release()
    assert before - s.used_mib() == 18000
    held: list = []
    t = threading.Thread(target=completion, args=(s, 4, held))
    t.start()  # sent while paused: held by the server, answered after continue
    time.sleep(0.5)
    assert held == [] and s.alive()
    rel.resume()
    t.join(30)
    assert s.used_mib() == before and held[0]["choices"][0]["text"] == "4"
    assert [x["step"] for x in rel.steps] == ["pause", "release", "resume", "continue"]
    assert all(x["http_status"] == 200 for x in rel.steps)


def test_work_still_running_is_aborted_by_the_pause_so_the_release_does_not_kill_the_server(server):
    s = server(BC_DOUBLE_TOKEN_MS="50")
    out: list = []
    t = threading.Thread(target=completion, args=(s, 400, out))
    t.start()
    time.sleep(0.5)
    Release(PROF, "sglang", s.http, 10).release()
    t.join(30)
    assert out[0]["choices"][0]["finish_reason"] == "abort" and s.alive()


def test_the_double_dies_as_the_real_server_does_on_a_release_while_busy_and_a_second_resume(server):
    busy = server(BC_DOUBLE_TOKEN_MS="50")
    threading.Thread(target=completion, args=(busy, 400), daemon=True).start()
    time.sleep(0.5)
    busy.http("POST", "/release_memory_occupation", {"tags": ["kv_cache"]}, 5)
    busy.proc.wait(10)
    assert "should be called only when server is idle" in busy.text()
    twice = server()
    rel = Release(PROF, "sglang", twice.http, 10)
    rel.release()
    rel.resume()
    with pytest.raises(ReleaseError) as err:
        rel.resume()
    twice.proc.wait(10)
    assert err.value.state == "unknown" and "KeyError: 'kv_cache'" in twice.text()


def test_without_the_saver_a_release_frees_nothing(server):
    s = server(saver=False)
    before = s.used_mib()
    Release(PROF, "sglang", s.http, 10).release()
    assert s.used_mib() == before


def test_a_failed_pause_leaves_the_server_serving_and_a_dead_one_unknown(server):
    s = server()
    s.stop()
    with pytest.raises(ReleaseError) as err:
        Release(PROF, "sglang", lambda m, p, b, t: request(m, s.url + p, t, b), 2).release()
    assert err.value.state == "unknown" and "pause failed" in str(err.value)


def test_a_scheduler_that_stays_busy_after_the_pause_is_not_released(server):
    s = server()
    prof = dict(PROF, load_path="/v1/loads-busy")  # a load endpoint that never says idle

    def http(method, path, payload, timeout):
        if path == "/v1/loads-busy":
            return request("GET", s.url + "/v1/completions", timeout)  # 404: in flight unknown
        return s.http(method, path, payload, timeout)
    with pytest.raises(ReleaseError) as err:
        Release(prof, "sglang", http, 5).release(idle_wait_s=0.5)
    assert err.value.state == "serving" and "not idle after the pause (unknown in flight)" in str(err.value)
    assert completion(s)["choices"][0]["text"] == "4"  # continued: not left paused


# -- the module, through the real ansible CLI, with the nvidia-smi double on PATH ----------------------
@pytest.fixture
def smi_path(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, SMI))
    (bindir / "nvidia-smi").chmod(0o755)
    return bindir


def adhoc_with_gpu(s: Server, smi_dir: Path, args: dict, module: str = "inference_memory") -> dict:
    old = dict(os.environ)
    os.environ.update(PATH="%s:%s" % (smi_dir, os.environ["PATH"]), BC_DOUBLE_GPU_DIR=str(s.state_dir))
    try:
        return adhoc(module, dict({"url": s.url, "engine_version": "0.5.16"}, **args))
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_the_module_releases_measures_and_resumes(server, smi_path):
    s = server()
    info = adhoc_with_gpu(s, smi_path, {}, "inference_memory_info")
    assert info["_status"] == "SUCCESS" and info["releasable_gib"] == 17.58
    r = adhoc_with_gpu(s, smi_path, {"state": "released", "need_mib": 18000})
    assert r["released"] and r["server_state"] == "released" and r["freed_mib"] == 18000 and r["gpu_checked"]
    r = adhoc_with_gpu(s, smi_path, {"state": "resumed"})
    assert r["server_state"] == "serving" and completion(s)["choices"][0]["text"] == "4"


def test_a_release_that_frees_too_little_is_resumed_at_once(server, smi_path):
    s = server(BC_DOUBLE_RELEASE_FREES="0.1")
    r = adhoc_with_gpu(s, smi_path, {"state": "released", "need_mib": 18000, "gpu_wait_s": 1})
    assert r["_status"] == "CHANGED" and not r["released"] and r["fell_back"] and r["server_state"] == "serving"
    assert r["freed_mib"] == 1800 and "resumed; the service is stopped instead" in r["why"]
    assert completion(s)["choices"][0]["text"] == "4" and s.alive()


# a resume that fails, each way the lab's release.resume_failed.restarted faults made it (issue #45: rows, not lab cycles):
# the server dies in it, or answers 200 and takes nothing back (believed by its 200 alone, the KV cache never came back)
@pytest.mark.parametrize(("fault", "said"), [
    ("oom", "the resume failed"),
    ("noop", "the resume answered 200 but the server took back 0 MiB on GPU 0"),
])
def test_a_resume_that_dies_or_gives_nothing_back_says_the_state_is_unknown(server, smi_path, fault, said):
    s = server(BC_DOUBLE_RESUME_FAILS=fault)
    released = adhoc_with_gpu(s, smi_path, {"state": "released", "need_mib": 100})
    assert released["released"], released
    r = adhoc_with_gpu(s, smi_path, {"state": "resumed", "timeout": 5, "expect_mib": released["freed_mib"], "gpu_wait_s": 1})
    assert r["_status"] == "FAILED!" and r["server_state"] == "unknown" and said in r["msg"], r
    if fault == "oom":
        s.proc.wait(10)
        assert "CUDA out of memory" in s.text()


def test_the_module_refuses_bad_input_and_a_missing_device(server, smi_path):
    s = server()
    r = adhoc_with_gpu(s, smi_path, {"state": "released", "need_mib": -1})
    assert r["_status"] == "FAILED!" and "need_mib must be >= 0" in r["msg"]
    r = adhoc_with_gpu(s, smi_path, {"state": "released", "device": 3})
    assert r["_status"] == "FAILED!" and r["server_state"] == "serving" and "device 3 is not present" in r["msg"]
    assert completion(s)["choices"][0]["text"] == "4"  # nothing was paused or released


# -- what each failed step leaves the server as (the steps' decisions; answers scripted per path) -----
def scripted(answers: dict[str, list[int | None]], calls: list[str]):
    """An HTTP exchange that answers each path with the next scripted status (None: no answer), as a
    front end that fails in that way would; what was asked is recorded."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import HttpResult

    def http(method, path, payload, timeout):
        calls.append(path)
        status = answers[path].pop(0) if len(answers[path]) > 1 else answers[path][0]
        body = '{"loads": [{"num_running_reqs": 1, "num_waiting_reqs": 0}]}' if path == "/v1/loads" else '{"error": {"message": "x"}}'
        return HttpResult(status, body if status else "", error="" if status else "refused")
    return http


@pytest.mark.parametrize(("answers", "state", "asked_continue"), [
    ({"/pause_generation": [500], "/continue_generation": [200]}, "serving", True),
    ({"/pause_generation": [500], "/continue_generation": [503]}, "unknown", True),
    ({"/pause_generation": [None], "/continue_generation": [200]}, "unknown", False),
    ({"/pause_generation": [200], "/v1/loads": [200], "/continue_generation": [503]}, "unknown", True),
    ({"/pause_generation": [200], "/v1/loads": [200], "/continue_generation": [200]}, "serving", True),
])
def test_a_failed_step_says_what_the_server_is_left_as(answers, state, asked_continue):
    calls: list[str] = []
    with pytest.raises(ReleaseError) as err:
        Release(PROF, "sglang", scripted(answers, calls), 5).release(idle_wait_s=0.2)
    assert err.value.state == state, str(err.value)
    assert ("/continue_generation" in calls) is asked_continue
    assert "/release_memory_occupation" not in calls and "/resume_memory_occupation" not in calls


# -- a whole-GPU release (#47): what the live server's info and the host say --------------------------------------
WHOLE = PROF["release"]["whole"]
# /server_info as 0.5.16 answers it (http_server.py 0.5.16:743-762): the start flags, the version, per-DP-rank usage
INFO = {"version": "0.5.16", "enable_memory_saver": True, "enable_weights_cpu_backup": True, "tp_size": 8, "pp_size": 1,
        "dp_size": 1, "nnodes": 1, "enable_dp_attention": False,
        "internal_states": [{"memory_usage": {"weight": 72.5, "kvcache": 41.64, "graph": 1.2, "token_capacity": 812345}}]}
GRAPH_ENV = {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": "1"}
HOST = 2_000_000  # MiB available


@pytest.mark.parametrize(("info", "environ", "host", "tags", "words"), [
    (INFO, {}, HOST, ["kv_cache", "weights"], ""),
    # 0.5.16 does not back the graph pool up (full_cuda_graph_backend.py 0.5.16:99-106): left resident, said why
    (INFO, GRAPH_ENV, HOST, ["kv_cache", "weights"], ""),
    (dict(INFO, version="0.5.21"), GRAPH_ENV, HOST, ["kv_cache", "weights", "cuda_graph"], ""),
    (dict(INFO, version="0.5.23"), {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": "True"}, HOST, ["kv_cache", "weights", "cuda_graph"], ""),
    (dict(INFO, version="0.5.23"), {}, HOST, ["kv_cache", "weights"], ""),       # the pool is not in the saver's region
    (dict(INFO, version="0.5.23"), None, HOST, ["kv_cache", "weights"], ""),     # environment not read: not released
    (dict(INFO, enable_weights_cpu_backup=False), {}, HOST, None, "weights: it runs without enable_weights_cpu_backup"),
    ({k: v for k, v in INFO.items() if k != "enable_weights_cpu_backup"}, {}, HOST, None, "without enable_weights_cpu_backup"),
    (dict(INFO, enable_memory_saver=False), {}, HOST, None, "kv_cache: it runs without enable_memory_saver"),
    (dict(INFO, internal_states=[{"memory_usage": {"kvcache": 41.64}}]), {}, HOST, None, "does not say how big it is"),
    (dict(INFO, tp_size=None), {}, HOST, None, "how many GPUs of this host it runs on is unknown"),
    (INFO, {}, None, None, "the host's available memory is unknown"),
    # 8 x 72.5 GiB = 593920 MiB pinned; 90% of 600000 is 540000
    (INFO, {}, 600_000, None, "the weights' pinned host copy needs 593920 MiB and the host has 600000 MiB available"),
    (dict(INFO, nnodes=2), {}, 600_000, ["kv_cache", "weights"], ""),            # 4 of the 8 ranks on this host
    (None, {}, HOST, None, "kv_cache: it runs without enable_memory_saver"),     # an unreadable answer
])
def test_a_whole_release_takes_what_the_live_server_and_the_host_can_do(info, environ, host, tags, words):
    got = whole_support(WHOLE, "sglang", info, environ, host)
    assert got["supported"] is (tags is not None) and words in got["why"], got
    if tags:
        assert got["tags"] == tags and got["checker"] == "/weights_checker"
        assert got["releasable_gib"] == round(41.64 + 72.5 + (1.2 if "cuda_graph" in tags else 0), 2)
        assert ("cuda_graph" in got["resident"]) is ("cuda_graph" not in tags)
    else:
        assert got["releasable_gib"] is None


def test_what_the_host_and_the_server_say_is_read_as_the_releases_define_it():
    assert meminfo_available_mib("MemTotal: 2113 kB\nMemAvailable:   1048576 kB\n") == 1024
    for text in (None, "", "MemFree: 5 kB", "MemAvailable: lots"):
        assert meminfo_available_mib(text) is None
    assert [env_true(e, "X") for e in ({"X": "1"}, {"X": "TRUE"}, {"X": "0"}, {}, None)] == [True, True, False, False, None]
    ranks = WHOLE["ranks"]
    assert host_gpus(INFO, ranks) == 8 and host_gpus(dict(INFO, dp_size=2), ranks) == 16
    assert host_gpus(dict(INFO, dp_size=8, enable_dp_attention=True), ranks) == 8
    assert host_gpus(dict(INFO, pp_size=0), ranks) is None and host_gpus(dict(INFO, tp_size=True), ranks) is None
    # the version without a checksum (0.5.10) and one that does not say: identity unprovable, no whole release
    for version in ("0.5.10", None):
        got = whole_support(WHOLE, "sglang", dict(INFO, version=version), {}, HOST)
        assert got["checker"] is None and not got["supported"] and "has no weights checksum" in got["why"]
    assert "no whole release" in support(resolve("vllm", "0.32")[0], "vllm", None)["whole"]["why"]


def test_the_release_sends_the_whole_tags_with_the_copys_deadline_and_refuses_unknown_ones():
    calls: list = []

    def http(method, path, payload, timeout):
        calls.append((path, payload, timeout))
        return HttpResult(200, '{"loads": [{"num_running_reqs": 0, "num_waiting_reqs": 0}]}')

    rel = Release(PROF, "sglang", http, 10, tags=["kv_cache", "weights"], move_timeout=600)
    rel.release()
    rel.resume()
    moved = {p: (pl, t) for p, pl, t in calls if p.endswith("memory_occupation")}
    assert moved == {"/release_memory_occupation": ({"tags": ["kv_cache", "weights"]}, 600),
                     "/resume_memory_occupation": ({"tags": ["kv_cache", "weights"]}, 600)}
    for tags in ([], ["optimizer"]):  # [] would be every tag to SGLang (weight_updater.py 0.5.16:193-194)
        with pytest.raises(ReleaseError, match="cannot release tags"):
            Release(PROF, "sglang", http, 10, tags=tags)


def looks(s: Server) -> dict:
    """What identity reads of a server (the product's own reading): its weights' checksum, the fixed prompt's
    fingerprint, the known prompt's greedy answer."""
    return identity_figures(s.http, PROF, "kimi-k2.6", "2+2=", 10, 30)


@pytest.mark.parametrize(("extra", "env", "tags", "verdict"), [
    (("--enable-weights-cpu-backup", "--tp-size", "2"), {}, ["kv_cache", "weights"], "ok"),
    # no backup: the weights' content is discarded, the resume answers 200 and the server answers garbage
    (("--tp-size", "2"), {}, ["kv_cache", "weights"], "mismatch"),
    # the graph pool in the saver's region, released on 0.5.16 (no backup of it): lost too; on 0.5.21 it comes back
    (("--enable-weights-cpu-backup",), {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": "1"}, ["kv_cache", "weights", "cuda_graph"], "mismatch"),
    (("--enable-weights-cpu-backup",), {"SGLANG_MEMORY_SAVER_CUDA_GRAPH": "1", "version": "0.5.23"},
     ["kv_cache", "weights", "cuda_graph"], "ok"),
])
def test_a_whole_release_comes_back_identical_only_with_what_backs_it_up(server, extra, env, tags, verdict):
    s = server(extra=extra, **env)
    info = json.loads(s.http("GET", "/server_info", None, 5).body)
    assert info["tp_size"] == (2 if "--tp-size" in extra else 1)
    before, used = looks(s), s.used_mib()
    assert len(before["checksum"]["ranks"]) == info["tp_size"]
    rel = Release(PROF, "sglang", s.http, 10, tags=tags, move_timeout=30)
    rel.release()
    assert used - s.used_mib() == 60000 + 18000  # the weights and the KV cache are off the GPU
    rel.resume()
    got = identity(before, looks(s), before["answer"])
    assert got["verdict"] == verdict, got
    assert s.alive() and s.used_mib() == used


def test_the_doubles_checker_and_info_have_the_releases_shapes(server):
    s = server(extra=("--enable-weights-cpu-backup",))
    info = json.loads(s.http("GET", "/server_info", None, 5).body)
    got = support(PROF, "sglang", s.http("GET", "/server_info", None, 5), {"argv": [], "environ": {}}, 10_000_000)
    assert got["whole"]["supported"] and got["whole"]["tags"] == ["kv_cache", "weights"], got
    assert got["whole"]["host_backup_mib"] == int(info["internal_states"][0]["memory_usage"]["weight"] * 1024)
    assert s.http("POST", "/weights_checker", {"action": "nope"}, 5).status == 400
    assert json.loads(s.http("POST", "/weights_checker", {"action": "snapshot"}, 5).body) == {"success": True, "message": "Success."}
    old = server(version="0.5.10")
    assert "ranks" not in json.loads(old.http("POST", "/weights_checker", {"action": "checksum"}, 5).body)


WHOLE_ARGS = {"tags": ["kv_cache", "weights"], "identity": True, "move_timeout": 30, "model": "kimi-k2.6"}


@pytest.mark.parametrize(("corrupt", "state", "verdict"), [
    (False, "serving", "ok"),
    # the weights come back wrong with HTTP 200 throughout (torch_memory_saver#71): only the proof tells
    (True, "unknown", "mismatch"),
])
def test_the_module_proves_the_resumed_server_is_the_one_released(server, smi_path, corrupt, state, verdict):
    s = server(extra=("--enable-weights-cpu-backup",))
    r = adhoc_with_gpu(s, smi_path, dict(WHOLE_ARGS, state="released", need_mib=78000))
    assert r["released"] and r["freed_mib"] == 78000, r  # the weights and the KV cache
    assert len(r["identity_before"]["checksum"]["ranks"]) == 1 and r["identity_before"]["answer"] == "4"
    assert set(r["identity_before"]["checksum"]["ranks"][0]) == {"per_gpu_checksum", "parallelism_info"}  # per rank only
    if corrupt:
        (s.state_dir / "corrupt-resume").write_text("")
    got = adhoc_with_gpu(s, smi_path, dict(WHOLE_ARGS, state="resumed", identity_before=r["identity_before"], expect_mib=78000))
    assert got["server_state"] == state and got["identity"]["verdict"] == verdict, got
    if not corrupt:
        assert got["identity"]["checks"] == {"checksum": True, "fingerprint": True, "answer": True}
    else:  # caught by the checksum while still paused: nothing answered from the wrong weights, never continued
        assert got["_status"] == "FAILED!" and "cannot be proven the one released" in got["msg"] and "stays paused" in got["msg"]
        assert got["identity"]["checks"]["checksum"] is False and [s["step"] for s in got["steps"]] == ["resume"]


def test_a_server_whose_identity_cannot_be_read_is_never_released(server, smi_path):
    s = server(extra=("--enable-weights-cpu-backup",), version="0.5.10")  # its checker answers no ranks
    used = s.used_mib()
    r = adhoc_with_gpu(s, smi_path, dict(WHOLE_ARGS, state="released", need_mib=78000))
    assert not r["released"] and r["fell_back"] and r["server_state"] == "serving", r
    assert "checksum could not be read before the release" in r["why"] and s.used_mib() == used
    assert completion(s)["choices"][0]["text"] == "4"
    got = adhoc_with_gpu(s, smi_path, dict(WHOLE_ARGS, state="resumed"))
    assert got["_status"] == "FAILED!" and "identity_before is required" in got["msg"]
    got = adhoc_with_gpu(s, smi_path, dict(WHOLE_ARGS, state="released", identity=False))  # weights never on trust
    assert got["_status"] == "FAILED!" and "tags with weights need identity: true" in got["msg"]
