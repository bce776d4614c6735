"""Engine truth under a real systemd: the SGLang test double (each release's protocol, from its
sources) as a real unit in the lab, driven by the real cycle."""

from __future__ import annotations

import re
import time

import pytest
import yaml
from conftest import DOUBLE, ROOT, Run, in_flight_at_deadline, playbook, sh, stop_now


def ct200_settings() -> dict:
    """The real site's engine settings and environment, on the lab's loopback port."""
    site = yaml.safe_load((ROOT / "inventory/ct200/group_vars/all.yml").read_text())
    settings = dict(site["bc_engine_settings"], host="127.0.0.1")
    env = dict(site["bc_engine_env"], **DOUBLE["bc_engine_env"])
    return dict(DOUBLE, bc_engine_version=site["bc_engine_version"], bc_engine_settings=settings, bc_engine_env=env)


# These cases run on one worker, one after the other in this file's order (the xdist_group; tests/integration/schedule.py
# keeps a group's order): each starts from the double serving the real site's settings, which the case before it on
# that worker leaves where it can, read back before it is reused. The one case that changes the settings comes last.
pytestmark = pytest.mark.xdist_group("ct200_double")
CT200: dict[str, str] = {}  # the double's unit and env files as this worker's last cycle from the site's settings wrote them


def double_files() -> str:
    return sh("sha256sum /etc/systemd/system/sglang-double.service /etc/benchmark-cycle/sglang-double.env", check=False)


def serving_from_site_settings() -> bool:
    """The double serves, healthy and keyless, from the unit and env files a cycle from the site's settings wrote, and
    no cycle holds the host (read back, not assumed from the case before)."""
    if not CT200 or double_files() != CT200["files"]:
        return False
    state = sh("systemctl is-active sglang-double; systemctl is-failed sglang-double; systemctl show -P NeedDaemonReload "
               "sglang-double; systemctl is-active bc-deadman-sglang-double.timer; "
               "ls -d /etc/benchmark-cycle/sglang-double.secrets.yaml /run/lock/benchmark-cycle-* 2>/dev/null | wc -l; "
               "curl -s -o /dev/null -w '%{http_code}' -m 10 http://127.0.0.1:30001/health", check=False).split()
    return state == ["active", "active", "no", "inactive", "0", "200"]


def cycle_from_site_settings(**changes: object) -> Run:
    """A green cycle from the real site's settings (with `changes`); without changes, what it left is recorded for the
    next case to reuse (a cycle that fails leaves nothing recorded)."""
    CT200.clear()
    run = playbook("benchmark_cycle.yml", extra_vars=dict(ct200_settings(), **changes))
    assert run.rc == 0, run.out[-3000:]
    if not changes:
        CT200["files"] = double_files()
    return run


def serving_ct200_double(**changes: object) -> dict:
    """The double installed and serving from the real site's settings; returns those settings (with `changes`). A
    double already serving them (serving_from_site_settings) is used as it is: its install is the cycle that left it."""
    if changes or not serving_from_site_settings():
        cycle_from_site_settings(**changes)
    return dict(ct200_settings(), **changes)


def double_pid() -> str:
    return sh("systemctl show -p MainPID --value sglang-double").strip()


@pytest.mark.path("stop.ready", real="systemd starting the real site's full command line (the SGLang double)")
def test_the_real_sites_command_line_starts_under_systemd_and_serves(lab, reliability):
    run = cycle_from_site_settings()
    unit = sh("cat /etc/systemd/system/sglang-double.service")
    assert "--tool-call-parser kimi_k2 --reasoning-parser kimi_k2" in unit and "--tp-size 8" in unit
    assert sh("systemctl is-active sglang-double").strip() == "active"
    reliability(fault="the real site's command line", injected="inventory/ct200's bc_engine_settings and env (SGLang 0.5.10 flags)",
                did="the unit rendered from them starts the SGLang double (0.5.10's own flag table) under systemd; cycle completed",
                service_after="active (SGLang double)", data_kept="full results", detect_s=None, run_s=run.seconds)


@pytest.mark.path("stop.not_ready.rolled_back", decision="bc_health.classify")
def test_a_hung_scheduler_fails_fast_naming_it_and_the_previous_unit_comes_back(lab, reliability):
    extra = serving_ct200_double()
    hung = dict(extra, bc_readiness_timeout_s=600)
    hung["bc_engine_env"] = dict(extra["bc_engine_env"], BC_DOUBLE_HANG="1", SGLANG_HEALTH_CHECK_TIMEOUT="16")
    run = playbook("benchmark_cycle.yml", extra_vars=hung)
    assert run.rc != 0
    text = " ".join(run.out.split())
    assert "hung scheduler" in text or "Health check failed" in text, run.out[-3000:]
    waited = run.at("Fail with the phase", "failed") - run.at("Wait for the server to be ready", "start")
    assert waited < 600, waited  # not the budget: the first probe that hung
    assert "rolled back to the previous unit, which is serving again" in text
    assert "BC_DOUBLE_HANG" not in sh("cat /etc/benchmark-cycle/sglang-double.env")
    reliability(fault="hung scheduler", injected="SGLang double up but giving no token (its /health waits 16 s, then 503)",
                did="readiness failed at the first hung probe naming it (not the 600 s budget); rolled back; play failed",
                service_after="active (previous unit)", data_kept="sweep results of the run kept", detect_s=waited, run_s=run.seconds)


