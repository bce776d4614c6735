"""The controller's CPU and the wall time of one lab cycle against ansible-core's `internal_poll_interval`: while a
task runs, the strategy's main loop checks for results and sleeps that long between checks
(ansible/plugins/strategy/__init__.py `_wait_on_pending_results`), 1 ms by default - a wake a millisecond for the
whole of every wait (a drain, a sweep, a readiness probe's delay). Each run is a real `ansible-playbook
benchmark_cycle.yml` against one lab host, the intervals alternating, its CPU the reaped process tree's
(ansible-playbook, its workers, their ssh clients). docs/timings.md has the figures.

    .venv/bin/python bench/poll_interval.py --host lab1 --runs 2 0.001 0.01 0.05
    .venv/bin/python bench/poll_interval.py --host lab1 --runs 2 --wait 60 0.001 0.01
"""

from __future__ import annotations

import argparse
import configparser
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(cfg: Path, host: str, wait_s: int) -> tuple[float, float]:
    """One cycle (or, with `wait_s`, one task on the host that sleeps that long) with the config `cfg`:
    (wall s, CPU s of the controller's process tree)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    venv_bin = Path(sys.executable).parent
    argv = [str(venv_bin / "ansible-playbook"), "benchmark_cycle.yml", "-i", "inventory/lab", "--limit", host]
    if wait_s:
        argv = [str(venv_bin / "ansible"), host, "-i", "inventory/lab", "-m", "ansible.builtin.command", "-a", f"sleep {wait_s}"]
    proc = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, ANSIBLE_CONFIG=str(cfg), PATH=f"{venv_bin}:{os.environ['PATH']}"),
                          capture_output=True, text=True, timeout=1800, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"poll_interval: the run failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("intervals", nargs="+", type=float, help="internal_poll_interval values (s)")
    parser.add_argument("--host", default="lab1")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--wait", type=int, default=0, help="instead of a cycle, one task that waits this long (s)")
    args = parser.parse_args()
    cfgs: dict[float, Path] = {}
    seen: dict[float, list[tuple[float, float]]] = {i: [] for i in args.intervals}
    try:
        for interval in args.intervals:
            parsed = configparser.ConfigParser(interpolation=None)
            parsed.read(ROOT / "ansible.cfg")
            parsed["defaults"]["internal_poll_interval"] = str(interval)
            # beside ansible.cfg: its paths resolve relative to the file
            cfgs[interval] = ROOT / f".bc-bench-poll-{interval}.cfg"
            with cfgs[interval].open("w") as out:
                parsed.write(out)
        for run in range(args.runs):
            for interval in args.intervals:
                wall, cpu = one_run(cfgs[interval], args.host, args.wait)
                seen[interval].append((wall, cpu))
                print(f"run {run + 1}, internal_poll_interval {interval}: wall {wall:.1f} s, controller CPU {cpu:.1f} s",
                      flush=True)
    finally:
        for cfg in cfgs.values():
            cfg.unlink(missing_ok=True)
    for interval, rows in seen.items():
        print(f"internal_poll_interval {interval}: median wall {statistics.median(w for w, _ in rows):.1f} s, "
              f"median controller CPU {statistics.median(c for _, c in rows):.1f} s over {len(rows)} runs")


if __name__ == "__main__":
    main()
