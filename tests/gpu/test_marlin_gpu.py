"""Correctness of SGLang's INT4 Marlin MoE against an fp32 reference, on a real GPU.

Runs on the lent H200 (see docs/benchmarks.md), not in CI: CI has no GPU, so these are skipped
there with the reason printed."""

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from ansible.module_utils import bc_marlin
from ansible.module_utils.bc_sweepstats import shard

K26 = {"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8, "group_size": 32}


@pytest.mark.parametrize("tp_size", [1, 8])
@pytest.mark.parametrize("m", [1, 16, 256])
def test_sglang_marlin_matches_fp32_reference(tp_size: int, m: int) -> None:
    ok, why = bc_marlin.sglang_available()
    assert ok, why
    s = shard(dict(K26, tp_size=tp_size))
    check = bc_marlin.reference_check(torch, s, torch.device("cuda", 0), torch.bfloat16, seed=3, experts=8, m=m)
    print("tp=%d m=%d relative error %.5f" % (tp_size, m, check["relative_error"]))
    assert check["relative_error"] < 0.02


def test_torch_grouped_reference_matches_loop() -> None:
    s = shard(dict(K26, num_experts=8, tp_size=8))
    dev = torch.device("cuda", 0)
    w = bc_marlin.Weights(torch, s, dev, torch.bfloat16, seed=5)
    grouped = bc_marlin.TorchKernel(torch, w, torch.bfloat16)
    loop = bc_marlin.TorchKernel(torch, w, torch.float32)
    loop.grouped = False
    gen = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn((64, s["K"]), generator=gen, device=dev)
    tw, ids = bc_marlin.make_routings(torch, s, 64, 1, dev, gen)[0]
    got, want = grouped(x.to(torch.bfloat16), tw, ids).float(), loop(x, tw, ids)
    assert float((got - want).norm() / want.norm()) < 0.02
