"""The dead-man switch's script (roles/service_drain/files/deadman.sh), run for real by /bin/sh with the arguments
module_utils/bc_switch.Switch.command gives it and a systemctl double first on PATH: what it does for each state of
the unit and of the controller's promise, and how it is installed, armed and disarmed. The real switch under the lab's
systemd: tests/integration (test_one_owner.py, test_release.py)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from test_unit_lifecycle import Clock, unit, write

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_switch
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_switch import Switch, script_path
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import END_WAIT_S, Unit, UnitError

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "service_drain" / "files" / "deadman.sh"

# TEST DOUBLE of systemctl for the switch's own shell (no systemd here; the lab runs the real one): it
# answers `show -P ActiveState|InvocationID` from the files beside it and records every call
SYSTEMCTL_DOUBLE = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
if [ "$1" = show ] && [ "$2" = -P ]; then cat "$(dirname "$0")/$3"; fi
# SIGKILL to all: the unit is down, unless the case keeps it stuck going down (a process in the GPU driver)
if [ "$1" = kill ] && [ ! -e "$(dirname "$0")/stuck" ]; then echo failed > "$(dirname "$0")/ActiveState"; fi
exit 0
"""
ARMED = "6f1c2a9b0e8d4c7fa1b2c3d4e5f60718"


def fire(tmp_path: Path, command: list[str], active: str, invocation: str) -> tuple[list[str], str]:
    """Run the switch's command as its service would (the repository's script as the file on the host), with the
    systemctl double first on PATH."""
    assert command[:2] == ["/bin/sh", str(SCRIPT)], command
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(SYSTEMCTL_DOUBLE)
    (bin_dir / "systemctl").chmod(0o755)
    (bin_dir / "calls").write_text("")
    (bin_dir / "ActiveState").write_text(active + "\n")
    (bin_dir / "InvocationID").write_text(invocation + "\n")
    fake_sleep = bin_dir / "sleep"
    fake_sleep.write_text("#!/bin/sh\nexit 0\n")
    fake_sleep.chmod(0o755)
    out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True,
                         env={"PATH": "%s:/usr/bin:/bin" % bin_dir}).stdout
    return [c for c in (bin_dir / "calls").read_text().splitlines() if not c.startswith("show")], out


def test_the_switch_restarts_only_the_start_it_was_armed_for_by_a_stop_job_and_sigkill(tmp_path):
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    command = Switch(u).command(str(SCRIPT), None, "restart", ARMED)
    calls, out = fire(tmp_path, command, "active", ARMED)  # still the released start: restarted
    assert calls == ["stop --no-block -- llama-lab.service", "kill --kill-who=all --signal=SIGKILL -- llama-lab.service",
                     "reset-failed -- llama-lab.service", "start --no-block -- llama-lab.service"], calls
    assert "did not disarm it in time" in out and "restarting llama-lab.service (released in place)" in out
    # an operator restarted it by hand since (another InvocationID), and it serves: nothing is done, and the
    # switch says why in its journal
    calls, out = fire(tmp_path, command, "active", "aa" * 16)
    assert calls == [] and "runs another start (%s) than the one the switch was armed for (%s): nothing done" % ("aa" * 16, ARMED) in out
    with pytest.raises(UnitError, match="restarts only the start of it that it was armed for"):
        Switch(u).command(str(SCRIPT), None, "restart", "")


