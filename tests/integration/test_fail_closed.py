"""Fail closed, through the real cycle: absent, empty, zero and unknown never read as fine. Each case
once passed the preflight (or a check) and did the wrong thing quietly; now it is refused before
anything is touched (no lock, the unit's process untouched) with a message naming the setting and the
fix, or verified by reading the state back. Real ansible-playbook, real systemd, real llama-server
(the SGLang and nvidia-smi doubles where the behaviour is theirs)."""

from __future__ import annotations

import stat
import subprocess

import pytest
from conftest import (
    HOST,
    ROOT,
    Run,
    env,
    playbook,
    playbook_cmd,
    serving,
    sh,
)

KEY = "sk-bc-fc-41d9e6a2"
KEY2 = "sk-bc-fc-rotated-77c0b3"
HOOK = "/usr/local/bin/lb-hook"


def pid() -> str:
    return sh("systemctl show -p MainPID --value llama-lab").strip()


def untouched(run: Run, before: str) -> None:
    """Refused in the preflight: no lock taken, no unit templated, the server's process the same."""
    tasks = {e["task"] for e in run.events}
    assert not any(t and ("Take the lock" in t or "Verify, install and enable the unit" in t) for t in tasks), sorted(t for t in tasks if t)
    assert pid() == before
    assert sh("ls /run/lock/ | grep -c benchmark-cycle || true").strip() == "0"


