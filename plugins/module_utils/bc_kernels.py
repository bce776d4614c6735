# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MoE layer the sweep times: its INT4 weights, its routings, and the kernels of three backends (the fourth,
triton_tuned, is bc_tuner's; bc_backends names them all). Each kernel is called as kernel(x, topk_weights, topk_ids).

Backends, all built from the same INT4 values (one seeded generator, chunk by chunk):
  sglang  SGLang's fused_marlin_moe on GPTQ-packed INT4 weights repacked by its Marlin helpers
  triton  SGLang's Triton fused_moe with int4_w4a16, on the uint8 layout its compressed-tensors
          Triton scheme builds from the same GPTQ words
  torch   dequantized grouped GEMM (bf16/fp16 on GPU via torch._grouped_mm, fp32 loop on CPU)
"""

from __future__ import annotations

import json
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import replay_ids


def load_torch() -> Any:
    import torch  # noqa: PLC0415 - imported only where the sweep runs

    return torch


def one_line(err: BaseException) -> str:
    """An exception as one short line: its type and the last non-blank line of its message."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    return ("%s: %s" % (type(err).__name__, lines[-1].strip()[:300])) if lines else type(err).__name__


class Weights:
    """INT4 symmetric (uint4b8) group-quantized expert weights, generated on the device in chunks
    of experts. `chunks()` yields them one chunk at a time, so a kernel can repack each chunk into
    its own layout and the GPTQ copy of all experts never exists (peak = final weights + 1 chunk).
    `materialize()` keeps all of them, for the references that dequantize from GPTQ."""

    def __init__(self, torch: Any, s: dict[str, int], device: Any, dtype: Any, seed: int, chunk: int = 8) -> None:
        self.torch, self.s, self.device, self.dtype, self.seed, self.chunk = torch, s, device, dtype, seed, chunk
        g = s["group"]
        self.gk = 1 if g == -1 else s["K"] // g
        self.gn = 1 if g == -1 else s["N"] // g

    def chunks(self) -> Any:
        """(e0, e1, qw13 (c, K/8, 2N) int32, qw2 (c, N/8, K) int32, s13 (c, gk, 2N), s2 (c, gn, K))."""
        torch, s = self.torch, self.s
        E, K, N = s["E"], s["K"], s["N"]
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        for e0 in range(0, E, self.chunk):
            c = min(E, e0 + self.chunk) - e0
            # random int32 words: every nibble uniform in 0..15 (GPTQ packs 8 along K)
            qw13 = torch.randint(-2 ** 31, 2 ** 31 - 1, (c, K // 8, 2 * N), generator=gen, dtype=torch.int32, device=self.device)
            qw2 = torch.randint(-2 ** 31, 2 ** 31 - 1, (c, N // 8, K), generator=gen, dtype=torch.int32, device=self.device)
            # scales ~ 1/(8*sqrt(fan_in)) keep activations O(1) through both GEMMs
            s13 = ((torch.rand((c, self.gk, 2 * N), generator=gen, device=self.device) * 0.5 + 0.75) / (8 * K ** 0.5)).to(self.dtype)
            s2 = ((torch.rand((c, self.gn, K), generator=gen, device=self.device) * 0.5 + 0.75) / (8 * N ** 0.5)).to(self.dtype)
            yield e0, e0 + c, qw13, qw2, s13, s2

    def materialize(self) -> Weights:
        parts = list(self.chunks())
        cat = self.torch.cat
        self.qw13, self.qw2 = cat([p[2] for p in parts]), cat([p[3] for p in parts])
        self.s13, self.s2 = cat([p[4] for p in parts]), cat([p[5] for p in parts])
        return self

    @staticmethod
    def unpack(torch: Any, q: Any) -> Any:
        """GPTQ int32 (k/8, n) -> signed int4 values (k, n) as int8 (uint4b8: nibble - 8)."""
        shifts = torch.arange(0, 32, 4, device=q.device, dtype=torch.int32)
        nib = (q.unsqueeze(1) >> shifts.view(1, 8, 1)) & 0xF
        return (nib.reshape(q.shape[0] * 8, q.shape[1]) - 8).to(torch.int8)

    @classmethod
    def dequant(cls, torch: Any, q: Any, sc: Any, dtype: Any) -> Any:
        """Dequantized (k, n) matrix from GPTQ words q (k/8, n) and group scales sc (groups, n)."""
        w = cls.unpack(torch, q).to(torch.float32)
        rows_per_group = w.shape[0] // sc.shape[0]
        return (w * sc.to(torch.float32).repeat_interleave(rows_per_group, dim=0)).to(dtype)


class Routing:
    """Top-k expert ids of one distribution (bc_sweepstats.routing_spec): built once per run, so the
    hot experts of a skewed distribution stay the same experts at every M, as in serving."""

    def __init__(self, torch: Any, s: dict[str, int], spec: dict[str, Any], device: Any, gen: Any) -> None:
        self.torch, self.s, self.spec, self.device = torch, s, spec, device
        E = s["E"]
        if spec["kind"] == "zipf":
            ranks = torch.empty(E, device=device)
            ranks[torch.randperm(E, generator=gen, device=device)] = torch.arange(1, E + 1, dtype=torch.float32, device=device)
            self.logp = -spec["skew"] * torch.log(ranks)
        elif spec["kind"] == "hot":
            self.hot_mask = torch.full((E,), float("-inf"), device=device)
            self.hot_mask[torch.randperm(E, generator=gen, device=device)[: spec["experts"]]] = 0.0
        elif spec["kind"] == "replay":
            with open(spec["file"], encoding="utf-8") as fh:
                self.rows = torch.tensor(replay_ids(json.load(fh), s, spec["file"]), dtype=torch.int32, device=device)

    def sample(self, m: int, gen: Any) -> tuple[Any, Any]:
        """(weights (m, top_k) fp32 summing to 1 per token, ids (m, top_k) int32)."""
        torch, s, kind = self.torch, self.s, self.spec["kind"]
        if kind == "replay":
            rows = self.rows.shape[0]
            start = int(torch.randint(rows, (1,), generator=gen, device=self.device))
            ids = self.rows[(start + torch.arange(m, device=self.device)) % rows]
            weights = torch.rand((m, s["topk"]), generator=gen, device=self.device) + 0.1
            return (weights / weights.sum(-1, keepdim=True)).to(torch.float32), ids
        scores = torch.rand((m, s["E"]), generator=gen, device=self.device)
        if kind == "zipf":  # Gumbel top-k: k distinct experts drawn without replacement with p ~ 1/rank**skew
            scores = self.logp - torch.log(-torch.log(scores.clamp_min(1e-20)))
        elif kind == "hot":
            to_hot = torch.rand((m, 1), generator=gen, device=self.device) < self.spec["fraction"]
            scores = torch.where(to_hot, scores + self.hot_mask, scores)
        weights, ids = torch.topk(scores, s["topk"], dim=-1)
        if kind != "uniform":
            weights = torch.softmax(weights, dim=-1)
        return (weights / weights.sum(-1, keepdim=True)).to(torch.float32), ids.to(torch.int32)


def make_routings(torch: Any, s: dict[str, int], m: int, count: int, device: Any, gen: Any,
                  routing: Routing | None = None) -> list[tuple[Any, Any]]:
    """`count` routings of m tokens (uniform unless a distribution is given)."""
    routing = routing or Routing(torch, s, {"kind": "uniform"}, device, gen)
    return [routing.sample(m, gen) for _i in range(count)]


# where SGLang keeps its Marlin MoE repack: layers/quantization/gptq.py up to 0.5.10, then
# hardware_backend/gpu/quantization/gptq_kernels.py (0.5.16)
REPACK_MODULES = ("sglang.srt.layers.quantization.gptq", "sglang.srt.hardware_backend.gpu.quantization.gptq_kernels")


def first_attr(modules: tuple[str, ...], name: str) -> Any:
    """`name` from the first of `modules` that has it (a function SGLang moved between releases)."""
    import importlib  # noqa: PLC0415

    errors = []
    for mod in modules:
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError) as err:
            errors.append("%s: %s" % (mod, err))
    raise ImportError("%s is in none of %s" % (name, "; ".join(errors)))


class SglangKernel:
    name = "sglang"
    graph_safe = True
    impl = "sglang fused_marlin_moe"

    @staticmethod
    def imports() -> tuple[Any, Any, Any]:
        from sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe import fused_marlin_moe  # noqa: PLC0415
        from sglang.srt.layers.quantization.marlin_utils import marlin_moe_permute_scales  # noqa: PLC0415

        return fused_marlin_moe, marlin_moe_permute_scales, first_attr(REPACK_MODULES, "gptq_marlin_moe_repack")

    def __init__(self, torch: Any, w: Weights) -> None:
        fused_marlin_moe, marlin_moe_permute_scales, gptq_marlin_moe_repack = self.imports()

        s = w.s
        E, K, N, g, bits = s["E"], s["K"], s["N"], s["group"], s["bits"]
        self.fn, self.s = fused_marlin_moe, s
        self.w13 = torch.empty((E, K // 16, 2 * N * (bits // 2)), dtype=torch.int32, device=w.device)
        self.w2 = torch.empty((E, N // 16, K * (bits // 2)), dtype=torch.int32, device=w.device)
        self.s13 = torch.empty((E, w.gk, 2 * N), dtype=w.dtype, device=w.device)
        self.s2 = torch.empty((E, w.gn, K), dtype=w.dtype, device=w.device)
        for e0, e1, qw13, qw2, s13, s2 in w.chunks():
            perm = torch.empty((e1 - e0, 0), dtype=torch.int32, device=w.device)
            self.w13[e0:e1] = gptq_marlin_moe_repack(qw13, perm, K, 2 * N, bits)
            self.w2[e0:e1] = gptq_marlin_moe_repack(qw2, perm, N, K, bits)
            self.s13[e0:e1] = marlin_moe_permute_scales(s13, K, 2 * N, g)
            self.s2[e0:e1] = marlin_moe_permute_scales(s2, N, K, g)

    def __call__(self, x: Any, topk_w: Any, topk_ids: Any) -> Any:
        gating = x.new_empty((x.shape[0], self.s["E"]))
        return self.fn(x, self.w13, self.w2, self.s13, self.s2, gating, topk_w, topk_ids, num_bits=self.s["bits"])


# where SGLang keeps its Triton fused_experts: fused_moe_triton/fused_moe.py up to 0.5.10, then
# moe_runner/triton_utils/fused_moe.py (0.5.15, 0.5.16, 0.5.23); the signature is the same in all
TRITON_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe", "sglang.srt.layers.moe.fused_moe_triton.fused_moe")


def server_defaults() -> None:
    """SGLang's Triton path reads the process's ServerArgs (enable_fused_moe_sum_all_reduce, the
    deterministic switch); a bare process has none. Publish the dataclass's defaults, without its
    __post_init__ (which would resolve a model): what a server started with no flags would run."""
    import dataclasses  # noqa: PLC0415

    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler  # noqa: PLC0415

    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            value: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(args, f.name, value)
    set_global_server_args_for_scheduler(args)


class TritonKernel:
    """SGLang's Triton fused_moe with int4_w4a16 (fused_moe_kernel_gptq_awq): uint8 weights (E, n, k/2),
    low nibble first, zero point 8 when none is given (uint4b8, as the GPTQ words here), scales
    (E, n, k/group). The layout is the one CompressedTensorsWNA16TritonMoE.process_weights_after_loading
    makes from the same words: transpose, then view the int32 as bytes. Run in place on a copy of the
    input (its out-of-place path allocates from the TP group's symmetric pool, which needs a TP group)."""

    name = "triton"
    graph_safe = True

    @staticmethod
    def imports() -> tuple[Any, Any, Any]:
        from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig  # noqa: PLC0415
        from sglang.srt.layers.moe.topk import StandardTopKOutput  # noqa: PLC0415
        from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler  # noqa: F401,PLC0415 - server_defaults

        return first_attr(TRITON_MODULES, "fused_experts"), MoeRunnerConfig, StandardTopKOutput

    def __init__(self, torch: Any, w: Weights | None, shared: dict[str, Any] | None = None) -> None:
        """From `w`, or over the tensors another process laid out (`shared`: s, w13, w2, s13, s2; CUDA IPC, no copy:
        a build process of the tuning)."""
        self.fn, config, self.topk_output = self.imports()
        server_defaults()
        s = shared["s"] if shared else w.s  # type: ignore[union-attr]
        E, K, N = s["E"], s["K"], s["N"]
        self.torch, self.s = torch, s
        self.config = config(num_experts=E, num_local_experts=E, top_k=s["topk"], activation="silu", inplace=True)
        self.impl = "sglang fused_moe triton int4_w4a16 (%s)" % self.fn.__module__.rsplit(".", 2)[-2]
        self.block_shape = [0, s["group"]]
        self.buf: Any = None
        if shared:
            self.w13, self.w2, self.s13, self.s2 = (shared[k] for k in ("w13", "w2", "s13", "s2"))
            return
        if w is None:
            raise ValueError("TritonKernel needs weights or the tensors of another process (shared)")
        self.w13 = torch.empty((E, 2 * N, K // 2), dtype=torch.uint8, device=w.device)
        self.w2 = torch.empty((E, K, N // 2), dtype=torch.uint8, device=w.device)
        self.s13 = torch.empty((E, 2 * N, w.gk), dtype=w.dtype, device=w.device)
        self.s2 = torch.empty((E, K, w.gn), dtype=w.dtype, device=w.device)
        for e0, e1, qw13, qw2, s13, s2 in w.chunks():
            self.w13[e0:e1] = qw13.transpose(1, 2).contiguous().view(torch.uint8)
            self.w2[e0:e1] = qw2.transpose(1, 2).contiguous().view(torch.uint8)
            self.s13[e0:e1] = s13.transpose(1, 2)
            self.s2[e0:e1] = s2.transpose(1, 2)

    def __call__(self, x: Any, topk_w: Any, topk_ids: Any) -> Any:
        if self.buf is None or self.buf.shape != x.shape:
            self.buf = self.torch.empty_like(x)
        self.buf.copy_(x)
        logits = topk_w  # unused by the kernel; the tuple's third member
        return self.fn(self.buf, self.w13, self.w2, self.topk_output(topk_w, topk_ids, logits), self.config,
                       use_int4_w4a16=True, w1_scale=self.s13, w2_scale=self.s2, block_shape=self.block_shape)


class TorchKernel:
    """Reference: dequantized weights, grouped GEMM per expert (torch._grouped_mm on CUDA)."""

    name = "torch"

    def __init__(self, torch: Any, w: Weights, dtype: Any, chunk: int = 8) -> None:
        s = w.s
        self.torch, self.s = torch, s
        cuda = w.device.type == "cuda"
        self.dtype = dtype if cuda else torch.float32
        E, K, N = s["E"], s["K"], s["N"]
        # _grouped_mm wants the B operand column-major per expert: store (E, n, k), view as (E, k, n)
        self.w13 = torch.empty((E, 2 * N, K), dtype=self.dtype, device=w.device)
        self.w2 = torch.empty((E, K, N), dtype=self.dtype, device=w.device)
        for e0, _e1, qw13, qw2, s13, s2 in w.chunks():
            for i in range(qw13.shape[0]):
                self.w13[e0 + i] = Weights.dequant(torch, qw13[i], s13[i], self.dtype).t()
                self.w2[e0 + i] = Weights.dequant(torch, qw2[i], s2[i], self.dtype).t()
        self.grouped = cuda and hasattr(torch, "_grouped_mm")
        self.impl = "torch._grouped_mm" if self.grouped else "per-expert matmul loop"
        if self.grouped:
            try:  # some torch/GPU pairs lack the grouped kernel for this dtype: fall back, and say so
                x = torch.zeros((s["topk"], K), dtype=self.dtype, device=w.device)
                ids = torch.arange(s["topk"], device=w.device, dtype=torch.int32).unsqueeze(0) % E
                self(x[:1], torch.ones((1, s["topk"]), device=w.device), ids)
            except RuntimeError as err:
                self.grouped = False
                self.impl = "per-expert matmul loop (torch._grouped_mm failed: %s)" % str(err).splitlines()[0][:120]

    @property
    def graph_safe(self) -> bool:
        """The loop syncs with the host (bincount().tolist()), so it cannot be captured."""
        return self.grouped

    def __call__(self, x: Any, topk_w: Any, topk_ids: Any) -> Any:
        torch, s = self.torch, self.s
        m = x.shape[0]
        flat = topk_ids.reshape(-1).to(torch.int64)
        order = torch.argsort(flat, stable=True)
        tok = order // s["topk"]
        xs = x[tok].to(self.dtype)
        if self.grouped:
            counts = torch.zeros(s["E"], dtype=torch.int32, device=x.device)
            counts.index_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))  # no host sync: graph-safe
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = torch._grouped_mm(xs, self.w13.transpose(-2, -1), offs=offs)
            h = torch.nn.functional.silu(h[:, : s["N"]]) * h[:, s["N"]:]
            y = torch._grouped_mm(h, self.w2.transpose(-2, -1), offs=offs)
        else:
            counts = torch.bincount(flat, minlength=s["E"]).tolist()
            outs, start = [], 0
            for e, c in enumerate(counts):
                if c:
                    h = xs[start:start + c] @ self.w13[e].t()
                    h = torch.nn.functional.silu(h[:, : s["N"]]) * h[:, s["N"]:]
                    outs.append(h @ self.w2[e].t())
                    start += c
            y = torch.cat(outs)
        y = y.to(torch.float32) * topk_w.reshape(-1)[order].unsqueeze(1)
        out = torch.zeros((m, s["K"]), dtype=torch.float32, device=x.device)
        out.index_add_(0, tok, y)
        return out.to(x.dtype)
