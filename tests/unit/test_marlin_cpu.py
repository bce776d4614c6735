"""The sweep's CPU path (torch backend): the same code the lab runs, on small shapes."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_backends, bc_kernels, bc_marlin
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import shard

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"num_experts": 8, "hidden_size": 64, "intermediate_size": 64, "top_k": 2, "group_size": 32, "num_bits": 4}


def test_unpack_recovers_gptq_nibbles():
    vals = torch.arange(16, dtype=torch.int32).reshape(16, 1) % 16  # k=16 values in one column
    words = torch.zeros((2, 1), dtype=torch.int32)
    for k in range(16):
        words[k // 8, 0] |= (int(vals[k, 0]) << (4 * (k % 8)))
    assert torch.equal(bc_kernels.Weights.unpack(torch, words)[:, 0], (vals[:, 0] - 8).to(torch.int8))


def test_torch_kernel_matches_a_per_token_reference():
    s = shard(dict(SMALL, tp_size=1))
    w = bc_kernels.Weights(torch, s, torch.device("cpu"), torch.bfloat16, seed=1).materialize()
    kernel = bc_kernels.TorchKernel(torch, w, torch.float32)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn((5, s["K"]), generator=gen)
    tw, ids = bc_kernels.make_routings(torch, s, 5, 1, torch.device("cpu"), gen)[0]
    got = kernel(x, tw, ids)
    want = torch.zeros_like(x)
    for t in range(5):
        for j in range(s["topk"]):
            e = int(ids[t, j])
            w13 = bc_kernels.Weights.dequant(torch, w.qw13[e], w.s13[e], torch.float32)
            w2 = bc_kernels.Weights.dequant(torch, w.qw2[e], w.s2[e], torch.float32)
            h = x[t] @ w13
            h = torch.nn.functional.silu(h[: s["N"]]) * h[s["N"]:]
            want[t] += tw[t, j] * (h @ w2)
    assert float((got - want).norm() / want.norm()) < 1e-5


def test_cpu_sweep_reports_every_point_and_says_it_ran_on_cpu(tmp_path):
    saved = []
    res = bc_marlin.run_sweep({"shape": dict(SMALL, tp_size=1), "batch_sizes": [4, 1, 16], "backend": "torch",
                               "iters": 3, "warmup": 1, "device_type": "cpu"}, saved.append)
    assert res["status"] == "complete" and res["ran_on"] == "cpu" and "CPU" in res["note"]
    assert [p["m"] for p in res["points"]] == [1, 4, 16]
    assert all(p["ms_min"] <= p["ms"] <= p["ms_max"] for p in res["points"])
    assert res["points"][0]["experts_touched"] == 2 and res["points"][-1]["experts_touched"] <= 8
    assert res["knee_m"] in (1, 4, 16)
    assert len(saved) >= 4  # written after the plan and after every point: nothing is lost on a crash


def test_sglang_backend_without_gpu_fails_clearly():
    with pytest.raises(RuntimeError, match="backend sglang needs a CUDA GPU"):
        bc_marlin.run_sweep({"shape": dict(SMALL, hidden_size=128, tp_size=1), "batch_sizes": [1], "backend": "sglang",
                             "device_type": "cpu"})


def test_the_reference_check_reaches_partial_tiles_only_when_asked():
    """The fp32 check of a tuned config (#32): with the model's top-k on 8 experts, every token goes to every expert
    (m rows each: whole tiles at the tuned sizes); the partial check routes half the top-k, skewed, so the experts'
    row counts are uneven and end in partial tiles. A wrong kernel fails either way (the torch backend in bf16 against
    the fp32 loop is within the bound)."""
    s = shard(dict(SMALL, top_k=8, tp_size=1))
    cpu = torch.device("cpu")
    full = bc_backends.reference_check(torch, s, cpu, torch.bfloat16, seed=0, m=64, backend="torch")
    assert full["top_k"] == 8 and full["expert_rows"] == [64] * 8 and full["partial_tiles"] is False
    part = bc_backends.reference_check(torch, s, cpu, torch.bfloat16, seed=0, m=64, backend="torch", partial=True)
    assert part["top_k"] == 4 and sum(part["expert_rows"]) == 64 * 4 and part["partial_tiles"] is True
    assert max(part["expert_rows"]) > 2 * min(part["expert_rows"])  # skewed: some experts get few rows
    assert part["relative_error"] < 0.03 and full["relative_error"] < 0.03


def test_the_staged_worker_runs_from_its_staged_files_alone(tmp_path):
    """marlin_sweep stages SWEEP_FILES (bc_sweeprun) for the sweep's interpreter (the host's SGLang venv, without ansible): laid out
    as it lays them out, the worker imports from those files alone (no site-packages here: no ansible, no torch) and
    answers the preflight, and each staged file is one it imports (a module_util it needs and the list lacks fails)."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweeprun import SWEEP_FILES
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import SWEEP_MODULE

    parts = SWEEP_MODULE.split(".")[:-1]  # the package, laid out as stage_sweep_package lays it out
    pkg = tmp_path.joinpath(*parts)
    pkg.mkdir(parents=True)
    for depth in range(1, len(parts) + 1):
        tmp_path.joinpath(*parts[:depth], "__init__.py").write_text("")
    for name in SWEEP_FILES:
        shutil.copy(ROOT / "plugins" / "module_utils" / (name + ".py"), pkg)
    code = ("import importlib, json, sys; m = importlib.import_module(sys.argv[1]); print(json.dumps({'errors': "
            "m.proven_import_errors(['torch'], {})['errors'], "
            "'files': sorted(v.__file__ for k, v in sys.modules.items() if k.startswith('ansible_collections.'))}))")
    out = subprocess.run([sys.executable, "-S", "-c", code, SWEEP_MODULE], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["errors"] == {"torch": "ModuleNotFoundError: No module named 'torch'"}
    assert all(f.startswith(str(tmp_path)) for f in got["files"]), got["files"]
    assert sorted(Path(f).stem for f in got["files"] if Path(f).stem.startswith("bc_")) == sorted(SWEEP_FILES)
