"""The guarantees, each tried the way it broke (issue "Guarantees"): real cycles against the lab
(systemd as PID 1, the real llama-server, the SGLang double for SGLang-only behaviour), each
asserting what the service, the router, the lock and every output look like afterwards."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import (
    DOUBLE,
    HOST,
    ROOT,
    env,
    lab_hosts,
    playbook,
    playbook_cmd,
    serving,
    sh,
    wait_in_host,
)

KEY = "sk-bc-guard-5e1d07a9"
HOOK = "/usr/local/bin/lb-hook"


def pid() -> str:
    return sh("systemctl show -p ExecMainPID --value llama-lab").strip()


def router() -> list[str]:
    """The router hook's calls on the host, in order (remove/restore)."""
    return sh("cat /tmp/lb-log 2>/dev/null || true").split()


def with_router(extra: dict | None = None) -> dict:
    sh(f"printf '#!/bin/sh\\necho \"$1\" >> /tmp/lb-log\\n' > {HOOK} && chmod +x {HOOK} && rm -f /tmp/lb-log")
    return dict(extra or {}, bc_lb_remove={"argv": [HOOK, "remove", "token-" + KEY]},
                bc_lb_restore={"argv": [HOOK, "restore", "token-" + KEY]})


@pytest.mark.path("stop.not_ready.not_rolled_back",
                  real="the unit's install and rollback files on the host (rollback/<token>) across three cycles")
def test_rollback_never_brings_back_an_older_cycles_unit_or_key(llama, reliability):
    """v1; v2 with a new key; v2 unchanged with a server that fails its check: v2 and the new key stay."""
    v2 = {"bc_api_key": KEY, "bc_engine_env": {"BC_VERSION": "v2 é€ \"$HOME\""}}
    assert playbook("benchmark_cycle.yml", extra_vars=v2).rc == 0
    # systemd itself reads the value back intact (UTF-8, quotes, no expansion)
    environ = sh("tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value llama-lab)/environ")
    assert 'BC_VERSION=v2 é€ "$HOME"' in environ.splitlines(), environ
    unit_v2 = sh("sha256sum /etc/systemd/system/llama-lab.service /etc/benchmark-cycle/llama-lab.env")
    before = pid()
    run = playbook("benchmark_cycle.yml", extra_vars=dict(v2, bc_probe_expect="5"))
    assert run.rc != 0
    assert "this cycle replaced nothing to roll back to" in " ".join(run.out.split()), run.out[-3000:]
    assert sh("sha256sum /etc/systemd/system/llama-lab.service /etc/benchmark-cycle/llama-lab.env") == unit_v2
    assert f"LLAMA_API_KEY=\"{KEY}\"" in sh("cat /etc/benchmark-cycle/llama-lab.env")
    assert pid() != before  # started once after the stop, not restarted again by a rollback
    # a service this cycle never stopped is never restarted, whatever its check says
    before = pid()
    never = playbook("benchmark_cycle.yml", extra_vars=dict(v2, bc_probe_expect="5", bc_stop_policy="never"))
    assert never.rc != 0 and "this cycle never stopped it: it was not restarted" in " ".join(never.out.split())
    assert pid() == before
    reliability(fault="stale rollback", injected="cycle v2 with a new key, then v2 unchanged whose check fails",
                did="nothing of an earlier cycle put back: unit and key stay v2; not restarted a second time; play failed",
                service_after=serving(), data_kept="the live unit and env file (v2)", detect_s=None, run_s=run.seconds)


@pytest.mark.path("stop.not_ready.not_rolled_back",
                  real="what a real server and systemd print (journal, /proc cmdline) at -vvv, on a failure path; a "
                       "wall-clock readiness deadline against a server that warms for ever (clock)")
