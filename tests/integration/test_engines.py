"""Engine truth under a real systemd: the SGLang test double (each release's protocol, from its
sources) as a real unit in the lab, driven by the real cycle."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import DOUBLE, ROOT, Run, playbook, sh


def ct200_settings() -> dict:
    """The real site's engine settings and environment, on the lab's loopback port."""
    site = yaml.safe_load((ROOT / "inventory/ct200/group_vars/all.yml").read_text())
    settings = dict(site["bc_engine_settings"], host="127.0.0.1")
    env = dict(site["bc_engine_env"], **DOUBLE["bc_engine_env"])
    return dict(DOUBLE, bc_engine_version=site["bc_engine_version"], bc_engine_settings=settings, bc_engine_env=env)


# These cases run on one worker, one after the other in this file's order (the xdist_group; tests/integration/schedule.py
# keeps a group's order): each starts from the double serving the real site's settings, which the case before it on
# that worker leaves where it can, read back before it is reused.
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


@pytest.mark.path("stop.ready", real="systemd starting the real site's full command line (the SGLang double)")
def test_the_real_sites_command_line_starts_under_systemd_and_serves(lab, reliability):
    run = cycle_from_site_settings()
    unit = sh("cat /etc/systemd/system/sglang-double.service")
    assert "--tool-call-parser kimi_k2 --reasoning-parser kimi_k2" in unit and "--tp-size 8" in unit
    assert sh("systemctl is-active sglang-double").strip() == "active"
    reliability(fault="the real site's command line", injected="inventory/ct200's bc_engine_settings and env (SGLang 0.5.10 flags)",
                did="the unit rendered from them starts the SGLang double (0.5.10's own flag table) under systemd; cycle completed",
                service_after="active (SGLang double)", data_kept="full results", detect_s=None, run_s=run.seconds)


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


