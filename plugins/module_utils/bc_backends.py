# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sweep's backends by name: which import and can run here, building one, and checking one against the fp32
reference. The kernels are bc_kernels' and, for triton_tuned, bc_tuner's."""

from __future__ import annotations

from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_kernels import (
    Routing,
    SglangKernel,
    TorchKernel,
    TritonKernel,
    Weights,
    load_torch,
    make_routings,
    one_line,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import routing_specs
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_tuner import TUNE_SPACE, TunedTritonKernel


def import_errors(names: list[str]) -> dict[str, str]:
    """Per backend, "" when its kernel imports in this Python, else the error's last line (the
    preflight runs this in the sweep's interpreter, with the kernels' own imports)."""
    out = {}
    for name in names:
        try:
            if name == "torch":
                load_torch()
            else:
                KERNELS[name].imports()
            out[name] = ""
        except Exception as err:
            out[name] = one_line(err)
    return out


def available(name: str, cuda: bool) -> tuple[bool, str]:
    """Whether a backend can run here, and why not (its imports, as the preflight checks them)."""
    if name != "torch" and not cuda:
        return False, "backend %s needs a CUDA GPU; none is visible to torch here" % name
    why = import_errors([name])[name]
    return not why, why


KERNELS: dict[str, Any] = {"sglang": SglangKernel, "triton": TritonKernel, "triton_tuned": TunedTritonKernel,
                           "torch": TorchKernel}


def build_kernel(torch: Any, name: str, w: Weights, dtype: Any, configs: dict[int, Any] | None = None) -> Any:
    kernel = KERNELS[name]
    if name == "triton_tuned":
        return kernel(torch, w, configs)
    return kernel(torch, w, dtype) if name == "torch" else kernel(torch, w)


def reference_check(torch: Any, s: dict[str, int], device: Any, dtype: Any, seed: int, experts: int = 8,
                    m: int = 16, backend: str = "sglang", configs: dict[int, Any] | None = None,
                    partial: bool = False) -> dict[str, Any]:
    """Relative error of a backend against an fp32 reference from the dequantized weights, on the
    same shape with `experts` experts (the same generator as the sweep's, another seed); a tuned backend
    runs the config its map gives for m (`configs`). With all of the model's top-k on 8 experts every token goes to
    every expert: m rows each, whole M tiles at the tuned sizes. `partial` routes half as many per token, skewed
    (zipf(1)), so the experts get uneven counts that end in partial M tiles (the kernel's masked rows), and some
    few or none; the counts are returned (`partial_tiles`: a count that is not a multiple of the grid's smallest
    BLOCK_SIZE_M)."""
    small = dict(s, E=min(experts, s["E"]), topk=min(s["topk"], experts, s["E"]))
    if partial:
        small["topk"] = max(1, small["E"] // 2 if small["topk"] >= small["E"] else small["topk"])
    w = Weights(torch, small, device, dtype, seed + 7)
    kernel = build_kernel(torch, backend, w, dtype, configs)
    ref = TorchKernel(torch, w, torch.float32)
    ref.grouped = False  # fp32 loop: the reference, not a kernel under test
    gen = torch.Generator(device=device).manual_seed(seed + 11)
    x = torch.randn((m, small["K"]), generator=gen, device=device).to(dtype if device.type == "cuda" else torch.float32)
    dist = Routing(torch, small, routing_specs([{"kind": "zipf", "skew": 1.0}], small)[0], device, gen) if partial else None
    tw, ids = make_routings(torch, small, m, 1, device, gen, dist)[0]
    got = kernel(x, tw, ids).to(torch.float32)
    want = ref(x.to(torch.float32), tw, ids)
    rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
    counts = [int(c) for c in torch.bincount(ids.flatten().long(), minlength=small["E"]).tolist()]
    return {"experts": small["E"], "top_k": small["topk"], "m": m, "relative_error": rel, "expert_rows": counts,
            "partial": partial, "partial_tiles": any(c % min(TUNE_SPACE["BLOCK_SIZE_M"]) for c in counts)}
