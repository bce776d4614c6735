"""Correctness of SGLang's INT4 MoE kernels (Marlin, and Triton int4_w4a16) against an fp32 reference
and against each other on the same weights, on a real GPU.

Runs on the lent H200 (see docs/benchmarks.md), not in CI: CI has no GPU, so these are skipped
there with the reason printed."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils import bc_backends, bc_kernels
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import shard

K26 = {"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8, "group_size": 32}


@pytest.mark.parametrize("tp_size", [1, 8])
@pytest.mark.parametrize("m", [1, 16, 256])
@pytest.mark.parametrize("backend", ["sglang", "triton"])
def test_sglang_int4_kernels_match_fp32_reference(backend: str, tp_size: int, m: int) -> None:
    ok, why = bc_backends.available(backend, True)
    assert ok, why
    s = shard(dict(K26, tp_size=tp_size))
    check = bc_backends.reference_check(torch, s, torch.device("cuda", 0), torch.bfloat16, seed=3, experts=8, m=m, backend=backend)
    print("%s tp=%d m=%d relative error %.5f" % (backend, tp_size, m, check["relative_error"]))
    assert check["relative_error"] < 0.02


@pytest.mark.parametrize("kind", [{"kind": "uniform"}, {"kind": "zipf", "skew": 1.0}])
def test_marlin_and_triton_agree_on_the_same_weights_under_each_routing(kind: dict) -> None:
    """The two layouts are of the same INT4 values: both kernels must give the same answer (up to
    bf16 accumulation order), at the full expert count and with a skewed routing."""
    s = shard(dict(K26, tp_size=8))
    dev = torch.device("cuda", 0)
    w = bc_kernels.Weights(torch, s, dev, torch.bfloat16, seed=9)
    marlin, triton = bc_kernels.SglangKernel(torch, w), bc_kernels.TritonKernel(torch, w)
    gen = torch.Generator(device=dev).manual_seed(4)
    routing = bc_kernels.Routing(torch, s, dict(kind, name="x"), dev, gen)
    x = torch.randn((64, s["K"]), generator=gen, device=dev).to(torch.bfloat16)
    tw, ids = routing.sample(64, gen)
    a, b = marlin(x, tw, ids).float(), triton(x, tw, ids).float()
    rel = float((a - b).norm() / a.norm())
    print("%s: marlin vs triton relative difference %.5f" % (kind["kind"], rel))
    assert rel < 0.02


def test_torch_grouped_reference_matches_loop() -> None:
    s = shard(dict(K26, num_experts=8, tp_size=8))
    dev = torch.device("cuda", 0)
    w = bc_kernels.Weights(torch, s, dev, torch.bfloat16, seed=5)
    grouped = bc_kernels.TorchKernel(torch, w, torch.bfloat16)
    loop = bc_kernels.TorchKernel(torch, w, torch.float32)
    loop.grouped = False
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn((64, s["K"]), generator=gen, device=dev)
    tw, ids = bc_kernels.make_routings(torch, s, 64, 1, dev, gen)[0]
    got, want = grouped(x.to(torch.bfloat16), tw, ids).float(), loop(x, tw, ids)
    assert float((got - want).norm() / want.norm()) < 0.02
