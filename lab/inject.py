"""Faults injected into lab hosts from the controller (podman exec), shared by the fault tests and
the timing benchmarks so that both measure the same thing."""

from __future__ import annotations

import subprocess
import threading


def in_host(container: str, cmd: str) -> str:
    return subprocess.run(["podman", "exec", container, "sh", "-c", cmd], capture_output=True, text=True, check=False,
                          timeout=60).stdout


def kill_during_start_pre(container: str, unit: str, after_s: float = 1.0, within_s: float = 600,
                          done: threading.Event | None = None) -> float | None:
    """Wait until `unit`'s start job runs ExecStartPre (the lab's stand-in for a long model load,
    bc_start_delay_s), let it run `after_s`, then SIGKILL that process (the unit's ControlPID): the
    server dies during the reload. The watch runs inside the host (one `podman exec`): polled from
    the controller, each look costs a `podman exec`, seconds on a loaded machine, and a 3 s window
    slips between two looks. Watches until `done` is set (the cycle it aims at ended: a loaded machine
    gets there late) or `within_s`. Returns the epoch of the kill, or None if the unit never got there."""
    stop = "/run/bc-inject-stop-%s" % unit
    script = (
        f'rm -f {stop}; end=$(( $(date +%s) + {int(within_s)} )); '
        f'while [ ! -e {stop} ] && [ "$(date +%s)" -lt "$end" ]; do '
        f'  if [ "$(systemctl show -P SubState {unit}.service)" = start-pre ]; then '
        f'    sleep {after_s}; pid=$(systemctl show -P ControlPID {unit}.service); '
        f'    [ "${{pid:-0}}" -gt 0 ] || exit 3; kill -KILL "$pid" && date +%s.%N; exit 0; '
        f'  fi; sleep 0.05; '
        f'done; exit 2')
    watcher = subprocess.Popen(["podman", "exec", container, "sh", "-c", script], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    if done is not None:
        def stop_watch() -> None:
            done.wait(within_s)
            if watcher.poll() is None:
                in_host(container, f"touch {stop}")
        threading.Thread(target=stop_watch, daemon=True).start()
    try:
        out, _ = watcher.communicate(timeout=within_s + 60)
    except subprocess.TimeoutExpired:
        watcher.kill()
        watcher.communicate()
        return None
    in_host(container, f"rm -f {stop}")
    return float(out.strip()) if watcher.returncode == 0 and out.strip() else None