def test_the_switch_starts_the_unit_once_it_is_down_and_a_unit_stuck_going_down_at_the_bound(tmp_path):
    """systemd tests a start against StartLimitBurst at every state change of a stop it waits behind (systemd#39247,
    252): a start queued behind the switch's own stop spent the burst, and the operator's next start was refused. The
    switch reads the unit down before its start (the real case: test_faults.py, the operator's start limit); a unit
    stuck going down (a process in the GPU driver) is started at the bound all the same, queued behind the stop."""
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    for action, armed in (("restart", ARMED), ("start", "")):
        fire(tmp_path, Switch(u).command(str(SCRIPT), None, action, armed), "active" if armed else "deactivating", armed)
        every = (tmp_path / "bin" / "calls").read_text().splitlines()
        reset = every.index("reset-failed -- llama-lab.service")
        assert every[reset - 1] == "show -P ActiveState -- llama-lab.service" and every[reset + 1:] == ["start --no-block -- llama-lab.service"]
    (tmp_path / "bin" / "stuck").write_text("")
    fire(tmp_path, Switch(u).command(str(SCRIPT), None, "restart", ARMED), "active", ARMED)
    every = (tmp_path / "bin" / "calls").read_text().splitlines()
    looks = every[every.index("kill --kill-who=all --signal=SIGKILL -- llama-lab.service") + 1:-2]
    assert looks == ["show -P ActiveState -- llama-lab.service"] * (END_WAIT_S * 5), looks[-3:]
    assert every[-2:] == ["reset-failed -- llama-lab.service", "start --no-block -- llama-lab.service"]


