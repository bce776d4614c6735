"""The guarantees' pure parts and the modules' refusals, through the real `ansible` CLI where a
module is the point: hostile input gets a clear error naming the field, never a traceback, and a
secret never appears in any text the cycle shows."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import yaml
from bc_filters import cycle_budget, env_lines, redact, safe_name, settings_problems
from test_modules_adhoc import adhoc

KEY = "sk-bc-test-7f3a9c1e"
CONTRACT = yaml.safe_load((Path(__file__).resolve().parents[2] / "playbooks/vars/contract.yml").read_text())["bc_contract"]
# a site with no router, said explicitly (the contract refuses hooks that are merely absent)
SITE = {"bc_lb_required": False}


@pytest.mark.parametrize("text", [
    f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', admin_api_key=None, port=30001)",  # SGLang engine.py:648
    f"ExecStart=/usr/bin/llama-server --api-key {KEY} --port 8080",
    f'{{"api_key": "{KEY}"}}', f"Authorization: Bearer {KEY}", f"LLAMA_API_KEY={KEY}", f"the key is {KEY}",
])
def test_redact_removes_the_key_in_every_shape_it_takes(text):
    assert KEY not in redact(text, [KEY])
    assert KEY not in redact(text) or text.endswith(f"is {KEY}")  # the patterns alone catch every named field


def test_redact_leaves_ordinary_numbers_and_tags_alone():
    text = "max_total_num_tokens=812345, #tokens: 9 --tag llama-lab/20261201T000000Z-1 api_key=None"
    assert redact(text, [KEY]) == text


def test_env_lines_quote_for_systemd_and_keep_utf8():
    assert env_lines({"A": 'x"$y`z\\w', "B": "héllo €", "C": True}) == 'A="x\\"\\$y\\`z\\\\w"\nB="héllo €"\nC="true"\n'


@pytest.mark.parametrize(("env", "message"), [
    ({"E\nLD_PRELOAD": "/x.so"}, "is not an environment variable name"),
    ({"1X": "v"}, "is not an environment variable name"),
    ({"A": "one\nLD_PRELOAD=/x.so"}, "bc_engine_env.A holds a control character"),
])
def test_env_lines_refuse_what_would_inject_a_line(env, message):
    with pytest.raises(ValueError, match=message):
        env_lines(env)


@pytest.mark.parametrize(("settings", "message"), [
    ({"bc_api_key": KEY + "\n"}, "bc_api_key holds whitespace or a control character"),
    ({"bc_sweep_poll_s": 0}, "bc_sweep_poll_s=0: give a number from 1 to 3600 (0 would detach the sweep"),
    ({"bc_readiness_timeout_s": math.nan}, "bc_readiness_timeout_s=nan"),
    ({"bc_readiness_timeout_s": "inf"}, "bc_readiness_timeout_s"),
    ({"bc_readiness_timeout_s": math.inf}, "bc_readiness_timeout_s=inf: not a finite number"),
    ({"bc_drain_deadline_s": 1e12}, "bc_drain_deadline_s=1000000000000.0: give a number from 0 to 86400"),
    ({"bc_service_user": "root\nExecStartPre=/bin/sh"}, "bc_service_user='root\\nExecStartPre=/bin/sh' is not a user"),
    ({"bc_service_group": "wheel\n"}, "bc_service_group"),
    ({"bc_unit": "llama-lab\n"}, "is not a systemd unit name"),
    ({"bc_unit": "-H"}, "bc_unit=-H is not a systemd unit name"),
    ({"bc_engine_env": {"E\nLD_PRELOAD": 1}}, "is not an environment variable name"),
    ({"bc_results_dir": "results"}, "bc_results_dir=results: give an absolute path"),
    ({"bc_stop_policy": "sometimes"}, "value of bc_stop_policy must be one of: auto, always, never, release, release_all, got: sometimes"),
])
def test_settings_problems_name_the_field_and_never_the_key(settings, message):
    problems = settings_problems(dict(SITE, **settings), CONTRACT)
    assert any(message in p for p in problems), problems
    assert not any(KEY in p for p in problems)


def test_sound_settings_have_no_problem():
    assert settings_problems({**SITE, "bc_api_key": KEY, "bc_sweep_poll_s": 5, "bc_unit": "sglang-k26-ddtree", "bc_service_user": "sglang",
                              "bc_engine_env": {"SGLANG_CACHE_DIR": "/var/cache/sglang"}, "bc_results_dir": "/srv/results"}, CONTRACT) == []


@pytest.mark.parametrize("name", ["../etc", "a/b", ".hidden", "-x", "", "x\ny"])
def test_safe_name_refuses_path_escapes(name):
    with pytest.raises(ValueError, match="cannot name a file"):
        safe_name(name, "inventory_hostname")


CT200 = {"drain_deadline_s": 120, "release": True, "stop_timeout_s": 195, "gpu_wait_s": 60, "has_gpu": True,
         "sweep_runs": 2, "sweep_timeout_s": 1800, "readiness_timeout_s": 900, "margin_s": 60}


@pytest.mark.parametrize(("change", "phases", "total", "switch_after"), [
    # ct200's numbers: two sweeps of 1800 s on a GPU host, a release possible
    ({}, {"drain": 130, "release": 90, "gpu_pre_check": 360, "stop": 255, "sweep": 3720, "gpu_post_check": 120,
          "readiness": 940, "rollback_readiness": 940, "overhead": 60}, 6615, 90 + 255 + 3720 + 120 + 60),
    # no GPU (the lab's CPU sweep): no GPU checks, no GPU wait after the stop
    ({"has_gpu": False}, {"gpu_pre_check": 0, "stop": 195, "gpu_post_check": 0}, 6615 - 360 - 60 - 120, 90 + 195 + 3720 + 60),
    # the stop's GPU wait follows whether the stop waits for the GPU, not only whether there is one
    ({"has_gpu": False, "gpu_check": True}, {"stop": 255}, 6615 - 360 - 120, 90 + 255 + 3720 + 60),
    # bc_stop_policy always/never: no release tried
    ({"release": False}, {"release": 0}, 6615 - 90, 255 + 3720 + 120 + 60),
    # the GPU wait is the setting's, not a constant
    ({"gpu_wait_s": 300}, {"stop": 495}, 6615 + 240, 90 + 495 + 3720 + 120 + 60),
    # every sweep counts with its async margin
    ({"sweep_runs": 5}, {"sweep": 5 * 1860}, 6615 + 3 * 1860, 90 + 255 + 5 * 1860 + 120 + 60),
    # a recovery (playbooks/recover.yml): a restart's stop, the readiness and a rollback's, from the same sum (it was
    # written a second time in its tasks, without the probes' and the play's own seconds)
    ({"recovery": True}, {"drain": 0, "release": 0, "gpu_pre_check": 0, "stop": 195, "sweep": 0, "gpu_post_check": 0,
                          "readiness": 940, "rollback_readiness": 940, "overhead": 60}, 195 + 940 + 940 + 60, 195 + 60),
])
def test_the_worst_case_is_one_sum_and_the_lease_and_the_switch_follow_from_it(change, phases, total, switch_after):
    got = cycle_budget(dict(CT200, **change))
    assert {k: got["phases"][k] for k in phases} == phases
    assert got["total_s"] == sum(got["phases"].values()) == total
    assert got["lease_s"] == total + 60  # past it, the holder is dead
    assert got["switch_after_s"] == switch_after  # from the arm: a release, the stop, sweeps, post-sweep check, margin
    assert got["switch_after_s"] < got["lease_s"]  # the switch acts before the lock is anyone's


@pytest.mark.parametrize(("module", "args", "message"), [
    ("inference_health", {"url": "http://[::1"}, "has an invalid port or address"),
    ("inference_health", {"url": "http://127.0.0.1:8080", "timeout": 1e12}, "timeout must be > 0 and at most 3600"),
    ("inference_health", {"url": "http://127.0.0.1:8080", "timeout": "nan"}, "timeout must be > 0"),
    ("inference_health", {"url": "http://127.0.0.1:8080", "timeout": "inf"}, "timeout must be > 0"),
    ("marlin_sweep", {"output": "/tmp/never.json", "backend": "torch", "group_size": 0}, "group_size must be -1 (per channel) or >= 1"),
    ("marlin_sweep", {"output": "/tmp/never.json", "backend": "torch", "intermediate_size": -2048}, "intermediate_size must be >= 1"),
    ("marlin_sweep", {"output": "/tmp/never.json", "device": -1}, "device must be a CUDA device index >= 0"),
    ("marlin_sweep", {"output": "/tmp/never.json", "python": "/nonexistent/python"}, "python=/nonexistent/python is not an executable"),
    ("host_lock", {"path": "/tmp/bc-test.lock", "token": "t", "stale_after": -1, "break_stale": True}, "stale_after must be >= 0"),
    ("inference_unit", {"name": "-H", "state": "started"}, "is not a systemd unit name"),
    # the engine list is bc_engines.ENGINES alone: another engine is refused naming the known ones
    ("inference_unit", {"name": "sglang.service", "state": "stopped", "engine": "tgi"}, "use one of: llamacpp, sglang, vllm"),
    ("inference_health", {"url": "http://127.0.0.1:9", "engine": "tgi"}, "use one of: llamacpp, sglang, vllm"),
    ("inference_memory_info", {"url": "http://127.0.0.1:9", "engine": "tgi"}, "use one of: llamacpp, sglang, vllm"),
    ("inference_memory", {"url": "http://127.0.0.1:9", "engine": "tgi", "state": "resumed"}, "use one of: llamacpp, sglang, vllm"),
])
def test_modules_refuse_hostile_input_naming_the_field(module, args, message):
    r = adhoc(module, args, check=module == "marlin_sweep")
    assert r["_status"] == "FAILED!" and message in r["msg"], r
    assert "Traceback" not in json.dumps(r)


def test_a_sweep_that_fits_nowhere_is_not_runnable_before_anything_is_touched():
    # one typo in the AWX survey: 1,1000000000 tokens
    r = adhoc("marlin_sweep", {"output": "/tmp/never.json", "backend": "torch", "batch_sizes": [1, 1000000000],
                               "preflight": True, "python": "/bin/true"}, check=True)
    assert r["_status"] == "SUCCESS" and r["runnable"] is False and not r["fits"]
    assert "the sweep needs ~" in r["why"] and "memory in all" in r["why"]
    ok = adhoc("marlin_sweep", {"output": "/tmp/never.json", "backend": "torch", "batch_sizes": [1, 2], "num_experts": 8,
                                "hidden_size": 256, "intermediate_size": 256, "top_k": 2, "preflight": True, "python": "/bin/true"},
               check=True)
    assert ok["runnable"] is True


def test_sweep_report_refuses_malformed_results_and_keeps_history_without_a_plot(tmp_path):
    bad = tmp_path / "bad.json"
    for text in ("{not json", "[1, 2]", '{"points": [{"m": "x"}]}'):
        bad.write_text(text)
        r = adhoc("sweep_report", {"result": str(bad), "host": "lab1", "stamp": "20261201T000000Z", "history": str(tmp_path / "h.jsonl")})
        assert r["_status"] == "FAILED!" and ("cannot read sweep result" in r["msg"] or "is not a marlin_sweep result" in r["msg"]), r
    escape = adhoc("sweep_report", {"result": str(bad), "host": "../../etc", "stamp": "x", "history": str(tmp_path / "h.jsonl")})
    assert escape["_status"] == "FAILED!" and "host='../../etc' is not a safe file name" in escape["msg"]


def test_plot_failure_keeps_the_history_line(tmp_path):
    """/usr/bin/python3 has no matplotlib: the plot fails, the report and the history line are kept."""
    doc = Path(__file__).resolve().parents[2] / "evidence/h200/run1-tp8-sglang.json"
    result = tmp_path / "sweep-tp8-sglang.json"
    result.write_text(doc.read_text())
    history = tmp_path / "history.jsonl"
    r = adhoc("sweep_report", {"result": str(result), "host": "h200", "stamp": "20261201T000000Z", "history": str(history)},
              python="/usr/bin/python3")
    assert r["_status"] == "CHANGED", r
    assert r["plot"] is None and Path(r["report"]).exists()
    assert len(history.read_text().splitlines()) == 1


def slow_server(delay_s: float, status: int = 503):
    """A real HTTP server on loopback whose every answer takes `delay_s` (SGLang's /health while its
    scheduler hangs waits SGLANG_HEALTH_CHECK_TIMEOUT, 20 s, before its 503)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *_a: object) -> None:
            pass

        def do_GET(self) -> None:
            time.sleep(delay_s)
            try:
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except OSError:
                pass  # the client gave up first, as it should

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_probe_never_outlives_its_wait_deadline_however_slow_the_server():
    server = slow_server(20.0)
    try:
        start = time.time()
        r = adhoc("inference_health", {"url": "http://127.0.0.1:%d" % server.server_port, "engine": "sglang",
                                       "timeout": 30, "deadline": start + 3})
        took = time.time() - start
        # SGLang's readiness floor (25 s) and the server's 20 s would make this probe 20 s long:
        # the deadline cuts it (the bound is the server's own latency, not a fixed margin)
        assert r["_status"] == "SUCCESS" and r["deadline_passed"] is True and r["ready"] is False, r
        assert took < 20, took
    finally:
        server.shutdown()


def test_load_probe_reports_unknown_not_zero_when_metrics_fail():
    for status in (404, 401, 501):
        server = slow_server(0.0, status)
        try:
            r = adhoc("inference_load_info", {"url": "http://127.0.0.1:%d" % server.server_port, "engine": "llamacpp",
                                              "timeout": 5})
            assert r["_status"] == "SUCCESS" and r["in_flight"] is None, r
            assert "HTTP %d" % status in r["in_flight_unknown"]
        finally:
            server.shutdown()
