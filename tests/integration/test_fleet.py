"""A rolling cycle over 3 lab hosts (serial 1): while it runs, every host's health is sampled once a
second from the controller (published loopback ports); never more than one host may be out of
service. A failing host stops the roll and leaves the rest serving. Molecule's `fleet` scenario runs
it as its verify step on the 3 hosts it created; alone, it creates them (and so replaces a 1-host lab)."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, lab_up, playbook, serving

HOSTS = 3


def healthy(port: int) -> bool:
    """Up: /health answers 200. Down: refused or not 200. A host that answers within 5 s is up: on a loaded machine a
    serving llama-server is slow to answer, and reading that as down would count a second host out of service."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def sample(ports: list[int], stop: threading.Event, out: list[list[bool]]) -> None:
    while not stop.is_set():
        out.append([healthy(p) for p in ports])
        stop.wait(1.0)


def roll(extra_inventory: Path | None = None) -> tuple[object, list[list[bool]]]:
    hosts = yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]
    ports = [h["lab_http_port"] for h in hosts.values()]
    stop, samples = threading.Event(), []
    thread = threading.Thread(target=sample, args=(ports, stop, samples), daemon=True)
    thread.start()
    args = ["-i", str(extra_inventory)] if extra_inventory else []
    run = playbook("benchmark_cycle.yml", *args, extra_vars={"bc_start_delay_s": 2, "bc_serial": 1})
    stop.set()
    thread.join()
    return run, samples


@pytest.mark.path("roll.fleet", real="three lab hosts rolled one at a time, health sampled every second")
def test_rolling_cycle_keeps_capacity_and_a_failure_stops_the_roll(tmp_path, reliability):
    lab_up(HOSTS)

    run, samples = roll()
    assert run.rc == 0, run.out[-3000:]
    down_per_second = [row.count(False) for row in samples]
    assert max(down_per_second) <= 1, samples  # never more than one host out of service
    assert sum(1 for d in down_per_second if d) >= 3  # and each host was really taken out once
    assert all(samples[-1])

    # lab2's sweep fails after its stop: lab2 is restarted, the roll stops there, lab3 is never touched, everyone serves afterwards
    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventory/lab", inv, symlinks=True, ignore=shutil.ignore_patterns("host_vars"))
    (inv / "host_vars").mkdir()
    # an interpreter that passes the preflight's import check and whose sweep exits 3: a failure after the stop
    subprocess.run(["podman", "exec", "bc-lab-2", "sh", "-c", "printf '#!/bin/sh\\ncase \"$1\" in -c) exec /opt/bench-venv/bin/python "
                    "\"$@\";; esac\\nexit 3\\n' > /usr/local/bin/failing-python && chmod +x /usr/local/bin/failing-python"],
                   check=True, timeout=60)
    (inv / "host_vars" / "lab2.yml").write_text("bc_sweep_python: /usr/local/bin/failing-python\n")
    before = subprocess.run(["podman", "exec", "bc-lab-3", "systemctl", "show", "-p", "ExecMainPID", "--value", "llama-lab"],
                            capture_output=True, text=True, check=True).stdout
    run, samples = roll(inv)
    assert run.rc != 0
    assert "the cycle failed at" in run.out and "the service was started again" in run.out
    after = subprocess.run(["podman", "exec", "bc-lab-3", "systemctl", "show", "-p", "ExecMainPID", "--value", "llama-lab"],
                           capture_output=True, text=True, check=True).stdout
    assert before == after  # lab3 kept serving, untouched
    time.sleep(1)
    assert all(healthy(p) for p in (28081, 28082, 28083))
    down_per_second = [row.count(False) for row in samples]
    assert max(down_per_second) <= 1, samples
    states = "; ".join(f"lab{i}: " + serving(container=f"bc-lab-{i}") for i in (1, 2, 3))
    reliability(fault="a host fails mid-roll", injected="3 hosts, serial 1; lab2's sweep exits 3 after its stop",
                did="lab1 cycled; lab2 restarted and awaited, then the roll stopped (max_fail_percentage 0); lab3 never touched; "
                    f"at most {max(down_per_second)} host down in any 1 s sample",
                service_after=states, data_kept="lab1's full results", detect_s=None, run_s=run.seconds)
