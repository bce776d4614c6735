"""One lab sweep (the lab's shape, sizes and routings: inventory/lab/group_vars) run in a lab host with torch's
default threads and with OMP_NUM_THREADS=1, each `--runs` times, printing its wall time, its CPU and the sweep's own
wall_s (docs/timings.md, "The lab's torch single-threaded"). Run it beside a busy suite to see what the lab sees.

    .venv/bin/python bench/lab_sweep_threads.py --container bc-lab-1 --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STAGE = "/tmp/bc-bench-sweep"  # in the lab host


def lab_config() -> tuple[dict[str, Any], str]:
    """The lab's sweep, read from its inventory (bc_sweep_*), as the sweep's engine takes it, and its interpreter. Read
    on the controller: this file runs in the lab host too (--inside), whose python3 has no yaml."""
    import yaml  # noqa: PLC0415 - not at the top: the lab host runs this file too
    lab = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
    return {"shape": lab["bc_sweep_shape"], "batch_sizes": lab["bc_sweep_batch_sizes"], "backends": lab["bc_sweep_backends"],
            "routing": lab["bc_sweep_routing"], "iters": lab["bc_sweep_iters"], "device_type": "cpu"}, lab["bc_sweep_python"]


def inside(python: str, runs: int, cfg: str) -> None:
    """In the lab host: each thread setting `runs` times, alternating."""
    for _i in range(runs):
        for threads in ("unset", "1"):
            env = dict(os.environ, PYTHONPATH=STAGE)
            env.pop("OMP_NUM_THREADS", None)
            if threads != "unset":
                env["OMP_NUM_THREADS"] = threads
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.monotonic()
            proc = subprocess.run([python, "-m", "ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_marlin"],
                                  input=cfg, capture_output=True, text=True, env=env, cwd=STAGE, timeout=1800, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"lab_sweep_threads: the sweep failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
            print(f"OMP_NUM_THREADS={threads}: wall {time.monotonic() - start:.1f} s, CPU {cpu:.1f} s, "
                  f"the sweep's wall_s {json.loads(proc.stdout)['wall_s']}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--container", default="bc-lab-1")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--python", help="the sweep interpreter in the lab host (the lab's bc_sweep_python)")
    parser.add_argument("--inside", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args.python, args.runs, args.inside)
        return
    cfg, python = lab_config()
    with tempfile.TemporaryDirectory() as tmp:
        parts = ["ansible_collections", "inference_ops", "benchmark_cycle", "plugins", "module_utils"]
        pkg = Path(tmp).joinpath(*parts)  # the package the worker runs as (bc_unit.SWEEP_MODULE), each level a package
        pkg.mkdir(parents=True)
        for src in (ROOT / "plugins" / "module_utils").glob("*.py"):
            shutil.copy(src, pkg / src.name)
        for depth in range(1, len(parts) + 1):
            Path(tmp).joinpath(*parts[:depth], "__init__.py").touch()
        shutil.copy(__file__, Path(tmp) / "bench.py")
        subprocess.run(["podman", "exec", args.container, "rm", "-rf", STAGE], check=True, timeout=60)
        subprocess.run(["podman", "cp", tmp, f"{args.container}:{STAGE}"], check=True, timeout=60)
    try:
        rc = subprocess.run(["podman", "exec", args.container, "python3", f"{STAGE}/bench.py", "--inside", json.dumps(cfg),
                             "--runs", str(args.runs), "--python", args.python or python], check=False, timeout=7200).returncode
    finally:
        subprocess.run(["podman", "exec", args.container, "rm", "-rf", STAGE], check=False, timeout=60)
    if rc != 0:
        raise SystemExit(rc)


if __name__ == "__main__":
    main()