@pytest.mark.path("stop.not_ready.rolled_back", decision="bc_health.classify")
def test_the_hung_scheduler_threshold_follows_the_units_health_check_timeout(lab, reliability):
    """The unit sets SGLANG_HEALTH_CHECK_TIMEOUT=8: a hung scheduler's 503 comes after 8 s, below the
    default's 15 s threshold; read from the running server's environment, it is still judged hung at
    the first probe, not "warming" until the readiness budget."""
    extra = serving_ct200_double()
    hung = dict(extra, bc_readiness_timeout_s=300)
    hung["bc_engine_env"] = dict(extra["bc_engine_env"], BC_DOUBLE_HANG="1", SGLANG_HEALTH_CHECK_TIMEOUT="8")
    run = playbook("benchmark_cycle.yml", extra_vars=hung)
    text = " ".join(run.out.split())
    assert run.rc != 0 and "hung scheduler" in text, run.out[-3000:]
    waited = run.at("Fail with the phase", "failed") - run.at("Wait for the server to be ready", "start")
    assert waited < 300 / 2, waited  # judged at a probe, not at the end of the budget
    reliability(fault="hung scheduler, short health-check timeout", injected="SGLANG_HEALTH_CHECK_TIMEOUT=8 and a hung scheduler",
                did="readiness read the timeout the server runs with and judged the 8 s 503 hung at once; rolled back",
                service_after="active (previous unit)", data_kept="sweep results of the run kept", detect_s=waited, run_s=run.seconds)


@pytest.mark.path("stop.ready", real="systemd's Result=signal after the engine SIGKILLs itself at its stop")
def test_a_stop_by_the_cycle_leaves_the_unit_inactive_though_sglang_kills_itself(lab, reliability):
    """SGLang SIGKILLs its own main process after its SIGTERM drain (the double does too): systemd marks
    the unit failed (Result=signal) after every clean stop, and `systemctl --failed`, node_exporter and
    OnFailure= would see a failure per cycle. The stop reads the unit back and clears exactly that."""
    extra = serving_ct200_double()
    since = sh("date +%s").strip()
    run = playbook("benchmark_cycle.yml", extra_vars=dict(extra, bc_stop_policy="always"))
    assert run.rc == 0, run.out[-3000:]
    log = sh(f"journalctl --no-pager -u sglang-double --since @{since} -o cat")
    assert "status=9/KILL" in log, log[-2000:]  # the server killed itself after its drain, as SGLang does
    summary = run.out[run.out.index("Summarise the cycle] *"):]  # the cycle role's summary (yaml)
    assert re.search(r"reset_failed: true", summary) and re.search(r"ActiveState: inactive", summary), summary[:3000]
    assert sh("systemctl is-failed sglang-double", check=False).strip() == "active"
    reliability(fault="the engine SIGKILLs itself after its drain", injected="the SGLang double ends its SIGTERM drain with "
                "kill_process_tree(include_parent=True), as 0.5.16 does", did="the stop read the unit back (failed, "
                "Result=signal), cleared exactly that failure and read inactive back; started again",
                service_after="active (SGLang double)", data_kept="full results", detect_s=None, run_s=run.seconds)


@pytest.mark.path("stop.not_ready.rolled_back", decision="bc_health.classify")
def test_a_ready_server_refusing_the_completion_fails_at_once_with_its_words(lab, reliability):
    extra = serving_ct200_double()
    # the server wants another key than the one the cycle holds: 401 {"error": "Unauthorized"} (utils/auth.py)
    wrong = dict(extra, bc_api_key="sk-the-cycles-key-1", bc_readiness_timeout_s=600,
                 bc_engine_env=dict(extra["bc_engine_env"], BC_DOUBLE_API_KEY="sk-another-key-2"))
    started = time.monotonic()
    run = playbook("benchmark_cycle.yml", extra_vars=wrong)
    assert run.rc != 0
    assert "HTTP 401: Unauthorized" in run.out, run.out[-3000:]
    assert time.monotonic() - started < 600
    sh("systemctl stop sglang-double")
    reliability(fault="ready server refuses the completion", injected="the server wants another API key than the cycle's (401)",
                did="the completion probe failed at once with the server's own message; rolled back; play failed",
                service_after="stopped (the test's double)", data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("drain.aborted", decision="bc_health.in_flight")
def test_a_stale_gauge_does_not_end_the_drain_early(lab, reliability):
    env = dict(ct200_settings()["bc_engine_env"], BC_DOUBLE_GAUGE_S="3600", BC_DOUBLE_TOKEN_MS="1000")
    extra = serving_ct200_double(bc_drain_deadline_s=3, bc_drain_on_deadline="abort", bc_engine_env=env)
    before = double_pid()
    # a 10 min request (1 s a token): still running at the drain however slow the machine is to get there
    sh("(curl -s -m 900 -d '{\"prompt\":\"x\",\"max_tokens\":600}' http://127.0.0.1:30001/v1/completions >/dev/null &); sleep 0.5")
    assert re.search(r"sglang:num_running_reqs\{[^}]*\} 0\.0", sh("curl -s http://127.0.0.1:30001/metrics"))  # the sample: 0
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    assert run.rc != 0 and in_flight_at_deadline(run.out) >= 1, run.out[-3000:]
    assert double_pid() == before  # never stopped with a request in flight
    stop_now("sglang-double")  # it still holds the long request
    reliability(fault="stale in-flight gauge", injected="sglang:num_running_reqs stuck at 0 (a sample) while a 10 min request runs",
                did="the drain read SGLang's live /v1/loads (1 in flight), waited its 3 s deadline and aborted; not stopped",
                service_after="active, untouched (SGLang double)", data_kept="-", detect_s=None, run_s=run.seconds)
