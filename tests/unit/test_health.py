"""The probe's decision, driven with the answers each engine gives while it starts (from the
engines' sources: SGLang http_server.py, llama.cpp server-http.cpp, vLLM api_server.py)."""

import json
from pathlib import Path

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import (
    HttpResult,
    classify,
    completion_answer,
    front_end,
    in_flight,
    journal_stage,
    parse_prometheus,
    queued_job,
    startup_phases,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import parse_show

ROOT = Path(__file__).resolve().parents[2]
ACTIVE = {"Id": "sglang-k26-ddtree.service", "ActiveState": "active", "SubState": "running", "NRestarts": 0,
          "ExecMainStatus": 0, "LoadState": "loaded"}
REFUSED = HttpResult(error="connection refused", error_kind="refused")
LLAMA_LOADING = json.dumps({"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}})


@pytest.mark.parametrize(("engine", "http", "phase", "ready"), [
    ("sglang", REFUSED, "loading", False),  # weights / CUDA graphs: port closed
    ("sglang", HttpResult(503, ""), "warming", False),  # warmup request not done yet
    ("sglang", HttpResult(200, ""), "ready", True),
    ("llamacpp", HttpResult(503, LLAMA_LOADING), "loading", False),
    ("llamacpp", HttpResult(200, '{"status":"ok"}'), "ready", True),
    ("vllm", REFUSED, "loading", False),
    ("vllm", HttpResult(200, ""), "ready", True),
    ("sglang", HttpResult(error="timed out", error_kind="timeout"), "warming", False),
    ("sglang", HttpResult(500, "<html>oops</html>"), "loading", False),
])
def test_each_engine_start_up_phase(engine, http, phase, ready):
    r = classify(engine, "status", http, ACTIVE, 0)
    assert (r["phase"], r["ready"], r["failed"]) == (phase, ready, False)


def test_refused_without_a_unit_is_down():
    assert classify("sglang", "status", REFUSED)["phase"] == "down"


@pytest.mark.parametrize(("unit", "reason"), [
    (dict(ACTIVE, ActiveState="failed", SubState="failed", ExecMainStatus=1), "has failed"),
    (dict(ACTIVE, ActiveState="inactive", SubState="dead"), "is inactive"),
    (dict(ACTIVE, ActiveState="activating", SubState="auto-restart", ExecMainStatus=9), "process exited"),
    (dict(ACTIVE, NRestarts=2), "restarted 2 time"),
    (dict(ACTIVE, LoadState="not-found"), "not installed"),
])
def test_pointless_waits_fail_at_once(unit, reason):
    r = classify("sglang", "status", REFUSED, unit, 0)
    assert r["failed"] and r["phase"] == "failed" and reason in r["reason"]


# `systemctl list-jobs --no-legend --no-pager` as systemd 252 prints it (read in the lab during a restart)
LIST_JOBS = "175 slowstop.service restart running\n176 other.service start waiting\n"


def test_the_queued_job_of_the_unit_is_read_and_no_other_units():
    assert queued_job(LIST_JOBS, "slowstop.service") == "restart"
    assert queued_job(LIST_JOBS, "other.service") == "start"
    assert queued_job(LIST_JOBS, "slow.service") == "" and queued_job("", "slowstop.service") == ""
    assert queued_job("No jobs running.\n", "slowstop.service") == ""


@pytest.mark.parametrize("job", ["start", "restart", "try-restart", "reload-or-start"])
@pytest.mark.parametrize(("active", "sub"), [("deactivating", "stop-sigterm"), ("inactive", "dead")])
def test_a_unit_with_a_start_queued_is_waited_for(job, active, sub):
    """The first half of a restart (the old server still drains), or a start systemd has queued and not run yet:
    a start follows. Waiting is the point."""
    r = classify("sglang", "status", REFUSED, dict(ACTIVE, ActiveState=active, SubState=sub, JobType=job), 0)
    assert not r["failed"] and not r["ready"] and r["phase"] == "restarting" and job in r["reason"]


@pytest.mark.parametrize("job", ["", "stop", None])
def test_a_deactivating_unit_with_no_start_queued_fails_at_once(job):
    unit = dict(ACTIVE, ActiveState="deactivating", SubState="stop-sigterm")
    if job is not None:
        unit["JobType"] = job
    r = classify("sglang", "status", REFUSED, unit, 0)
    assert r["failed"] and "deactivating: nothing is starting" in r["reason"]


def test_journal_failure_line_fails_the_probe():
    r = classify("sglang", "status", HttpResult(503, ""), ACTIVE, 0, journal_failure="scheduler died during initialization")
    assert r["failed"] and "scheduler died" in r["reason"]


def test_completion_right_wrong_and_malformed_answers():
    body = json.dumps({"choices": [{"text": " 4", "index": 0}]})
    assert classify("llamacpp", "completion", HttpResult(200, body), expect="4")["ready"]
    wrong = classify("llamacpp", "completion", HttpResult(200, json.dumps({"choices": [{"text": "5"}]})), expect="4")
    assert wrong["failed"] and "answered '5' where '4' was expected" in wrong["reason"]
    html = classify("llamacpp", "completion", HttpResult(200, "<html>proxy error</html>"), expect="4")
    assert not html["ready"] and not html["failed"] and "not JSON" in html["reason"]
    assert completion_answer('{"choices": []}') == (None, "the completion answer has no choices[0].text")


SGLANG_JOURNAL = """[2026-11-29 10:00:01 TP0] Load weight begin. avail mem=139.10 GB
[2026-11-29 10:03:40 TP0] Load weight end. elapsed=219.32 s, type=DeepseekV3ForCausalLM, avail mem=71.2 GB
[2026-11-29 10:03:42 TP0] KV Cache is allocated. #tokens: 812345, K size: 20 GB
[2026-11-29 10:03:50 TP0] Capture decode cuda graph begin. This can take up to several minutes. avail mem=30 GB
""".splitlines()


def test_journal_stage_is_the_last_progress_line():
    stage, line, failure = journal_stage(SGLANG_JOURNAL, "sglang")
    assert stage == "Capture decode CUDA graph" and "TP0" in line and failure == ""
    stage, _line, _f = journal_stage(SGLANG_JOURNAL[:2], "sglang")
    assert stage == "Load weight end (219.32 s)"
    _s, _l, failure = journal_stage([*SGLANG_JOURNAL, "[TP0] Scheduler watchdog timeout (self.watchdog_timeout=300)"], "sglang")
    assert "watchdog" in failure


def test_llamacpp_journal_stage():
    lines = ["srv    load_model: loading model '/opt/lab-model/lab-tiny.gguf'", "main: model loaded"]
    assert journal_stage(lines, "llamacpp")[0] == "Model loaded"


METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="kimi",tp_rank="0"} 3.0
sglang:num_queue_reqs{engine_type="unified",model_name="kimi",tp_rank="0"} 2.0
sglang:startup_time_seconds{phase="load_weights"} 219.3
sglang:startup_time_seconds{phase="cuda_graph"} 95.5
garbage line {
"""


VLLM_METRICS = 'vllm:num_requests_running{model_name="m"} 3.0\nvllm:num_requests_waiting{model_name="m"} 2.0\n'
# SGLang's /v1/loads (entrypoints/v1_loads.py:130, 0.5.10): live counts of the scheduler's batch and queue
LOADS = json.dumps({"timestamp": "2026-12-01T00:00:00+00:00", "version": "0.5.10", "dp_rank_count": 1,
                    "loads": [{"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 2}],
                    "aggregate": {"total_running_reqs": 3, "total_waiting_reqs": 2, "total_reqs": 5}})


def test_in_flight_work_and_startup_phases_per_engine_and_version():
    assert parse_prometheus(METRICS)["sglang:num_running_reqs"][0][0]["tp_rank"] == "0"
    total, each = in_flight(VLLM_METRICS, "vllm")
    assert total == 5.0 and each == {"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 2.0}
    assert in_flight(LOADS, "sglang") == (5.0, {"loads[].num_running_reqs": 3.0, "loads[].num_waiting_reqs": 2.0})
    # what the real SGLang 0.5.16 answered on the H200 (no "aggregate" block): 1 running, summed over the ranks
    real = (ROOT / "tests/unit/fixtures/sglang-0.5.16-v1-loads-busy.json").read_text()
    assert in_flight(real, "sglang")[0] == 1.0
    # SGLang's sampled gauges are never read for the drain: a /metrics text is no load answer
    assert in_flight(METRICS, "sglang") == (None, {})
    assert in_flight("llamacpp:requests_processing 0\n", "vllm") == (None, {})
    assert startup_phases(METRICS, "sglang") == {}  # 0.5.10-0.5.16: no real start-up time gauge
    assert startup_phases(METRICS, resolve("sglang", "0.5.23")[0]) == {"load_weights": 219.3, "cuda_graph": 95.5}
    assert startup_phases(METRICS, "llamacpp") == {}


# sglang:http_requests_active as the middleware exports it (utils/common.py 0.5.16:2356-2404): the drain's own
# scrape, a load balancer's health check held by a pause, and work: one completion, one held chat request
FRONT = """# TYPE sglang:http_requests_active gauge
sglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0
sglang:http_requests_active{endpoint="/health",method="GET"} 3.0
sglang:http_requests_active{endpoint="/v1/loads",method="GET"} 0.0
sglang:http_requests_active{endpoint="/v1/completions",method="POST"} 1.0
sglang:http_requests_active{endpoint="/v1/chat/completions",method="POST"} 1.0
"""
# what 0.5.16's /v1/loads says meanwhile: the idle snapshot (the queued completion has had no prefill yet)
IDLE_SNAPSHOT = json.dumps({"timestamp": "2026-12-02T01:00:00", "version": "0.5.16",
                            "loads": [{"dp_rank": 0, "num_running_reqs": 0, "num_waiting_reqs": 0}]})


def test_the_front_end_counts_work_and_never_health_checks_scrapes_or_control_calls():
    assert front_end(FRONT, "sglang") == (2.0, "")
    assert front_end(FRONT.replace("} 1.0\nsglang:http_requests_active{endpoint=\"/v1/chat", "} 0.0\nsglang:http_requests_active"
                                   "{endpoint=\"/v1/chat"), "sglang")[0] == 1.0
    # an endpoint the profile does not know is work: unknown never reads as idle
    assert front_end('sglang:http_requests_active{endpoint="/v1/rerank",method="POST"} 1.0\n', "sglang")[0] == 1.0
    # no such gauge (metrics off, a server that is not SGLang): unknown, not zero, and the setting named
    assert front_end(METRICS, "sglang")[0] is None and "enable_metrics: true" in front_end("", "sglang")[1]
    assert front_end('sglang:http_requests_active{endpoint="/generate",method="POST"} NaN\n', "sglang")[0] is None
    assert front_end(FRONT, "llamacpp")[0] is None  # no front-end gauge in that profile


# what the real vLLM 0.32 answered with its EngineCore stopped (SIGSTOP) and two completions open
# (docs/engines.md): its engine gauges are the engine's last report, its /load the API server's own count
VLLM_STALLED_METRICS = ('vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n'
                        'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n')
VLLM_ARGV = ["/opt/vllm/bin/python3", "/opt/vllm/bin/vllm", "serve", "/m", "--host", "127.0.0.1",
             "--enable-server-load-tracking"]


def running(argv: list[str] | None, environ: dict | None = None) -> dict | None:
    """A server's main process as bc_host.main_process gives it (None: not read)."""
    return None if argv is None else {"pid": 4242, "argv": argv, "environ": {} if environ is None else environ}


@pytest.mark.parametrize(("body", "argv", "environ", "count", "why"), [
    ('{"server_load":2}', VLLM_ARGV, None, 2.0, ""),
    ('{"server_load":0}', VLLM_ARGV, None, 0.0, ""),
    ('{"server_load":0}', [*VLLM_ARGV, "--api-server-count", "1"], None, 0.0, ""),
    # without the flag vLLM's count is never moved and reads 0 (launchers/api_server/app_state.py:175-176)
    ('{"server_load":0}', VLLM_ARGV[:-1], None, None, "set bc_engine_settings.enable_server_load_tracking: true"),
    ('{"server_load":0}', [*VLLM_ARGV, "--no-enable-server-load-tracking"], None, None, "lacks"),
    # vLLM's parser reads _ as - and takes abbreviations (argparse allow_abbrev)
    ('{"server_load":0}', [*VLLM_ARGV, "--no_enable_server_load_tracking"], None, None, "lacks"),
    ('{"server_load":0}', [*VLLM_ARGV, "--no-enable-server-load"], None, None, "abbreviates"),
    ('{"server_load":0}', [*VLLM_ARGV[:-1], "--enable_server_load_tracking"], None, 0.0, ""),
    # more than one front-end process: each counts its own, the answer is one of them
    ('{"server_load":0}', [*VLLM_ARGV, "--api-server-count", "4"], None, None, "--api-server-count 4"),
    ('{"server_load":0}', [*VLLM_ARGV, "--data-parallel-size=2"], None, None, "--data-parallel-size 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "--api-server", "2"], None, None, "abbreviates"),
    # every spelling vLLM 0.32 takes (module_utils/bc_engines.py cites its source): short, `=`, `_` for `-`, the local
    # size of hybrid LB mode; a value that is no number, or none, is unknown: never one process
    ('{"server_load":0}', [*VLLM_ARGV, "-dp", "2"], None, None, "--data-parallel-size 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dp=2"], None, None, "--data-parallel-size 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "--data_parallel_size", "2"], None, None, "--data-parallel-size 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "--data_parallel_size=4"], None, None, "--data-parallel-size 4"),
    ('{"server_load":0}', [*VLLM_ARGV, "-asc", "3"], None, None, "--api-server-count 3"),
    ('{"server_load":0}', [*VLLM_ARGV, "-as", "3"], None, None, "abbreviates"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dpl", "2", "--data-parallel-hybrid-lb"], None, None, "--data-parallel-size-local 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dp", "1", "-dp", "2"], None, None, "--data-parallel-size 2"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dp", "two"], None, None, "'two', not a number"),
    ('{"server_load":0}', [*VLLM_ARGV, "--data-parallel-size="], None, None, "'', not a number"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dp", "--host", "0.0.0.0"], None, None, "no value"),
    ('{"server_load":0}', [*VLLM_ARGV, "--config", "/etc/vllm.yaml"], None, None, "reads settings from --config"),
    ('{"server_load":0}', [*VLLM_ARGV, "-dp", "1", "--api_server_count=1", "-dpl=1"], None, 0.0, ""),
    ('{"server_load":0}', VLLM_ARGV, {"VLLM_USE_RUST_FRONTEND": "1"}, None, "VLLM_USE_RUST_FRONTEND=1"),
    ('{"server_load":0}', None, None, None, "main process was not read"),  # no unit given: unknown, never 0
    ('{"server_load":-1}', VLLM_ARGV, None, None, "not a count"),
    ('{"server_load":true}', VLLM_ARGV, None, None, "not a count"),
    ('{"load":0}', VLLM_ARGV, None, None, "not a count"),
    ("Internal Server Error", VLLM_ARGV, None, None, "not a count"),
])
def test_vllms_front_end_count_is_believed_only_from_a_server_that_counts(body, argv, environ, count, why):
    got, reason = front_end(body, "vllm", running(argv, environ))
    assert got == count and why in reason, (got, reason)


def test_an_unreadable_environment_leaves_the_count_unknown_not_believed():
    got, reason = front_end('{"server_load":0}', "vllm", {"pid": 1, "argv": VLLM_ARGV, "environ": None})
    assert got is None and "environment could not be read" in reason


def test_a_stalled_vllm_engine_is_never_read_as_idle():
    """The engine's gauges say 0 and 0 while two requests wait on a stopped EngineCore: the drain counts the larger
    of the engine's and the API server's own count, and without the latter it does not know."""
    from inference_load_info import load_fields

    prof, p = resolve("vllm", "0.32")[0], {"engine": "vllm"}
    busy = load_fields(p, prof, HttpResult(200, VLLM_STALLED_METRICS), False, gauges('{"server_load":2}'), running(VLLM_ARGV))
    assert busy["in_flight"] == 2.0 and busy["in_flight_by_metric"]["front end (/load)"] == 2.0, busy
    idle = load_fields(p, prof, HttpResult(200, VLLM_STALLED_METRICS), False, gauges('{"server_load":0}'), running(VLLM_ARGV))
    assert idle["in_flight"] == 0.0
    blind = load_fields(p, prof, HttpResult(200, VLLM_STALLED_METRICS), False, gauges('{"server_load":0}'), running(VLLM_ARGV[:-1]))
    assert blind["in_flight"] is None and "enable_server_load_tracking" in blind["in_flight_unknown"], blind
    gone = load_fields(p, prof, HttpResult(200, VLLM_STALLED_METRICS), False, HttpResult(404, "Not Found"), running(VLLM_ARGV))
    assert gone["in_flight"] is None and "/load answered HTTP 404" in gone["in_flight_unknown"], gone


def test_vllms_own_drain_is_stopping_never_ready_or_dead():
    """Once SIGTERM began vLLM's drain (--shutdown-timeout) /health still answers 200 and each new request 500 with
    these words (the real 0.32 server, for 5 s): the readiness, which asks a completion of vLLM, says stopping."""
    body = ('{"error":{"message":"cannot schedule new futures after shutdown","type":"InternalServerError",'
            '"param":null,"code":500}}')
    got = classify("vllm", "completion", HttpResult(500, body), None)
    assert not got["ready"] and not got["failed"] and got["phase"] == "stopping", got
    assert "cannot schedule new futures after shutdown" in got["reason"]
    assert resolve("vllm", "0.32")[0]["readiness_generates"] is True


@pytest.mark.parametrize("body", ['{"error": {"message": "The engine is currently busy; retry later."}}', ""])
def test_a_vllm_completions_503_is_a_busy_server_not_a_dead_engine(body):
    """Admission control (a full queue) and elastic scaling answer a completion 503 (exceptions.py:156-175); only
    /health's 503 is EngineDeadError."""
    got = classify("vllm", "completion", HttpResult(503, body), None)
    assert not got["failed"] and not got["ready"] and got["phase"] == "busy", got
    assert classify("vllm", "status", HttpResult(503, ""), None)["failed"]  # /health


def gauges(body: str, status: int = 200) -> HttpResult:
    return HttpResult(status, body)


def test_a_drain_never_reads_zero_from_the_snapshot_while_the_front_end_holds_work():
    from inference_load_info import load_fields

    p = {"engine": "sglang"}
    prof = resolve("sglang", "0.5.16")[0]
    busy = load_fields(p, prof, HttpResult(200, IDLE_SNAPSHOT), False, gauges(FRONT))
    assert busy["in_flight"] == 2.0 and busy["in_flight_by_metric"]["front end (sglang:http_requests_active)"] == 2.0
    idle = load_fields(p, prof, HttpResult(200, IDLE_SNAPSHOT), False,
                       gauges('sglang:http_requests_active{endpoint="/metrics",method="GET"} 1.0\n'))
    assert idle["in_flight"] == 0.0  # the drain's own scrape is not work
    off = load_fields(p, prof, HttpResult(200, IDLE_SNAPSHOT), False, gauges(METRICS))
    assert off["in_flight"] is None and "enable_metrics: true" in off["in_flight_unknown"]
    down = load_fields(p, prof, HttpResult(200, IDLE_SNAPSHOT), False, HttpResult(error="timed out", error_kind="timeout"))
    assert down["in_flight"] is None and "/metrics answered timed out" in down["in_flight_unknown"]
    # the scheduler's count stays in: the larger of the two
    assert load_fields(p, prof, HttpResult(200, LOADS), False, gauges(FRONT))["in_flight"] == 5.0
    # a unit that does not run holds nothing, whatever a stale answer says
    assert load_fields(p, prof, HttpResult(200, IDLE_SNAPSHOT), True, gauges(FRONT))["in_flight"] == 0.0


def test_profiles_follow_the_engine_version_and_say_when_it_is_not_a_known_one():
    p10, note10 = resolve("sglang", "0.5.10")
    p23, _ = resolve("sglang", "0.5.23")
    assert note10 == "" and p10["liveness_path"] == "/health" and p23["liveness_path"] == "/ready"
    between, note = resolve("sglang", "0.5.20")
    assert between["liveness_path"] == "/health" and "using 0.5.16's" in note
    newer, note = resolve("sglang", "0.6.1")
    assert newer["liveness_path"] == "/ready" and "using 0.5.23's" in note
    older, note = resolve("sglang", "0.4.0")
    assert older["liveness_path"] == "/health" and "using 0.5.10's" in note


# vLLM 0.32's answer to a completion once its EngineCore is dead (the real CPU server, its EngineCore SIGKILLed)
VLLM_DEAD = json.dumps({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                                  "type": "InternalServerError", "param": None, "code": 500}})


def test_vllm_dead_engines_500_fails_at_once_with_its_words():
    r = classify("vllm", "completion", HttpResult(500, VLLM_DEAD), ACTIVE, 0, expect="4")
    assert r["failed"] and r["phase"] == "failed"
    assert "HTTP 500" in r["reason"] and "EngineCore encountered an issue" in r["reason"]
    # another 500 is not taken for a dead engine: the wait goes on, saying the status is not one of starting
    other = classify("vllm", "completion", HttpResult(500, '{"error": {"message": "out of memory"}}'), ACTIVE, 0)
    assert not other["failed"] and other["phase"] == "loading"


def test_vllm_503_is_a_dead_engine_not_a_warmup():
    # entrypoints/serve/instrumentator/health.py: 503 only on EngineDeadError
    r = classify("vllm", "status", HttpResult(503, ""), ACTIVE, 0)
    assert r["failed"] and "engine is dead" in r["reason"]


def test_unit_show_parsing_and_unknown_engine():
    state = parse_show("ActiveState=active\nNRestarts=3\nInvocationID=abc\nnoise", numbers=True)
    assert state == {"ActiveState": "active", "NRestarts": 3, "InvocationID": "abc"}
    with pytest.raises(ValueError, match="engine 'tgi' is not known; use one of: llamacpp, sglang, vllm"):
        classify("tgi", "status", REFUSED)


# -- engine truth: the lines and statuses of the engines' own sources -------------------------------
@pytest.mark.parametrize(("line", "stage"), [
    # SGLang 0.5.16 model_runner_components/cuda_graph_setup.py:257-268 (seen in the real journal on the H200)
    ("Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8], avail mem=30.00 GB", "Capture target decode CUDA graph"),
    ("Capture target decode CUDA graph end. elapsed=3.21 s, mem usage=0.40 GB, avail mem=29.60 GB.",
     "Captured target decode CUDA graph (3.21 s)"),
    # SGLang 0.5.10 cuda_graph_runner.py / model_runner.py:2566
    ("Capture cuda graph begin. This can take up to several minutes. avail mem=30.00 GB", "Capture CUDA graph"),
    ("Capture piecewise CUDA graph begin. avail mem=30.00 GB", "Capture piecewise CUDA graph"),
])
def test_sglang_capture_lines_of_each_version_move_the_stage(line, stage):
    assert journal_stage(["KV Cache is allocated. #tokens: 1", line], "sglang")[0] == stage


@pytest.mark.parametrize("line", [
    "SIGQUIT received. signum=3, frame=None. It usually means one child failed.",  # tokenizer_manager.py:3262 (0.5.16)
    "Scheduler hit an exception: Traceback (most recent call last): ...",  # scheduler.py:4643 (0.5.16)
])
def test_sglang_fatal_lines_after_start_up_fail_the_probe(line):
    assert journal_stage([line], "sglang")[2]


def test_a_health_check_that_timed_out_is_not_fatal_and_old_lines_are_history():
    """SGLang logs "Health check failed" when a /health call while paused waits out its timeout, and
    recovers at the next check that sees output (http_server.py 0.5.16:674-683): not a fatal line. A
    fatal line counts only in the probe's own window (journalctl -o short-unix stamps)."""
    line = "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 10:00:00."
    assert journal_stage([line], "sglang")[2] == ""
    old = "1796160000.000001 ct200 sglang-k26[41]: [TP0] Scheduler watchdog timeout (self.watchdog_timeout=300)"
    assert journal_stage([old], "sglang", failures_since=1796160100.0)[2] == ""
    assert journal_stage([old], "sglang", failures_since=1796159000.0)[2].startswith("[TP0] Scheduler watchdog timeout")
    assert journal_stage(["1796160000.5 ct200 sglang-k26[41]: Load weight begin"], "sglang", 1796160100.0)[0] == "Load weight begin"


@pytest.mark.parametrize(("environ", "hung", "wait"), [
    (None, 15.0, 25.0), ({}, 15.0, 25.0), ({"PATH": "/bin", "SGLANG_HEALTH_CHECK_TIMEOUT": "8"}, 6.0, 13.0),
    ({"SGLANG_HEALTH_CHECK_TIMEOUT": "40"}, 30.0, 45.0), ({"SGLANG_HEALTH_CHECK_TIMEOUT": "abc"}, 15.0, 25.0),
    ({"SGLANG_HEALTH_CHECK_TIMEOUT": "0"}, 15.0, 25.0),
])
def test_the_hung_scheduler_threshold_follows_the_servers_health_check_timeout(environ, hung, wait):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES, with_health_timeout

    prof = with_health_timeout(ENGINES["sglang"], environ)
    assert (prof["hung_503_after_s"], prof["min_timeout_s"]) == (hung, wait)
    assert with_health_timeout(ENGINES["llamacpp"], environ) is ENGINES["llamacpp"]


def test_a_503_that_took_the_health_check_timeout_is_a_hung_scheduler_not_a_warmup():
    # http_server.py health_generate: Starting -> 503 at once; Up but no token for 20 s -> 503 after 20 s
    assert classify("sglang", "status", HttpResult(503, "", latency_ms=12), ACTIVE, 0)["phase"] == "warming"
    hung = classify("sglang", "status", HttpResult(503, "", latency_ms=20040), ACTIVE, 0)
    assert hung["failed"] and "hung scheduler" in hung["reason"]


# the lab's hung-scheduler faults (issue #45: rows, not lab cycles): the SGLang double's /health waits the health-check
# timeout the unit sets, then answers 503; judged hung at that first probe, by the timeout the server runs with
@pytest.mark.parametrize(("environ", "latency_ms", "hung"), [
    ({"SGLANG_HEALTH_CHECK_TIMEOUT": "16"}, 16040, True),
    ({"SGLANG_HEALTH_CHECK_TIMEOUT": "8"}, 8040, True),  # below the default's 15 s threshold, still hung
    (None, 8040, False),  # the default's threshold: an 8 s 503 is a warmup there
    ({"SGLANG_HEALTH_CHECK_TIMEOUT": "16"}, 12, False),  # a 503 at once: starting, not hung
])
def test_a_hung_scheduler_is_judged_at_its_first_probe_by_the_servers_own_timeout(environ, latency_ms, hung):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES, with_health_timeout

    r = classify(with_health_timeout(ENGINES["sglang"], environ), "status", HttpResult(503, "", latency_ms=latency_ms), ACTIVE, 0)
    assert r["failed"] is hung and ("hung scheduler" in r["reason"]) is hung, r
    assert hung or r["phase"] == "warming", r


# SGLang's in-flight work for the drain: its live /v1/loads, never the sampled gauge (the lab's stale-gauge fault: the
# gauge stuck at 0 while a long request runs); a gauge alone is no answer (unknown), never zero
@pytest.mark.parametrize(("body", "count"), [
    (json.dumps({"loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0}]}), 1.0),
    ('sglang:num_running_reqs{tp_rank="0"} 0.0\nsglang:num_queue_reqs{tp_rank="0"} 0.0\n', None),
    ("", None),
])
def test_sglangs_in_flight_work_is_its_live_load_never_a_stale_gauge(body, count):
    assert in_flight(body, "sglang")[0] == count


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(("status", "body", "text"), [
    (404, '{"object": "error", "message": "The model `x` does not exist.", "code": 404}', "The model `x` does not exist."),
    (401, '{"error": "Unauthorized"}', "Unauthorized"),
    (400, '{"error": {"message": "max_tokens must be at least 1", "type": "BadRequestError"}}', "max_tokens must be at least 1"),
])
def test_a_ready_servers_4xx_fails_the_completion_at_once_with_its_own_message(engine, status, body, text):
    r = classify(engine, "completion", HttpResult(status, body), ACTIVE, 0, expect="4")
    assert r["failed"] and f"HTTP {status}: {text}" in r["reason"]


def test_sglang_0_5_10_engine_startup_time_is_not_a_start_up_time():
    # 0.5.10 defines sglang:engine_startup_time and never sets it: not read as a phase
    assert startup_phases('sglang:engine_startup_time{tp_rank="0"} 0.0\n', "sglang") == {}


def test_vllm_current_kv_cache_line_moves_the_stage():
    assert journal_stage(["GPU KV cache size: 1,234,567 tokens"], "vllm")[0] == "KV Cache is allocated (1,234,567 tokens)"


def test_the_real_sglang_0_5_16_journal_moves_the_stage_through_each_step():
    """Lines the real SGLang 0.5.16 server logged on the H200 (evidence/gpu-runs/2026-12-01-real-sglang-probe.log)."""
    log = (ROOT / "evidence/gpu-runs/2026-12-01-real-sglang-probe.log").read_text().splitlines()
    lines = [line for line in log if line.startswith("[2026-12-01")]
    stages = []
    for i in range(1, len(lines) + 1):
        stage = journal_stage(lines[:i], "sglang")[0]
        if stage and (not stages or stages[-1] != stage):
            stages.append(stage)
    assert stages[:4] == ["Load weight begin", "Load weight end (2.02 s)", "KV Cache is allocated", "Capture target decode CUDA graph"]
    assert "Captured target decode CUDA graph (7.14 s)" in stages and stages[-1] == "Warmup done: ready to roll"
    assert not any(journal_stage(lines[:i], "sglang")[2] for i in (len(lines),))  # no fatal line in a good start


def test_sglang_tp1_process_titles_are_matched():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import engine_process

    spec = ENGINES["sglang"]["processes"]
    # seen on the real 0.5.16 at TP1: no _TP0 suffix
    assert engine_process(["sglang::scheduler"], spec) and engine_process(["sglang::detokenizer"], spec)
    assert engine_process(["python3", "-m", "sglang.launch_server", "--model-path", "/m"], spec)


@pytest.mark.parametrize(("argv", "flag", "on", "value"), [
    (["vllm", "serve", "--enable-x"], "--enable-x", True, None),
    (["vllm", "serve", "--enable-x", "--no-enable-x"], "--enable-x", False, None),
    (["vllm", "serve", "--no-enable-x", "--enable-x"], "--enable-x", True, None),
    (["vllm", "serve", "--enable-xy"], "--enable-x", False, None),  # another flag sharing a prefix
    (["vllm", "serve", "--enable_x"], "--enable-x", True, None),  # _ read as -
    (["vllm", "serve", "--enable-x", "--no_enable_x"], "--enable-x", False, None),
    (["vllm", "serve", "--enable-x", "--no-enable"], "--enable-x", None, None),  # an abbreviation: unknown
    (["vllm", "--host", "a", "--host=b"], "--host", None, "b"),
    (["vllm", "--host=b", "--host", "a"], "--host", None, "a"),
    (["vllm", "--host"], "--host", None, None),
    (["vllm", "--host", "--port", "1"], "--host", None, None),  # a flag is no value
    (["vllm", "--host", "127.0.0.1", "--ho", "0.0.0.0"], "--host", None, None),  # argparse reads --ho as --host
    (["vllm", "--ho=::"], "--host", None, None),
    ([], "--host", False, None),
])
def test_flags_are_read_from_an_argv_as_argparse_would(argv, flag, on, value):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import flag_on, flag_value

    assert on is None or flag_on(argv, flag) is on
    assert flag_value(argv, flag) == value
    if on is None and "--no-enable" in argv:
        assert flag_on(argv, flag) is None


@pytest.mark.parametrize(("host", "only_here"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    (None, False), ("", False), ("0.0.0.0", False), ("::", False), ("10.0.0.5", False), ("gpu1.example", False),
])
def test_loopback_is_only_an_address_no_one_else_reaches(host, only_here):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import loopback

    assert loopback(host) is only_here


@pytest.mark.parametrize(("body", "text"), [
    ('{"choices": [{"text": "4"}]}', "4"),
    ('{"choices": [{"text": null}]}', None),   # null is no answer, never the text "None"
    ('{"choices": []}', None),
    ("<html>", None),
])
def test_a_completions_text_is_read_only_where_it_is(body, text):
    assert completion_answer(body)[0] == text
