"""The drain's proof that the GPU memory is really free, against the real nvidia-smi and real GPU
memory held by a process that lets go of it a few seconds later (as an SGLang scheduler does while
it exits). Runs on the lent H200, not in CI (no GPU there)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import gpu_query, parse_gpus
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import Unit, UnitError

pytestmark = pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs nvidia-smi and a GPU")

HOLD = "import torch, time, sys; x = torch.empty(%d, dtype=torch.uint8, device='cuda:0'); print('held', flush=True); time.sleep(%f)"


def run(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
    """The runner Unit takes (bc_host.run's signature): argv, and a deadline for each call."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def used_now() -> dict[int, int]:
    return {g["index"]: g["used_mib"] for g in parse_gpus(run(gpu_query("nvidia-smi"))[1])}


def hold(gib: int, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD % (gib * 2**30, seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_stop_waits_until_the_real_gpu_memory_is_released() -> None:
    baseline = used_now()[0]
    unit = Unit("bc-gpu-test", run, lambda *a: None, systemd_dir="/nonexistent", state_dir="/nonexistent")
    gpu = {"nvidia_smi": "nvidia-smi", "free_mib": baseline + 1024, "wait_s": 60, "indices": [0]}
    holder = hold(16, 4.0)
    assert used_now()[0] >= baseline + 16 * 1024  # nvidia-smi sees the 16 GiB
    t0 = time.monotonic()
    used = unit.wait_gpu_free(gpu, time.monotonic, time.sleep)
    waited = time.monotonic() - t0
    holder.wait(timeout=30)
    print("released after %.2f s; used then %s MiB (baseline %d)" % (waited, used, baseline))
    assert 2.0 <= waited <= 12.0 and used[0] <= baseline + 1024


def test_stop_fails_naming_the_gpu_when_memory_stays_held() -> None:
    baseline = used_now()[0]
    unit = Unit("bc-gpu-test", run, lambda *a: None, systemd_dir="/nonexistent", state_dir="/nonexistent")
    holder = hold(8, 30.0)
    try:
        with pytest.raises(UnitError, match=r"GPU memory is still in use after 3 s: GPU 0 \d+ MiB"):
            unit.wait_gpu_free({"nvidia_smi": "nvidia-smi", "free_mib": baseline + 1024, "wait_s": 3, "indices": [0]},
                               time.monotonic, time.sleep)
    finally:
        holder.kill()
        holder.wait()
