"""Faults injected into lab hosts from the controller (podman exec), shared by the fault tests and
the timing benchmarks so that both measure the same thing."""

from __future__ import annotations

import subprocess
import time


def in_host(container: str, cmd: str) -> str:
    return subprocess.run(["podman", "exec", container, "sh", "-c", cmd], capture_output=True, text=True, check=False,
                          timeout=60).stdout


def kill_during_start_pre(container: str, unit: str, after_s: float = 1.0, within_s: float = 120) -> float | None:
    """Wait until `unit`'s start job runs ExecStartPre (the lab's stand-in for a long model load,
    bc_start_delay_s), let it run `after_s`, then SIGKILL it: the server dies during the reload.
    Returns the epoch of the kill, or None if the unit never got there."""
    deadline = time.time() + within_s
    while time.time() < deadline:
        if in_host(container, f"systemctl show -p SubState --value {unit}").strip() == "start-pre":
            time.sleep(after_s)
            in_host(container, "pkill -KILL -x sleep")
            return time.time()
        time.sleep(0.05)
    return None