# the preflight's refusals of settings are rows of bc_contract.problems's table (tests/unit/test_fail_closed.py, issue #45);
# this one is the controller's own write of the results directory
@pytest.mark.path("refused.preflight", real="the controller's own write of the results directory (a path under a file)")
def test_a_results_directory_the_controller_cannot_write_is_refused_before_anything_is_touched(llama, reliability):
    before = pid()
    message = "the controller cannot write the results directory /etc/hostname/results"
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_results_dir": "/etc/hostname/results"})
    text = " ".join(run.out.split())
    assert run.rc != 0 and message in text, run.out[-3000:]
    assert "Traceback" not in run.out
    untouched(run, before)
    assert serving() == "active, answers 2+2=4"
    reliability(fault="fail closed: " + message[:60], injected="-e bc_results_dir=/etc/hostname/results",
                did="refused in the preflight naming the setting and the fix; no lock, unit untouched",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("stop.ready", real="the live server's own refusal of the new key, and its environment after the restart")
def test_a_key_rotation_is_put_in_force_by_a_restart_or_refused(llama, reliability):
    first = playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": KEY})
    assert first.rc == 0, first.out[-3000:]
    # a green cycle leaves its key in force, also on a server that answered with no key at all before (it is restarted)
    keyed = sh("tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value llama-lab)/environ")
    assert f"LLAMA_API_KEY={KEY}" in keyed.splitlines(), first.out[-3000:]
    before = pid()
    # beside the live server (never): it would go on refusing the new key until an unplanned restart, the cycle green
    # (#44): refused, naming the fix, nothing touched
    beside = playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": KEY2, "bc_stop_policy": "never"})
    text = " ".join(beside.out.split())
    assert beside.rc != 0 and "bc_stop_policy=never never does: it would go on refusing the new key" in text, beside.out[-3000:]
    untouched(beside, before)
    # auto: the live server itself refuses the new key (read in the preflight), so the cycle restarts it; the drain asks
    # it with the key it runs with; the restart applies the new one
    auto = playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": KEY2, "bc_stop_policy": "auto"})
    assert auto.rc == 0, auto.out[-3000:]
    assert "a key rotation: the live server refuses the new key until it starts again" in " ".join(auto.out.split())
    environ = sh("tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value llama-lab)/environ")
    assert f"LLAMA_API_KEY={KEY2}" in environ.splitlines()
    for run in (beside, auto):
        assert KEY not in run.out and KEY2 not in run.out
    reliability(fault="API key rotation", injected="a new bc_api_key while the server runs with the old one (never, then auto)",
                did="the live server refused the new key in the preflight: under never refused naming the fix; under auto "
                "stopped and restarted with the new key (drain and probes used the running server's key); cycle green",
                service_after="active, new key", data_kept="full results", detect_s=None, run_s=beside.seconds + auto.seconds)


@pytest.mark.path("refused.target", real="Ansible's inventory pattern matching and --limit (no function of the project)")
def test_a_target_that_matches_no_host_fails_the_job(llama, reliability):
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_target": "infrence"})
    assert run.rc != 0 and "bc_target=infrence matches no host of the inventory" in " ".join(run.out.split()), run.out[-3000:]
    limited = playbook("benchmark_cycle.yml", "--limit", HOST, extra_vars={"bc_target": "nosuchgroup"})
    assert limited.rc != 0 and "matches no host within --limit" in " ".join(limited.out.split()), limited.out[-3000:]
    reliability(fault="target matches no host", injected="-e bc_target=infrence (a typo), and one outside --limit",
                did="the job fails naming the target and the inventory's groups (it ended green before)",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds + limited.seconds)


# a systemctl that hangs on the one question the preflight asks it first (a wedged systemd or D-Bus); every other call
# goes to the real one: the cycle's read is killed on the host at bc_command_timeout_s, not left to the task's bound
HUNG_SYSTEMCTL = """#!/bin/sh
[ "$1 $2 $3" = "--property=MainPID -- show" ] && exec sleep infinity
exec /usr/bin/systemctl "$@"
"""


@pytest.mark.path("refused.preflight", real="a hung systemctl killed by the host's own timeout (a process, a clock)")
def test_a_command_that_hangs_on_the_host_fails_at_its_own_deadline_naming_it(llama, reliability):
    before = pid()
    sh(f"cat > /usr/local/bin/systemctl <<'EOF'\n{HUNG_SYSTEMCTL}EOF\nchmod 755 /usr/local/bin/systemctl")
    try:
        run = playbook("benchmark_cycle.yml", extra_vars={"bc_command_timeout_s": 2})
    finally:
        sh("rm -f /usr/local/bin/systemctl")
    text = " ".join(run.out.split())
    assert run.rc != 0 and "`systemctl show llama-lab` did not answer within bc_command_timeout_s=2 s" in text, run.out[-3000:]
    assert "Timed out after" not in run.out  # the host's own bound ended it, not the controller's task bound
    assert sh("pgrep -f '[s]leep infinity' || true").strip() == ""  # killed on the host, not left behind
    untouched(run, before)
    assert serving() == "active, answers 2+2=4"
    reliability(fault="a command that hangs on the host", injected="systemctl show (the preflight's first read) never answers",
                did="killed on the host at bc_command_timeout_s; refused naming the command and the setting; nothing touched",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("refused.router", real="a router hook process's exit status and what it prints, through every output "
                  "channel (stdout, JUnit, the event log)")
def test_a_failing_router_hook_stops_the_cycle_before_the_drain_and_its_token_stays_out_of_every_channel(
        llama, tmp_path, reliability):
    """The hook runs with failed_when false and no_log (its token): its exit code must still decide, and what it
    prints is shown with its token redacted, in stdout, the event log and the JUnit file (the operator's, 0600)."""
    token = "tok-" + KEY
    sh(f"printf '#!/bin/sh\\necho \"$1\" >> /tmp/lb-log\\necho \"lb said no to $*\" >&2\\nexit 3\\n' > {HOOK} "
       f"&& chmod +x {HOOK} && rm -f /tmp/lb-log")
    before = pid()
    junit, log = tmp_path / "junit.xml", tmp_path / "events.jsonl"
    extra = {"bc_lb_remove": {"argv": [HOOK, "remove", "--token=" + token]},
             "bc_lb_restore": {"argv": [HOOK, "restore", "--token=" + token]}}
    proc = subprocess.run(playbook_cmd("benchmark_cycle.yml", extra_vars=extra), cwd=ROOT, capture_output=True, text=True,
                          env=env(BC_CYCLE_EVENT_LOG=str(log), BC_CYCLE_JUNIT=str(junit)), timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"the router hook (remove) of {HOST} failed: exit 3" in " ".join(out.split()), out[-3000:]
    # nothing drained or stopped while the router may still send traffic
    assert pid() == before and sh("cat /tmp/lb-log").split() == ["remove"], out[-3000:]
    assert "lb said no to remove" in out  # the hook's own words are shown, its token is not
    leaks = {"stdout": token in out, "junit": token in junit.read_text(), "events": token in log.read_text(),
             "results": any(token in p.read_text(errors="replace") for p in (ROOT / "results").rglob("*") if p.is_file())}
    assert not any(leaks.values()), leaks
    assert stat.S_IMODE(junit.stat().st_mode) == 0o600 and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert serving() == "active, answers 2+2=4"
    reliability(fault="router hook fails", injected="a remove hook that exits 3", did="the cycle stopped before the drain, "
                "naming the hook and its exit code; nothing stopped", service_after=serving() + " (same PID)", data_kept="-",
                detect_s=None, run_s=0.0)
    reliability(fault="router token in the outputs", injected="a router hook whose argv carries a token and which echoes it on failure",
                did="the hook's failure shown with its token redacted in stdout, events, JUnit (0600) and results",
                service_after=serving(), data_kept="-", detect_s=None, run_s=0.0)


@pytest.mark.path("refused.router", real="a router read-back command's exit status")
def test_a_router_that_does_not_follow_its_hook_stops_the_cycle_before_the_drain(llama, reliability):
    """The hook exits 0, but its read-back (`check`) says the host is still in the router: believed by
    its exit status alone, the service would have been stopped under live traffic."""
    sh(f"printf '#!/bin/sh\\necho \"$1\" >> /tmp/lb-log\\n' > {HOOK} && chmod +x {HOOK} && rm -f /tmp/lb-log")
    sh("printf '#!/bin/sh\\necho still routed >&2\\nexit 1\\n' > /usr/local/bin/lb-check && chmod +x /usr/local/bin/lb-check")
    before = pid()
    extra = {"bc_lb_remove": {"argv": [HOOK, "remove"], "check": ["/usr/local/bin/lb-check", "is-out"]},
             "bc_lb_restore": {"argv": [HOOK, "restore"]}}
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    text = " ".join(run.out.split())
    assert run.rc != 0 and "its read-back says the router did not follow: exit 1 still routed" in text, run.out[-3000:]
    assert pid() == before and serving() == "active, answers 2+2=4"
    reliability(fault="a router that does not follow its hook", injected="the remove hook exits 0, its read-back (check) exits 1",
                did="the cycle stopped before the drain naming the read-back; the service never stopped",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)
