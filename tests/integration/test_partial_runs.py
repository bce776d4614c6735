"""Parts of the cycle run on their own with --tags, as operators run them (docs/operator-guide.md, "Partial runs"):
the preflight alone (the verdict and the plan, nothing touched), the sweep alone on a GPU that is free already
(refused by name while the service holds it), readiness alone, the report alone. Each keeps the guarantees of the
steps it runs: none stops a service, takes a host out of the router or leaves a lock. Real ansible-playbook, real
systemd, the real llama-server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest
import yaml
from conftest import (
    HOST,
    ROOT,
    SWEEP_RUNNING,
    env,
    gated_sweep_python,
    playbook,
    playbook_cmd,
    serving,
    sh,
    wait_for_sweep,
    wait_in_host,
    wait_serving,
)

# the service started by hand is awaited as the cycle awaits a reload: the lab's own readiness budget
READINESS_S = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())["bc_readiness_timeout_s"]


def pid() -> str:
    return sh("systemctl show -p MainPID --value llama-lab").strip()


def no_lock() -> bool:
    return sh("ls /run/lock/ | grep -c benchmark-cycle || true").strip() == "0"


def stamps() -> list[str]:
    return sorted(p.name for p in (ROOT / "results" / HOST).glob("*") if list(p.glob("sweep-tp*.json")))


def history_of(stamp: str) -> list[dict]:
    lines = (ROOT / "results/history.jsonl").read_text().splitlines() if (ROOT / "results/history.jsonl").exists() else []
    return [h for h in map(json.loads, lines) if h["host"] == HOST and h["stamp"] == stamp]


@pytest.mark.path("partial.tags", real="tagged runs against a live unit (a running server, one stopped by hand)")
def test_each_part_runs_on_its_own_and_keeps_its_guarantees(llama, reliability):
    before, unit = pid(), sh("sha256sum /etc/systemd/system/llama-lab.service")

    # a job time limit the roll fits (the time since the Target play's note counted), then one it cannot fit
    plan = playbook("benchmark_cycle.yml", "--tags", "preflight", extra_vars={"bc_job_budget_s": 86400})
    assert plan.rc == 0, plan.out[-3000:]
    assert f"{HOST}: sweep needs ~" in plan.out and "the service will be drained and stopped" in plan.out
    assert not any("Take the lock" in (e["task"] or "") or "Template" in (e["task"] or "") for e in plan.events)
    assert pid() == before and no_lock() and sh("sha256sum /etc/systemd/system/llama-lab.service") == unit
    short = playbook("benchmark_cycle.yml", "--tags", "preflight", extra_vars={"bc_job_budget_s": 60})
    said = " ".join(short.out.split())
    assert short.rc != 0 and "the roll's worst case is" in said and "over bc_job_budget_s=60" in said, short.out[-3000:]
    assert f"The cycle's worst case on {HOST} is" in said and "Nothing was touched" in said, short.out[-3000:]
    assert pid() == before and no_lock() and sh("sha256sum /etc/systemd/system/llama-lab.service") == unit

    # the preflight skipped: the whole cycle and the sweep alone are refused by name before anything is touched
    for args in (["--skip-tags", "preflight"], ["--tags", "sweep", "--skip-tags", "preflight"]):
        skipped = playbook("benchmark_cycle.yml", *args)
        assert skipped.rc != 0 and "the preflight did not run (--skip-tags preflight or always)" in skipped.out, skipped.out[-3000:]
        assert pid() == before and no_lock() and sh("sha256sum /etc/systemd/system/llama-lab.service") == unit

    held = playbook("benchmark_cycle.yml", "--tags", "sweep")
    text = " ".join(held.out.split())
    assert held.rc != 0 and f"llama-lab runs (MainPID {before}) and holds the GPU" in text, held.out[-3000:]
    assert "run the whole cycle (no --tags), or stop llama-lab first. Nothing was touched." in text
    assert pid() == before and no_lock()

    sh("systemctl stop llama-lab")  # the operator frees the GPU
    try:
        swept = playbook("benchmark_cycle.yml", "--tags", "sweep")
        assert swept.rc == 0, swept.out[-3000:]
        # it never starts what it did not stop, holds the lock only while it sweeps, and reports what it swept
        assert sh("systemctl is-active llama-lab", check=False).strip() == "inactive" and no_lock()
        stamp = stamps()[-1]
        assert re.search(rf"results/{HOST}/{stamp}/sweep-tp1-torch\.report\.md", swept.out), swept.out[-2000:]
        assert len(history_of(stamp)) == 1
    finally:
        sh("systemctl start llama-lab")
    wait_serving(READINESS_S, what="llama-lab started by hand after the sweep")

    report = playbook("benchmark_cycle.yml", "--tags", "report")
    assert report.rc == 0, report.out[-3000:]
    assert re.search(rf"results/{HOST}/{stamp}/sweep-tp1-torch\.report\.md", report.out), report.out[-2000:]
    assert len(history_of(stamp)) == 1  # rendered again, not recorded twice

    ready = playbook("benchmark_cycle.yml", "--tags", "readiness")
    assert ready.rc == 0 and f'{HOST}: llama-lab is ready and answers "4" to "2+2="' in ready.out, ready.out[-3000:]
    assert no_lock() and serving() == "active, answers 2+2=4"
    reliability(fault="parts of the cycle on their own (--tags)",
                injected="--tags preflight | --skip-tags preflight | sweep (GPU held, then freed) | report | readiness",
                did="plan alone touched nothing; a skipped preflight refused by name; sweep refused by name while the service held the GPU, ran once freed; "
                    "report rendered again without a second history line; readiness answered",
                service_after=serving(), data_kept="results + 1 history line", detect_s=None,
                run_s=plan.seconds + held.seconds + swept.seconds + report.seconds + ready.seconds)


# the sweep's own bound for the case below: what an orphaned sweep ran to before it watched its controller
SWEEP_TIMEOUT_S = 600


@pytest.mark.path("partial.sweep_lost", real="SIGKILL of the controller; the sweep's worker and the heartbeat on the host")
def test_a_sweep_on_its_own_ends_itself_when_its_controller_is_lost(llama, reliability):
    """`--tags sweep` arms no dead-man switch (it stops nothing). Its controller killed mid-sweep, the worker ended only
    at its timeout, holding the GPU and skewing the next cycle's sizing meanwhile. Now the worker watches the
    controller's promise of its next poll (the switch's rule) and ends itself once it is broken; it starts nothing."""
    sh("systemctl stop llama-lab")  # the operator frees the GPU
    try:
        # the shortest grace the contract takes: the promise of the next poll is broken 11 s after the last one
        extra = {"bc_sweep_python": gated_sweep_python(), "bc_sweep_timeout_s": SWEEP_TIMEOUT_S, "bc_switch_grace_s": 10}
        proc = subprocess.Popen(playbook_cmd("benchmark_cycle.yml", "--tags", "sweep", extra_vars=extra), cwd=ROOT, env=env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        wait_for_sweep(proc)  # held at its gate, which never opens: it can end only by its watch or its timeout
        os.killpg(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(timeout=30)
        wait_in_host(f"! {SWEEP_RUNNING}", SWEEP_TIMEOUT_S, what="the orphaned sweep's end")
        ended_s = time.monotonic() - killed_at
        # the async job's result on the host says why it ended: its watch, not its timeout
        said = sh("cat /root/.ansible_async/* 2>/dev/null | grep -o 'the sweep ended itself: [^\\\"]*' || true")
        assert "promised its next contact by" in said, said
        assert sh("systemctl is-active llama-lab", check=False).strip() == "inactive"  # it never starts what it did not stop
    finally:
        sh("rm -rf /run/lock/benchmark-cycle* && systemctl start llama-lab")  # the dead sweep's lock: the next cycle's to take over
    wait_serving(READINESS_S, what="llama-lab started by hand after the case")
    reliability(fault="controller killed during a sweep on its own", injected="SIGKILL to ansible-playbook --tags sweep mid-sweep",
                did="the worker saw the promise of the next poll broken and ended itself (time: SIGKILL to the sweep's end); "
                    "nothing started", service_after=serving(), data_kept="the points finished before", detect_s=ended_s,
                run_s=ended_s)
