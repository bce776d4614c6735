"""Fail closed, through the real cycle: absent, empty, zero and unknown never read as fine. Each case
once passed the preflight (or a check) and did the wrong thing quietly; now it is refused before
anything is touched (no lock, the unit's process untouched) with a message naming the setting and the
fix, or verified by reading the state back. Real ansible-playbook, real systemd, real llama-server
(the SGLang and nvidia-smi doubles where the behaviour is theirs)."""

from __future__ import annotations

import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import (
    H200_REPORT,
    HOST,
    ROOT,
    Run,
    env,
    install_gpu_double,
    playbook,
    playbook_cmd,
    read_events,
    remove_gpu_double,
    serve_gpu_report,
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


@pytest.mark.parametrize(("extra", "message"), [
    ({"bc_lb_remove": {"args": [HOOK, "remove"]}, "bc_lb_restore": {"argv": [HOOK, "restore"]}},
     "bc_lb_remove needs exactly one of argv"),
    ({"bc_lb_remove": {"URL": "http://127.0.0.1:9/out"}, "bc_lb_restore": {"url": "http://127.0.0.1:9/in"}}, "unknown key(s) URL"),
    ({"bc_lb_required": True}, "bc_lb_remove and bc_lb_restore are not given"),
    ({"bc_serial": 0}, "bc_serial=0"),
    ({"bc_serial": "-1"}, "bc_serial='-1'"),
    ({"bc_sweep_iters": 0}, "bc_sweep_iters=0: give a number from 3"),
    ({"bc_probe_expect": ""}, "bc_probe_expect is empty"),
    ({"bc_engine": "llama.cpp"}, "value of bc_engine must be one of: llamacpp, sglang, vllm, got: llama.cpp"),
    ({"bc_api_key": KEY, "bc_engine_extra_args": ["--api-key", KEY]}, "bc_engine_extra_args[0] carries a secret"),
    ({"bc_gpu_health_rules": {"temperature_c": {"max": "hot"}}}, "bc_gpu_health_rules.temperature_c.max=hot: give a number"),
    ({"bc_api_key_required": True}, "bc_api_key is empty: the server would be restarted with no authentication"),
    # a results directory the controller cannot write (a path under a file): the sweep's results would be lost
    ({"bc_results_dir": "/etc/hostname/results"}, "the controller cannot write the results directory /etc/hostname/results"),
])
@pytest.mark.path("refused.preflight", decision="bc_contract.problems")
def test_a_setting_that_would_disable_a_protection_is_refused_before_anything_is_touched(llama, reliability, extra, message):
    before = pid()
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    text = " ".join(run.out.split())
    assert run.rc != 0 and message in text, run.out[-3000:]
    assert KEY not in run.out and "Traceback" not in run.out
    untouched(run, before)
    assert serving() == "active, answers 2+2=4"
    reliability(fault="fail closed: " + message.split(":")[0][:60], injected=f"-e {extra}".replace(KEY, "<key>")[:120],
                did="refused in the preflight naming the setting and the fix; no lock, unit untouched",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("refused.preflight", decision="bc_contract.key_problem")
def test_an_empty_key_never_takes_the_key_away_from_a_unit_that_has_one(llama, reliability):
    first = playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": KEY})
    assert first.rc == 0, first.out[-3000:]
    before = pid()
    # the lab says bc_api_key_required: false, yet the unit has a key today: an empty one is refused
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": ""})
    text = " ".join(run.out.split())
    assert run.rc != 0 and "bc_api_key is empty but llama-lab has a key today" in text, run.out[-3000:]
    assert KEY not in run.out
    untouched(run, before)
    assert f'LLAMA_API_KEY="{KEY}"' in sh("cat /etc/benchmark-cycle/llama-lab.env")
    reliability(fault="empty API key against a unit that has one", injected="BC_API_KEY unset after a cycle that installed a key",
                did="refused before the lock: the server would have been restarted serving anyone; unit and key untouched",
                service_after="active (with its key)", data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("stop.ready", real="the live server's own refusal of the new key, and its environment after the restart")
def test_a_key_rotation_is_put_in_force_by_a_restart_or_refused(llama, reliability):
    assert playbook("benchmark_cycle.yml", extra_vars={"bc_api_key": KEY}).rc == 0
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
[ "$1 $2 $3 $4" = "show -p MainPID --value" ] && exec sleep infinity
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


@pytest.mark.path("refused.unit", decision="bc_bringback.verdict")
def test_the_first_failure_is_the_one_reported(llama, reliability):
    """A unit that fails systemd-analyze verify: the readiness of the (never stopped) server that follows
    does not mask it, and no later task crashes on the failed module's result."""
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_engine_binary": "/usr/local/bin/no-such-server"})
    text = " ".join(run.out.split())
    assert run.rc != 0 and "the cycle failed at Verify, install and enable the unit" in text, run.out[-3000:]
    assert "fails systemd-analyze verify" in text and "no-such-server is not executable" in text
    assert "the service was never stopped and answers correctly" in text and "has no attribute" not in text
    assert serving() == "active, answers 2+2=4"
    reliability(fault="a failure masked by a later one", injected="bc_engine_binary that does not exist (systemd-analyze verify fails)",
                did="the play fails naming the unit's verify failure; the live server, never stopped, still serves",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("refused.preflight", decision="bc_gpuhealth.judge")
def test_a_gpu_with_no_readings_is_not_healthy(llama, reliability):
    install_gpu_double()
    try:
        report = H200_REPORT.read_text()
        for old, new in (("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>N/A</gpu_temp>"),
                         ("<persistence_mode>Enabled</persistence_mode>", "<persistence_mode>N/A</persistence_mode>"),
                         ("<volatile>", "<volatile_na>"), ("</volatile>", "</volatile_na>")):
            assert old in report, old
            report = report.replace(old, new, 1)
        serve_gpu_report(report)
        before = pid()
        run = playbook("benchmark_cycle.yml")
        text = " ".join(run.out.split())
        assert run.rc != 0 and "no readings" in text and "Nothing was stopped" in text, run.out[-3000:]
        assert pid() == before
    finally:
        remove_gpu_double()
    reliability(fault="a GPU with no readings", injected="nvidia-smi -q -x with temperature, ECC and persistence all N/A",
                did="GPU health fails in the pre-check (it read healthy before); nothing stopped",
                service_after=serving(), data_kept="-", detect_s=None, run_s=run.seconds)


@pytest.mark.path("refused.router", real="what a failing hook prints, through every output channel (stdout, JUnit, the event log)")
def test_router_tokens_stay_out_of_every_channel_and_the_junit_file_is_the_operators(llama, tmp_path, reliability):
    token = "tok-" + KEY
    sh(f"printf '#!/bin/sh\\necho \"lb said no to $*\" >&2\\nexit 3\\n' > {HOOK} && chmod +x {HOOK}")
    junit, log = tmp_path / "junit.xml", tmp_path / "events.jsonl"
    extra = {"bc_lb_remove": {"argv": [HOOK, "remove", "--token=" + token]},
             "bc_lb_restore": {"argv": [HOOK, "restore", "--token=" + token]}}
    proc = subprocess.run(playbook_cmd("benchmark_cycle.yml", extra_vars=extra), cwd=ROOT, capture_output=True, text=True,
                          env=env(BC_CYCLE_EVENT_LOG=str(log), BC_CYCLE_JUNIT=str(junit)), timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"the router hook (remove) of {HOST} failed: exit 3" in " ".join(out.split()), out[-3000:]
    assert "lb said no to remove" in out  # the hook's own words are shown, its token is not
    leaks = {"stdout": token in out, "junit": token in junit.read_text(), "events": token in log.read_text(),
             "results": any(token in p.read_text(errors="replace") for p in (ROOT / "results").rglob("*") if p.is_file())}
    assert not any(leaks.values()), leaks
    assert stat.S_IMODE(junit.stat().st_mode) == 0o600 and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert serving() == "active, answers 2+2=4"
    reliability(fault="router token in the outputs", injected="a router hook whose argv carries a token and which echoes it on failure",
                did="the hook's failure shown with its token redacted in stdout, events, JUnit (0600) and results",
                service_after=serving(), data_kept="-", detect_s=None, run_s=0.0)


@pytest.mark.path("refused.preflight", decision="bc_contract.problems")
def test_preflight_refusals_never_print_a_traceback_under_awx_like_answers(llama):
    """AWX sends survey answers as strings: an empty or hostile one is refused naming the setting."""
    for extra, message in (({"bc_sweep_batch_sizes": ""}, "bc_sweep_batch_sizes is empty"),
                           ({"bc_readiness_timeout_s": "inf"}, "bc_readiness_timeout_s"),
                           ({"bc_sweep_tp_sizes": "1,x"}, "bc_sweep_tp_sizes")):
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "e.jsonl"
            proc = subprocess.run(playbook_cmd("benchmark_cycle.yml", extra_vars=extra), cwd=ROOT, capture_output=True, text=True,
                                  env=env(BC_CYCLE_EVENT_LOG=str(log)), timeout=300, check=False)
            out = proc.stdout + proc.stderr
            assert proc.returncode != 0 and message in out and "Traceback" not in out, out[-2000:]
            assert not any("Take the lock" in (e["task"] or "") for e in read_events(log))


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
