"""What the cycle exports, read back by real parsers: the node_exporter textfile by prometheus_client's
text parser (the format node_exporter's textfile collector reads), the JUnit file by junitparser; and the webhook
notification (bc_notify_webhook): its payload as a table, its setting's verdict, and the real notify task run by the
real ansible-playbook against a webhook TEST DOUBLE on 127.0.0.1 (loopback only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from junitparser import Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import problems
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_export import (
    NOTIFY_FAILURE_MAX,
    junit,
    notification,
    router_state,
    textfile,
)

ROOT = Path(__file__).resolve().parents[2]
SWEEP = {"backend": "sglang", "tp_size": 8, "wall_s": 14.2,
         "points": [{"m": 1, "ms": 0.0866, "tflops": 8.1, "gbs": 2291.5}, {"m": 256, "ms": 0.511, "tflops": 210.0, "gbs": 388.0}]}
HEALTH = {"pre": {"gpus": [{"index": 0, "uuid": "GPU-17e7", "temperature_c": 33, "ecc_uncorrectable_volatile": 0,
                            "ecc_uncorrectable_aggregate": None, "problems": []}]},
          "post": {"gpus": [{"index": 0, "uuid": "GPU-17e7", "temperature_c": 91, "ecc_uncorrectable_volatile": 2,
                             "ecc_uncorrectable_aggregate": 2, "problems": ["temperature_c"]}]}}


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_textfile_parses_and_holds_the_cycle():
    summary = {"host": 'ct"200', "unit": "sglang-k26", "failed": False, "strategy": "release", "downtime_s": 13.7,
               "router_out_s": 22.1, "phases": {"drain": 1.0, "stop": None, "sweep": 12.3, "reload": None},
               "freed_mib": 131598, "gpu_health": HEALTH}
    fam = families(textfile(summary, [SWEEP], now=1796126000.0))
    assert fam["benchmark_cycle_success"].samples[0].value == 1
    assert fam["benchmark_cycle_success"].samples[0].labels == {"host": 'ct"200', "unit": "sglang-k26"}  # escaped, read back
    assert fam["benchmark_cycle_downtime_seconds"].samples[0].value == 13.7
    assert fam["benchmark_cycle_strategy_info"].samples[0].labels["strategy"] == "release"
    assert fam["benchmark_cycle_release_freed_bytes"].samples[0].value == 131598 * 1024 * 1024
    phases = {s.labels["phase"]: s.value for s in fam["benchmark_cycle_phase_seconds"].samples}
    assert phases == {"drain": 1.0, "sweep": 12.3}  # no value is no sample, never a NaN
    points = {(s.labels["m"], s.labels["tp"]): s.value for s in fam["benchmark_cycle_sweep_point_seconds"].samples}
    assert points == {("1", "8"): pytest.approx(0.0000866), ("256", "8"): pytest.approx(0.000511)}
    healthy = {s.labels["phase"]: s.value for s in fam["benchmark_cycle_gpu_healthy"].samples}
    assert healthy == {"pre": 1, "post": 0}
    ecc = [s for s in fam["benchmark_cycle_gpu_ecc_uncorrectable_errors"].samples if s.labels["phase"] == "pre"]
    assert [s.labels["scope"] for s in ecc] == ["volatile"]  # aggregate N/A: left out
    assert all(f.type == "gauge" for f in fam.values())


def test_a_failed_cycle_exports_success_0():
    fam = families(textfile({"host": "h", "unit": "u", "failed": True}, [], now=1.0))
    assert fam["benchmark_cycle_success"].samples[0].value == 0
    assert "benchmark_cycle_downtime_seconds" not in fam


@pytest.mark.parametrize(("identity", "value"), [
    ({"verdict": "ok", "why": ""}, 1),
    ({"verdict": "mismatch", "why": "the weights' checksum differs on rank(s) 0"}, 0),
    ({"verdict": "unknown", "why": "the fingerprint after the resume is absent"}, 0),  # unknown is not ok
    (None, None),                                                                       # no whole release: no sample
    ("ok", None),                                                                       # not a verdict: no sample
])
def test_a_whole_gpu_resumes_identity_is_exported_and_only_ok_reads_1(identity, value):
    fam = families(textfile({"host": "h", "unit": "u", "failed": value == 0, "strategy": "release_all", "identity": identity},
                            [], now=1.0))
    if value is None:
        assert "benchmark_cycle_identity_ok" not in fam
    else:
        sample = fam["benchmark_cycle_identity_ok"].samples[0]
        assert sample.value == value and sample.labels["verdict"] == identity["verdict"]


def test_junit_has_a_case_per_step_and_a_rescued_failure_still_fails():
    steps = [{"host": "ct200", "step": "cycle_lock", "seconds": 0.4, "failures": [], "skipped": False},
             {"host": "ct200", "step": "gpu_benchmark", "seconds": 14.2, "failures": ["Sweep tp8 sglang: the sweep exited 3"],
              "skipped": False},
             {"host": "ct200", "step": "service_drain", "seconds": 0.0, "failures": [], "skipped": True}]
    xml = JUnitXml.fromstring(junit(steps))
    suites = list(xml)
    assert len(suites) == 1 and suites[0].tests == 3 and suites[0].failures == 1
    cases = {c.name: c for c in suites[0]}
    assert isinstance(cases["gpu_benchmark"].result[0], Failure) and "exited 3" in cases["gpu_benchmark"].result[0].message
    assert isinstance(cases["service_drain"].result[0], Skipped) and cases["cycle_lock"].result == []
    assert abs(cases["gpu_benchmark"].time - 14.2) < 1e-6


@pytest.mark.parametrize("noise", [
    "\x1b[1;31mrefused\x1b[0m",   # a router hook's colour
    "\x1b[2K\x1b[?25lspinner",      # a cursor sequence
    "nul\x00 bell\x07 bs\x08",      # control characters XML 1.0 cannot hold
    "\ufffe\uffff",                 # non-characters
])
def test_a_failure_whose_text_xml_cannot_hold_still_makes_a_junit_file_readers_parse(noise):
    """A hook's output with terminal colours made the file unparseable (#44): what XML cannot carry is taken out, the
    rest of the message is kept."""
    steps = [{"host": "ct200", "step": "Router hook " + noise, "seconds": 1.0, "failures": ["the hook said " + noise + " end"],
              "skipped": False}]
    xml = JUnitXml.fromstring(junit(steps))
    case = next(iter(next(iter(xml))))
    message = case.result[0].message
    assert message.startswith("the hook said ") and message.endswith(" end") and "\x1b" not in message
    assert all(ch in "\t\n\r" or ord(ch) >= 0x20 for ch in message + case.name)


def test_the_real_h200_sweep_exports():
    real = json.loads((ROOT / "tests/unit/fixtures/h200/sweep-tp1-sglang-k26.json").read_text())
    fam = families(textfile({"host": "h200", "unit": "u"}, [real], now=2.0))
    got = {s.labels["m"]: s.value for s in fam["benchmark_cycle_sweep_point_seconds"].samples}
    assert got == {str(p["m"]): pytest.approx(p["ms"] / 1000) for p in real["points"]} and len(got) == 6



# the webhook notification (bc_notify_webhook)
TOKEN = "whk-7c1e93b0a4d2"
KEY = "sk-notify-5e2a90c1"
CONTRACT = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
FAILED = {"host": "ct200", "unit": "sglang-k26", "failed": True, "failure": "Wait for readiness: not ready within 900 s",
          "router_owed": True, "lb_out": True, "strategy": "stop", "downtime_s": 912.4, "job_id": "4711"}


@pytest.mark.parametrize(("owed", "lb_out", "state"), [
    (True, True, "out"),       # taken out, not put back (the service did not come back, or a GPU went bad: unrouted)
    (False, False, "back"),    # taken out and put back
    (None, True, "out"),       # no plan to read (it never ran): the drain's own flag
    (None, False, "back"),
    (False, None, "none"),     # no hook ever took it out
    (None, None, "none"),
    ("True", "True", "out"),   # as text (a fact templated to a string)
])
def test_the_router_state_at_the_end_of_the_cycle(owed, lb_out, state):
    assert router_state(owed, lb_out) == state


@pytest.mark.parametrize(("summary", "on", "events"), [
    (FAILED, None, ["failed", "router_out"]),                               # the default: failed and router_out
    (dict(FAILED, router_owed=False, lb_out=False), None, ["failed"]),     # failed, put back
    (dict(FAILED, failed=False, failure=None, router_owed=False, lb_out=False), None, None),  # a success: not asked for
    (dict(FAILED, failed=False, failure=None, router_owed=False, lb_out=False), ["failed", "success"], ["success"]),
    (dict(FAILED, failed=False, failure=None), ["router_out"], ["router_out"]),  # served but left out: said on its own
    (FAILED, ["success"], None),                                            # only success asked: a failure is not sent
    ({k: v for k, v in FAILED.items() if k != "failed"}, None, ["failed", "router_out"]),  # unknown is not a success
    (dict(FAILED, failed="maybe"), ["failed"], ["failed"]),
    (dict(FAILED, failed="False", failure=None, router_owed=None, lb_out=None), ["success"], ["success"]),
])
def test_a_notification_is_built_for_the_events_asked_for(summary, on, events):
    got = notification(summary, on, [])
    if events is None:
        assert got is None
        return
    assert got["events"] == events
    assert got["status"] == ("failed" if "failed" in events else "complete")
    assert got["host"] == "ct200" and got["unit"] == "sglang-k26" and got["job_id"] == "4711"
    json.dumps(got)  # the body is JSON as it is


def test_a_notification_says_the_failure_redacted_the_router_and_the_window():
    failure = "Start the service: sglang refused --api-key %s; token=%s" % (KEY, TOKEN) + " x" * 2000
    got = notification(dict(FAILED, failure=failure), ["failed"], [KEY, TOKEN, "abc"])
    assert got["router"] == "out" and got["strategy"] == "stop" and got["downtime_s"] == 912.4
    assert got["failure"].startswith("Start the service: sglang refused --api-key <redacted>; token=<redacted>")
    assert len(got["failure"]) == NOTIFY_FAILURE_MAX
    assert KEY not in json.dumps(got) and TOKEN not in json.dumps(got)
    assert "abc" in got["failure"] or "abc" not in failure  # a value under 4 characters is no secret: never blanked
    assert got["text"].startswith("benchmark cycle on ct200 (sglang-k26): FAILED, the host is OUT of the router: Start")
    ok = notification(dict(FAILED, failed=False, failure="stale", router_owed=False, lb_out=False, downtime_s="nan",
                           job_id=""), ["success"])
    assert ok["failure"] is None and ok["downtime_s"] is None and ok["job_id"] is None and ok["router"] == "back"
    assert ok["text"] == "benchmark cycle on ct200 (sglang-k26): ok, back in the router"


SITE = {"bc_unit": "sglang-k26", "bc_api_key": KEY, "bc_lb_required": False}


@pytest.mark.parametrize(("hook", "message"), [
    ({}, None),                                                              # no webhook
    ({"url": "https://hooks.example/bc"}, None),                             # no token: a webhook that takes none
    ({"url": "http://127.0.0.1:8080/x", "token": TOKEN, "on": ["failed", "router_out", "success"]}, None),
    ({"url": "https://hooks.example/bc", "token": ""}, "bc_notify_webhook.token is empty"),  # BC_NOTIFY_TOKEN unset
    ({"url": "https://hooks.example/bc", "token": "two words"}, "bc_notify_webhook.token is empty, or holds whitespace"),
    ({"url": "https://hooks.example/bc?token=" + TOKEN}, "bc_notify_webhook.url=(not shown) has a query or fragment"),
    ({"url": "https://user:" + TOKEN + "@hooks.example/bc"}, "bc_notify_webhook.url=(not shown) has user-info"),
    ({"url": "ftp://hooks.example/bc"}, "bc_notify_webhook.url=(not shown): the scheme must be http or https"),
    ({"url": "https:///bc"}, "bc_notify_webhook.url=(not shown): '' is not a host name or address"),
    ({"url": "https://hooks.example:99999/bc"}, "bc_notify_webhook.url=(not shown) cannot be read as a URL"),
    ({"url": "https://hooks.example/b c"}, "bc_notify_webhook.url=(not shown) holds whitespace"),
    ({"token": TOKEN}, "bc_notify_webhook.url must be a URL"),
    ({"url": "https://hooks.example/bc", "on": []}, "bc_notify_webhook.on must be a non-empty list"),
    ({"url": "https://hooks.example/bc", "on": ["failure"]}, "bc_notify_webhook.on must be a non-empty list"),
    ({"url": "https://hooks.example/bc", "on": "failed"}, "bc_notify_webhook.on must be a non-empty list"),
    ({"url": "https://hooks.example/bc", "tokn": TOKEN}, "bc_notify_webhook: unknown key(s) tokn"),
    ("https://hooks.example/bc", "argument 'bc_notify_webhook' is of type str"),  # Ansible's own type check
])
def test_the_webhook_setting_is_refused_naming_the_field_and_never_the_token(hook, message):
    found = problems(CONTRACT, dict(SITE, bc_notify_webhook=hook))
    if message is None:
        assert found == []
    else:
        assert any(m.startswith(message) for m in found), found
    assert not any(TOKEN in m or KEY in m for m in found), found


class WebhookDouble:
    """TEST DOUBLE of a webhook receiver (loopback only): answers each POST with `status` (or holds it `delay_s`
    first), recording its method, path, headers and body."""

    def __init__(self, status: int = 200, delay_s: float = 0.0) -> None:
        self.received: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.received.append({"method": "POST", "path": self.path, "headers": dict(self.headers),
                                       "body": raw.decode("utf-8", "replace")})
                time.sleep(delay_s)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/hooks/benchmark-cycle" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:  # a port just freed on loopback: the connection is refused
        sock.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d/hooks/benchmark-cycle" % sock.getsockname()[1]


def run_notify(tmp_path: Path, url: str, summary: dict[str, Any], on: list[str] | None = None,
               timeout_s: int = 5) -> subprocess.CompletedProcess[str]:
    """roles/cycle/tasks/notify.yml alone, with the given facts, by the real ansible-playbook on localhost."""
    hook = {"url": url, "token": TOKEN, **({"on": on} if on else {})}
    play = [{"name": "Notify", "hosts": "localhost", "gather_facts": False,
             "vars": {"cycle_bc": {"bc_notify_webhook": hook, "bc_command_timeout_s": timeout_s}, "cycle_secrets": [KEY, TOKEN],
                      "__cycle_notify_summary": summary},
             "tasks": [{"name": "The cycle's notify tasks", "ansible.builtin.include_tasks": str(ROOT / "roles/cycle/tasks/notify.yml")}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               BC_CYCLE_EVENT_LOG=str(tmp_path / "events.jsonl"), ANSIBLE_CALLBACKS_ENABLED="inference_ops.benchmark_cycle.benchmark_cycle_progress",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               NO_PROXY="*", no_proxy="*")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-v", "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(tmp_path / "play.yml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)


def green(proc: subprocess.CompletedProcess[str]) -> bool:
    return proc.returncode == 0 and "failed=0" in proc.stdout


def test_the_notify_task_posts_the_payload_with_the_token_in_the_header_only(tmp_path):
    hook = WebhookDouble(200)
    try:
        proc = run_notify(tmp_path, hook.url, FAILED)
    finally:
        hook.close()
    out = proc.stdout + proc.stderr
    assert green(proc), out
    assert len(hook.received) == 1, out
    got = hook.received[0]
    assert got["headers"]["Authorization"] == "Bearer " + TOKEN and got["path"] == "/hooks/benchmark-cycle"
    assert TOKEN not in got["path"] and TOKEN not in got["body"]
    assert [k for k, v in got["headers"].items() if TOKEN in v] == ["Authorization"]
    body = json.loads(got["body"])
    assert body["events"] == ["failed", "router_out"] and body["status"] == "failed" and body["router"] == "out"
    assert body["host"] == "ct200" and body["unit"] == "sglang-k26" and body["failure"] == FAILED["failure"]
    assert body["strategy"] == "stop" and body["downtime_s"] == 912.4 and body["job_id"] == "4711"
    assert "WARNING" not in out
    assert TOKEN not in out and TOKEN not in (tmp_path / "events.jsonl").read_text()  # no log, no event


@pytest.mark.parametrize("answer", ["500", "refused", "timeout"])
def test_a_webhook_that_fails_is_a_warning_and_the_play_stays_green(tmp_path, answer):
    hook = None if answer == "refused" else WebhookDouble(500) if answer == "500" else WebhookDouble(200, delay_s=40)
    try:
        started = time.monotonic()
        proc = run_notify(tmp_path, hook.url if hook else closed_port_url(), FAILED, timeout_s=2)
        took = time.monotonic() - started
    finally:
        if hook:
            hook.close()
    out = proc.stdout + proc.stderr
    assert green(proc), out
    said = {"500": "was not delivered: HTTP 500", "refused": "was not delivered: no answer within 2 s, or the connection was refused",
            "timeout": "was not delivered: no answer within 2 s"}[answer]
    assert "WARNING: the webhook notification " + said in out, out
    assert TOKEN not in out and TOKEN not in (tmp_path / "events.jsonl").read_text()
    if answer == "timeout":
        assert took < 30, took  # cut at its 2 s timeout, never held for the double's 40 s


def test_a_success_is_not_posted_unless_asked_for(tmp_path):
    hook = WebhookDouble(200)
    ok = dict(FAILED, failed=False, failure=None, router_owed=False, lb_out=False)
    try:
        quiet = run_notify(tmp_path, hook.url, ok)
        asked = run_notify(tmp_path, hook.url, ok, on=["failed", "success"])
    finally:
        hook.close()
    assert green(quiet) and green(asked) and "WARNING" not in quiet.stdout + asked.stdout
    assert [json.loads(r["body"])["events"] for r in hook.received] == [["success"]]