def test_the_api_key_never_reaches_a_command_line_or_any_output(llama, tmp_path, reliability):
    """The SGLang double logs its server_args (the key included) as SGLang does, then warms up for ever: readiness waits
    its budget (a wall-clock deadline), fails naming the phase and prints the journal tail; this cycle installed the
    unit, so nothing is rolled back or restarted. The key must appear nowhere, at -vvv too, and not in the event log."""
    # a host that never ran the SGLang unit (a case before this one on the same lab host may have installed it)
    sh("systemctl stop sglang-double 2>/dev/null; rm -f /etc/systemd/system/sglang-double.service "
       "/etc/benchmark-cycle/sglang-double.env /etc/benchmark-cycle/sglang-double.secrets.yaml; systemctl daemon-reload")
    # a 20 s budget: the double's port opens within it even on a loaded machine, so the phase at the end is warming
    extra = dict(DOUBLE, bc_api_key=KEY, bc_readiness_timeout_s=20, bc_readiness_delay_s=1)
    extra["bc_engine_env"] = dict(DOUBLE["bc_engine_env"], BC_DOUBLE_LOAD_S="0.2", BC_DOUBLE_WARMUP_S="100000")
    log = tmp_path / "events.jsonl"
    proc = subprocess.run(playbook_cmd("benchmark_cycle.yml", "-vvv", extra_vars=extra), cwd=ROOT,
                          env=env(BC_CYCLE_EVENT_LOG=str(log)), capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "journal lines of sglang-double" in out, out[-3000:]
    assert "is not ready: still warming when the 20 s budget ran out" in out, out[-3000:]
    # one bounded wait: the unit was new, so there is nothing of an earlier cycle to roll back to and nothing is
    # restarted a second time
    assert "replaced nothing to roll back to" in " ".join(out.split()), out[-3000:]
    assert out.count("TASK [inference_ops.benchmark_cycle.service_readiness : Wait for the server to be ready]") == 1
    assert "api_key='<redacted>'" in out  # the line was there, redacted
    # the live server's command line: its main process once it has one (a read while systemd restarts it, MainPID 0
    # or a process still exiting, gives nothing; ci9 saw an empty read once)
    main = "/proc/$(systemctl show -p MainPID --value sglang-double)/cmdline"
    try:
        wait_in_host(f"[ -n \"$(tr -d '\\0' < {main} 2>/dev/null)\" ]", 120)
    except AssertionError as err:
        raise AssertionError(f"{err}\n" + sh("systemctl status --no-pager sglang-double; "
                                              "journalctl -u sglang-double --no-pager -n 40 -o cat", check=False)) from None
    cmdline = sh(f"tr '\\0' ' ' < {main}")
    warming = sh("systemctl is-active sglang-double", check=False).strip()
    sh("systemctl stop sglang-double")
    leaks = {"stdout -vvv": KEY in out,
             "event log": KEY in log.read_text(), "cmdline": KEY in cmdline,
             "results": any(KEY in p.read_text(errors="replace") for p in (ROOT / "results").rglob("*") if p.is_file())}
    assert not any(leaks.values()), leaks
    assert "--config /etc/benchmark-cycle/sglang-double.secrets.yaml" in cmdline
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert sh("stat -c %a /etc/benchmark-cycle/sglang-double.secrets.yaml").strip() == "600"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    started = next(e["t"] for e in events if e["event"] == "ok" and "service_start : Start the unit" in (e.get("task") or ""))
    failed = next(e["t"] for e in events if e["event"] == "failed" and "Fail with the phase" in (e.get("task") or ""))
    reliability(fault="server never ready", injected="SGLang double that warms up for ever, 20 s budget",
                did="waited the budget (a wall-clock deadline), failed naming phase 'warming'; nothing of this cycle to "
                    "roll back to, so not restarted again; play failed",
                service_after=f"{warming} (still warming, as injected)", data_kept="sweep results of the run kept",
                detect_s=failed - started, run_s=None)
    reliability(fault="secrets on a failure path", injected="an API key; the SGLang double logs server_args(api_key=...); a failed "
                "check prints the journal tail at -vvv (the rescue path: test_faults.py's sweep crash)",
                did="key on no command line (--config 0600 file), redacted in the journal tail; "
                "0 occurrences in stdout -vvv, the event log (0600) and results/", service_after="stopped (the test's double)",
                data_kept="-", detect_s=None, run_s=None)


@pytest.mark.path("refused.lock", real="two hosts in one batch (serial 2): Ansible's guarded block with one host refused")
def test_a_refused_lock_on_one_host_leaves_no_lock_on_another_in_the_same_batch(llama, tmp_path, reliability):
    """serial 2: host A's lock is held by another cycle, host B cycles; B's lock is gone afterwards."""
    hosts = lab_hosts()
    lab1 = dict(hosts[HOST])
    inventory = {"all": {"children": {"inference": {"hosts": {HOST: lab1, f"{HOST}-other": dict(lab1, bc_unit="other-unit")}}}}}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    group_vars = tmp_path / "group_vars"
    group_vars.mkdir()
    (group_vars / "all.yml").write_text((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    owner = json.dumps({"token": "foreign", "user": "bob", "controller": "elsewhere", "pid": "1", "started": "now"})
    sh(f"mkdir -p /run/lock/benchmark-cycle-other-unit.lock && echo '{owner}' > /run/lock/benchmark-cycle-other-unit.lock/owner.json")
    cmd = [str(Path(playbook_cmd("x")[0])), "benchmark_cycle.yml", "-i", str(inv), "-e", json.dumps({"bc_serial": 2})]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600, check=False)
    sh("rm -rf /run/lock/benchmark-cycle-other-unit.lock")
    assert proc.returncode != 0 and "another benchmark cycle holds" in proc.stdout
    assert not sh("ls /run/lock | grep benchmark-cycle-llama-lab || true").strip(), proc.stdout[-3000:]
    after = serving()
    assert after == "active, answers 2+2=4"
    reliability(fault="refused lock with serial 2", injected="host A's lock held by another cycle, host B in the same batch",
                did="A refused inside the guarded block; B cycled and released its lock", service_after=after, data_kept="-",
                detect_s=None, run_s=None)