def test_disarm_lets_a_firing_switch_finish_and_never_cuts_it_halfway(tmp_path):
    """A switch killed between its SIGKILL and its start would leave the unit down: disarm stops the timer and
    waits for a firing switch to end, bounded."""
    calls: list[list[str]] = []
    firing = {"left": 3}

    def run(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        words = argv[argv.index("--") + 1:]
        calls.append(words)
        if words[:2] == ["is-active", "bc-deadman-bc-test.service"]:
            firing["left"] -= 1
            return (0, "active\n", "") if firing["left"] >= 0 else (3, "inactive\n", "")
        if words[0] == "is-active":
            return 0, "active\n", ""
        return 0, "", ""
    clock = Clock()
    u = unit(tmp_path, run)  # type: ignore[arg-type]
    assert Switch(u).disarm(clock=clock, sleep=clock.sleep)["was_armed"]
    assert ["stop", "bc-deadman-bc-test.timer"] in calls and ["stop", "bc-deadman-bc-test.service"] not in calls
    firing["left"] = 10**6  # it never ends: named, at the bound
    with pytest.raises(UnitError, match="still firing after %d s" % (END_WAIT_S + 30)):
        Switch(u).disarm(clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("state", ["active", "activating", "reloading"])
def test_the_switch_never_starts_a_unit_someone_started_since(tmp_path, state):
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    command = Switch(u).command(str(SCRIPT), "llama-lab/2026-1", "start")
    calls, out = fire(tmp_path, command, state, "")
    assert calls == [] and 'llama-lab.service is %s: started since the switch was armed, nothing done' % state in out
    calls, out = fire(tmp_path, command, "inactive", "")  # stopped by the dead cycle: its sweep ended, started
    assert calls == ["reset-failed -- llama-lab.service", "start --no-block -- llama-lab.service"]
    assert "ending the sweep llama-lab/2026-1, then starting llama-lab.service" in out


def test_every_value_is_an_argument_of_its_own_and_the_sweep_tag_is_matched_literally(tmp_path):
    """No shell reads the values: a tag with shell and regex characters is one argument, and the script's pkill
    pattern, handed to the real pgrep, finds a process with exactly that tag and nothing runs."""
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    # a tag of this test alone: the other cases' switches (another xdist worker) pkill their own tags, never this one
    # the command a shell would run from the tag names a file of this run alone: one left by anything else proves nothing
    injected = Path("/tmp/x-%d" % os.getpid())
    injected.unlink(missing_ok=True)
    tag = "quote-%d/2026-1 `touch %s` .*" % (os.getpid(), injected)
    argv = Switch(u).command(str(SCRIPT), tag)
    with pytest.raises(UnitError, match="systemd would expand a"):  # systemd expands $VAR in a service's arguments
        Switch(u).command(str(SCRIPT), "x/$HOME")
    assert argv[argv.index("--sweep") + 1] == tag
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # TEST DOUBLE of pkill: records its pattern (one line, NUL-free) and kills nothing
    (bin_dir / "pkill").write_text('#!/bin/sh\nprintf "%s" "$4" > "$(dirname "$0")/pattern"\n')
    (bin_dir / "pkill").chmod(0o755)
    calls, out = fire(tmp_path, argv, "inactive", "")
    assert "ending the sweep %s, then starting llama-lab.service" % tag in out and not injected.exists()
    assert calls[-1] == "start --no-block -- llama-lab.service"
    pattern = (bin_dir / "pattern").read_text()
    assert pattern == "--tag " + re.escape(tag).replace("\\ ", " ").replace("\\/", "/"), pattern
    probe = subprocess.Popen(["bash", "-c", "exec -a 'x --tag %s' sleep 30" % tag])
    other = subprocess.Popen(["bash", "-c", "exec -a 'x --tag %s' sleep 30" % tag.replace(".*", "ab")])
    try:
        # until bash has exec'd sleep under that name (a fixed pause lost the race on a loaded machine)
        deadline = time.monotonic() + 30
        for proc in (probe, other):
            while not Path("/proc/%d/cmdline" % proc.pid).read_bytes().startswith(b"x --tag"):
                assert proc.poll() is None, "the probe ended (%s) before it was read" % proc.returncode
                assert time.monotonic() < deadline, "bash did not exec within 30 s"
                time.sleep(0.02)
        found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True, check=False).stdout.split()
        assert str(probe.pid) in found and str(other.pid) not in found
    finally:
        for proc in (probe, other):
            proc.kill()
            proc.wait()


def test_the_script_is_written_once_per_content_never_in_place_and_a_missing_one_is_refused_before_anything_is_armed(
        tmp_path, monkeypatch):
    """One file per content (an armed switch reads its file at each run: no later arm may change it under it), written
    where it is missing or not root's alone; a folder others may write is refused (the switch runs as root)."""
    written: list[tuple[str, int]] = []

    def record(path: str, text: str, mode: int) -> None:
        written.append((path, mode))
        write(path, text, mode)
    runs: list[list[str]] = []
    folder = tmp_path / "libexec"
    monkeypatch.setattr(bc_switch, "SWITCH_DIR", str(folder))
    u = Unit("llama-lab", lambda argv, timeout=None: runs.append(argv) or (0, "", ""), record, systemd_dir="/x", state_dir="/x")
    for script in ("", "echo hi\n", "#!/bin/bash\necho\n"):
        with pytest.raises(UnitError, match="needs its script"):
            Switch(u).arm(900, None, "start", script=script)
    assert runs == [] and not folder.exists()  # refused before anything ran
    text = SCRIPT.read_text()
    path, new = Switch(u).install(text)
    assert new and path == script_path(text) and path.startswith(str(folder) + "/deadman-") and written == [(path, 0o755)]
    assert Path(path).read_text() == text
    assert Switch(u).install(text.rstrip("\n")) == (path, False)  # the same (a lookup strips the last newline)
    other, new = Switch(u).install(text + "# another release\n")
    assert new and other != path and Path(path).read_text() == text  # the first one untouched
    if os.geteuid() == 0:  # as on a host: a file others may write is written again, a folder they may write refused
        os.chmod(path, 0o777)
        assert Switch(u).install(text) == (path, True) and os.stat(path).st_mode & 0o777 == 0o755
        os.chmod(folder, 0o777)
        with pytest.raises(UnitError, match="is not root's alone"):
            Switch(u).install(text)


@pytest.mark.parametrize("args", [["--end-wait", "08"], ["--end-wait", ""], ["--heartbeat", "/x/heartbeat", "--timer", "t.timer"],
                                  ["--heartbeat", "/x/heartbeat", "--timer", "t.timer", "--outer-at", ""], ["--sweep"],
                                  ["--action", "resume"], ["--nope", "1"]],
                         ids=["octal-wait", "empty-wait", "no-outer-bound", "empty-outer-bound", "no-value", "bad-action",
                              "unknown"])
def test_a_bad_argument_does_nothing_and_says_why(tmp_path, args):
    """The script checks its own arguments: one it cannot read ends it before any step (exit 2, said in its journal),
    never halfway - past the stop and SIGKILL, a shell that stops at a bad number would leave the unit down."""
    argv = ["/bin/sh", str(SCRIPT), "--unit", "llama-lab.service", "--action", "start", *args]
    with pytest.raises(subprocess.CalledProcessError) as err:
        fire(tmp_path, argv, "inactive", "")
    assert err.value.returncode == 2 and "nothing done" in err.value.stdout
    assert (tmp_path / "bin" / "calls").read_text() == ""


# -- the heartbeat switch: the controller's promise of its next contact, read by the switch's real shell --------
def armed_with_heartbeat(tmp_path: Path, promised: str | None, outer_in_s: int = 3600, action: str = "start") -> tuple[list[str], str]:
    beat_file = tmp_path / "lock" / "heartbeat"
    beat_file.parent.mkdir(exist_ok=True)
    if promised is None:
        beat_file.unlink(missing_ok=True)
    else:
        beat_file.write_text(promised)
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    command = Switch(u).command(str(SCRIPT), "llama-lab/2026-1", action, ARMED if action == "restart" else "", str(beat_file),
                               int(time.time()) + outer_in_s)
    return fire(tmp_path, command, "inactive" if action == "start" else "active", ARMED)


def test_a_kept_promise_keeps_the_switch_quiet_and_armed(tmp_path):
    calls, out = armed_with_heartbeat(tmp_path, "%d\n" % (time.time() + 60))
    assert calls == [] and out == ""  # nothing done, nothing said, its timer left running (it checks again)


@pytest.mark.parametrize("promised", ["%d\n" % (time.time() - 1), None, "", "garbage\n", "12 34\n"],
                         ids=["broken", "absent", "empty", "garbage", "two-numbers"])
def test_a_broken_or_unreadable_promise_is_a_dead_controller_the_switch_stops_its_timer_and_starts(tmp_path, promised):
    calls, out = armed_with_heartbeat(tmp_path, promised)
    assert calls == ["stop --no-block -- bc-deadman-llama-lab.timer", "reset-failed -- llama-lab.service",
                     "start --no-block -- llama-lab.service"], calls
    assert "the heartbeat of the controller stopped" in out and "ending the sweep llama-lab/2026-1, then starting" in out


def test_the_outer_deadline_holds_even_for_a_controller_that_keeps_its_promises(tmp_path):
    """Alive but stuck (it beats, never finishes): the switch acts at the cycle's worst case all the same."""
    calls, _out = armed_with_heartbeat(tmp_path, "%d\n" % (time.time() + 600), outer_in_s=-1, action="restart")
    assert calls[0] == "stop --no-block -- bc-deadman-llama-lab.timer" and calls[-1] == "start --no-block -- llama-lab.service"
    assert "kill --kill-who=all --signal=SIGKILL -- llama-lab.service" in calls


def test_a_switch_that_finds_the_unit_started_since_touches_nothing_and_keeps_checking_until_its_bound(tmp_path):
    """The controller died before its stop (or an operator started the unit): nothing to do now, but the timer is left
    checking (a stop that comes later is covered) until the outer bound, where it stops itself."""
    beat_file = tmp_path / "heartbeat"
    beat_file.write_text("0\n")
    u = Unit("llama-lab", lambda *a, **k: (0, "", ""), write, systemd_dir="/x", state_dir="/x")
    calls, out = fire(tmp_path, Switch(u).command(str(SCRIPT), None, "start", "", str(beat_file), int(time.time()) + 60), "active", "")
    assert calls == [] and "started since the switch was armed" in out
    calls, out = fire(tmp_path, Switch(u).command(str(SCRIPT), None, "start", "", str(beat_file), int(time.time()) - 1), "active", "")
    assert calls == ["stop --no-block -- bc-deadman-llama-lab.timer"] and "started since the switch was armed" in out


def test_arming_with_a_heartbeat_checks_every_few_seconds_and_without_fires_once(tmp_path, monkeypatch):
    monkeypatch.setattr(bc_switch, "SWITCH_DIR", str(tmp_path / "libexec"))  # never the machine's own
    runs: list[list[str]] = []

    def run(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        runs.append(argv)
        if "is-active" not in argv:
            return 0, "", ""
        return (0, "active\n", "") if any(a.endswith(".timer") for a in argv) else (3, "inactive\n", "")
    u = unit(tmp_path, run)  # type: ignore[arg-type]
    got = Switch(u).arm(900, None, "start", str(tmp_path / "heartbeat"), 75, now=1000.0, script=SCRIPT.read_text())
    launch = next(a for a in runs if a[0] == "systemd-run")
    assert got["check_s"] == 15 and "--on-active=15s" in launch and "--on-unit-active=15s" in launch
    assert launch[launch.index("--outer-at") + 1] == "1900"  # the outer bound, epoch: armed at 1000 + 900
    assert launch[launch.index("--") + 1:launch.index("--") + 3] == ["/bin/sh", got["script"]] and got["script_written"]
    runs.clear()
    got = Switch(u).arm(900, None, "start", script=SCRIPT.read_text())
    launch = next(a for a in runs if a[0] == "systemd-run")
    assert got["check_s"] == 0 and "--on-active=900s" in launch and not any(a.startswith("--on-unit-active") for a in launch)
    assert Switch(u).arm(900, None, "start", "/x/heartbeat", 5, now=0.0, script=SCRIPT.read_text())["check_s"] == 2  # never below 2 s


# TEST DOUBLE of systemctl for the modules run through Ansible (no systemd here): every call recorded, a unit that is
# down, a switch that is armed
MODULE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/calls"
case "$*" in
  *" show "*) printf 'ActiveState=inactive\\nSubState=dead\\nInvocationID=\\nNRestarts=0\\n' ;;
  *"is-active -- bc-deadman-bc-test.timer"*) echo active ;;
  *is-active*) echo inactive; exit 3 ;;
esac
exit 0
"""


def test_the_units_start_disarms_its_switch_and_the_switch_module_refuses_an_arm_without_its_script(tmp_path):
    """inference_unit state=started starts the unit, then stops the switch's timer (its job is done); the switch's own
    module refuses an arm without its script, and in check mode arms nothing."""
    from test_modules_adhoc import adhoc

    (tmp_path / "systemctl").write_text(MODULE_SYSTEMCTL)
    (tmp_path / "systemctl").chmod(0o755)
    r = adhoc("inference_unit", {"name": "bc-test", "state": "started"}, path=str(tmp_path))
    calls = (tmp_path / "calls").read_text().splitlines()
    start = calls.index("--no-block -- start bc-test.service")
    assert r["_status"] == "CHANGED" and calls.index("-- stop bc-deadman-bc-test.timer") > start, (r, calls)
    # a restart for a start of the unit that no longer runs: nothing started, and the switch is done all the same
    (tmp_path / "calls").write_text("")
    r = adhoc("inference_unit", {"name": "bc-test", "state": "restarted", "invocation_id": "aa11"}, path=str(tmp_path))
    calls = (tmp_path / "calls").read_text().splitlines()
    assert r["_status"] == "SUCCESS" and "-- stop bc-deadman-bc-test.timer" in calls, (r, calls)
    assert not any(" start " in " %s " % c or "restart" in c for c in calls), calls
    (tmp_path / "calls").write_text("")
    r = adhoc("inference_switch", {"name": "bc-test", "fire_after": 60}, path=str(tmp_path))
    assert r["_status"] == "FAILED!" and "state is armed but all of the following are missing: script" in r["msg"], r
    r = adhoc("inference_switch", {"name": "bc-test", "fire_after": 60, "script": "echo hi"}, path=str(tmp_path))
    assert r["_status"] == "FAILED!" and "needs its script" in r["msg"], r
    r = adhoc("inference_switch", {"name": "bc-test", "fire_after": 60, "script": SCRIPT.read_text()}, check=True,
              path=str(tmp_path))
    assert r["_status"] == "CHANGED" and r["fires_in_s"] == 60 and r["switch"] == "bc-deadman-bc-test", r
    assert (tmp_path / "calls").read_text() == ""  # nothing armed, nothing asked of systemd
