# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The INT4 Marlin MoE GEMM sweep itself. Runs in its own process (`python -m
ansible.module_utils.bc_marlin` with a JSON config on stdin), so a crash, an OOM kill or a
signal ends only this process: the module reports it, and every finished point is already in
the output file (rewritten after each point).

Backends, all built from the same INT4 values (one seeded generator, chunk by chunk):
  sglang  SGLang's fused_marlin_moe on GPTQ-packed INT4 weights repacked by its Marlin helpers
  triton  SGLang's Triton fused_moe with int4_w4a16, on the uint8 layout its compressed-tensors
          Triton scheme builds from the same GPTQ words
  torch   dequantized grouped GEMM (bf16/fp16 on GPU via torch._grouped_mm, fp32 loop on CPU)
Every backend's weights are resident before the first point, so that at each M and routing the
backends are timed back to back on the same activations and top-k ids.
Timing on GPU: CUDA graph replays, each graph holding one call with its own top-k ids, `routings`
graphs replayed in turn (so small-M points do not sit in L2), CUDA events around each round,
median/min/max. The floor of each point is the larger of the INT4 bytes at the copy bandwidth and
the FLOPs at the dense bf16 tensor throughput, both measured in the same run.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from ansible.module_utils.bc_host import CommandError, gpus, write_atomic
from ansible.module_utils.bc_sweepstats import (
    GIB,
    backend_list,
    bound_knee,
    call_bytes,
    estimate_peak_bytes,
    floors,
    knee,
    median,
    point_cost,
    replay_ids,
    routing_specs,
    triton_call_bytes,
    validate,
    winners,
)


def _torch() -> Any:
    import torch  # noqa: PLC0415 - imported only where the sweep runs

    return torch


def _why(err: BaseException) -> str:
    """An exception as one short line: its type and the last non-blank line of its message."""
    lines = [line for line in str(err).splitlines() if line.strip()]
    return ("%s: %s" % (type(err).__name__, lines[-1].strip()[:300])) if lines else type(err).__name__


def import_errors(names: list[str]) -> dict[str, str]:
    """Per backend, "" when its kernel imports in this Python, else the error's last line (the
    preflight runs this in the sweep's interpreter, with the kernels' own imports)."""
    out = {}
    for name in names:
        try:
            if name == "torch":
                _torch()
            else:
                KERNELS[name].imports()
            out[name] = ""
        except Exception as err:
            out[name] = _why(err)
    return out


def available(name: str, cuda: bool) -> tuple[bool, str]:
    """Whether a backend can run here, and why not (its imports, as the preflight checks them)."""
    if name != "torch" and not cuda:
        return False, "backend %s needs a CUDA GPU; none is visible to torch here" % name
    why = import_errors([name])[name]
    return not why, why


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


# SGLang's tuning procedure for its Triton fused_moe (benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py of
# the sglang repository: get_configs_compute_bound's grid of block sizes, GROUP_SIZE_M, warps and stages, each config
# timed on the whole fused MoE call under override_config, the fastest kept per M, written as
# {M: config} in the file get_config_file_name names). Here: a grid (data) that holds the server's own defaults' values
# (fused_moe_triton_config.py 0.5.16:247-262: BLOCK_SIZE_K 32, GROUP_SIZE_M 8, and Triton's own 4 warps, 3 stages where
# the config names none), walked from the configs nearest the server's (the fewest values changed) outwards, in a seeded
# order among equals, within a time budget; a config Triton cannot build here is skipped.
TUNE_SPACE: dict[str, list[int]] = {
    "BLOCK_SIZE_M": [16, 32, 64, 128], "BLOCK_SIZE_N": [32, 64, 128, 256], "BLOCK_SIZE_K": [32, 64, 128, 256],
    "GROUP_SIZE_M": [1, 8, 16, 32], "num_warps": [4, 8], "num_stages": [2, 3, 4],
}
TRITON_LAUNCH_DEFAULTS = {"num_warps": 4, "num_stages": 3}  # what Triton runs where a config names neither
# a config replaces the server's at a size only where it is this much faster under every distribution, in the tuning's
# own timing (one routing each, a median of 5): a tie would otherwise pass on noise, the luckiest of ~100 configs
TUNE_MARGIN = 0.02
# where SGLang keeps override_config and the config loader: moe_runner/triton_utils (0.5.15-0.5.23), fused_moe_triton
# before; the loader reads $SGLANG_MOE_CONFIG_DIR/configs/triton_<version>/<name> (fused_moe_triton_config.py
# get_moe_configs, 0.5.16:55-178) and picks the entry of the nearest M (try_get_optimal_moe_config, 0.5.16:296)
TUNE_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils", "sglang.srt.layers.moe.fused_moe_triton")
CONFIG_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config",
                  "sglang.srt.layers.moe.fused_moe_triton.fused_moe")


def tune_candidates(seed: int, near: list[dict[str, int]] | None = None) -> list[dict[str, int]]:
    """Every config of TUNE_SPACE, in a seeded order (the same seed, the same walk); with `near` (the server's own
    configs), those that change the fewest of its values first: the budget is spent where a better config is likeliest."""
    import itertools  # noqa: PLC0415
    import random  # noqa: PLC0415

    keys = list(TUNE_SPACE)
    grid = [dict(zip(keys, values, strict=True)) for values in itertools.product(*(TUNE_SPACE[k] for k in keys))]
    random.Random(seed).shuffle(grid)
    if near:
        full = [dict(TRITON_LAUNCH_DEFAULTS, **c) for c in near]
        grid.sort(key=lambda c: min(sum(c[k] != n.get(k) for k in keys) for n in full))  # stable: seeded among equals
    return grid


def nearest(configs: dict[int, Any], m: int) -> Any:
    """The entry the server's loader picks for m tokens: the one of the nearest M (the smaller on a tie)."""
    return configs[min(sorted(configs), key=lambda k: abs(k - m))]


class TunedTritonKernel(TritonKernel):
    """SGLang's Triton fused_moe int4_w4a16 with a config per M tuned on this GPU (`tune`), or given (`configs`):
    each call runs under override_config with the entry the server's loader would pick from the file this writes."""

    name = "triton_tuned"

    @staticmethod
    def imports() -> tuple[Any, Any, Any]:
        first_attr(TUNE_MODULES, "override_config")
        first_attr(CONFIG_MODULES, "try_get_optimal_moe_config")
        return TritonKernel.imports()

    def __init__(self, torch: Any, w: Weights | None, configs: dict[int, dict[str, int]] | None = None,
                 shared: dict[str, Any] | None = None) -> None:
        super().__init__(torch, w, shared)
        self.override = first_attr(TUNE_MODULES, "override_config")
        self.current = first_attr(TUNE_MODULES, "get_config")
        self.configs: dict[int, dict[str, int]] = dict(configs or {})
        self.impl = "sglang fused_moe triton int4_w4a16, tuned here (%s)" % self.fn.__module__.rsplit(".", 2)[-2]
        self.tuning: dict[str, Any] = {}

    def server_config(self, m: int) -> dict[str, int]:
        """The config the server runs today at m tokens (its loader: a shipped file, else its default)."""
        pick = first_attr(CONFIG_MODULES, "try_get_optimal_moe_config")
        got = pick(tuple(self.w13.shape), tuple(self.w2.shape), self.s["topk"], "int4_w4a16", m,
                   block_shape=self.block_shape)
        return dict(got[0] if isinstance(got, tuple) else got)

    def file_name(self) -> str:
        """The file name the server's loader looks for, from its own function, with the shapes it passes
        (E, N from w2 as stored: fused_moe.py 0.5.16:395-397)."""
        name = first_attr(CONFIG_MODULES, "get_config_file_name")
        return name(self.w2.shape[0], self.w2.shape[2], "int4_w4a16", self.block_shape)

    def __call__(self, x: Any, topk_w: Any, topk_ids: Any) -> Any:
        if not self.configs:
            raise RuntimeError("triton_tuned has no tuned config: tune it first (bc_sweep_tune_budget_s > 0)")
        before = self.current()
        try:
            with self.override(nearest(self.configs, x.shape[0])):
                return super().__call__(x, topk_w, topk_ids)
        except BaseException:
            # SGLang's override_config restores the previous config only when its body returns (no try/finally:
            # moe_runner/triton_utils/__init__.py 0.5.16:16-22): a config that raised (a Triton build out of shared
            # memory) would stay in force for every later call, the server's own Triton backend's included (seen on the
            # H200). Put back what was in force, in the module that holds it
            import sys  # noqa: PLC0415

            sys.modules[self.current.__module__]._config = before
            raise

    def tune(self, sizes: list[int], routes: dict[int, tuple[Any, list[Any]]], device: Any, budget_s: float,
             seed: int, keep: list[int], clock: Callable[[], float] = time.monotonic,
             builders: Callable[[float], Builders] | None = None, groups: int = 1) -> dict[str, Any]:
        """Time the server's config and then TUNE_SPACE's, in a seeded order, at each of `sizes` (routes[m]: its input
        and routings), until `budget_s` has passed (checked before each size: a config cut by it does not count);
        keep the fastest per M. `keep` are the other sizes the file must answer the way the server does today (their
        entry is the server's current config), with anchors of its own (anchors()): every size of the file starts as
        the server's config, a tuned one replaces it only where it was faster. With `builders` (a function of the
        deadline that starts Builders, called once the server's own config is timed, so no process starts beside that
        timing), the grid is walked in batches of its width: a batch is built in the build processes at once (into Triton's on-disk cache),
        then timed here one config at a time while they are idle, so no build shares the GPU with a timing; a config
        they cannot build is failed untimed. A tuning that timed nothing (the server's own config failed at a size)
        is a RuntimeError. With `groups` > 1, each size's routings are that many distributions (equal consecutive
        shares of routes[m]), each timed on its own: a config's score is its worst ratio to the server's config over
        them, and it replaces the server's config only where that is below 1 - TUNE_MARGIN: at least that much faster
        under every one of the site's distributions, in the tuning's timing (tuned on their mean, the H200 kept a
        config 6% slower under zipf(1) than the server's: #32). Its speedup is that worst one."""
        if groups > 1 and any(not routes[m][1] or len(routes[m][1]) % groups for m in sizes):
            raise ValueError("each size needs the same number of routings from each of the %d distributions" % groups)
        started = clock()
        deadline = started + budget_s
        tried, failed, built = 0, 0, 0
        spent = {"build_s": 0.0, "time_s": 0.0}
        best: dict[int, tuple[float, dict[str, int]]] = {}
        today: dict[int, list[float]] = {}
        baseline = {m: self.server_config(m) for m in sorted(set(sizes) | set(keep))}
        own = [dict(TRITON_LAUNCH_DEFAULTS, **baseline[m]) for m in sizes]
        timed_already = {tuple(c.get(k) for k in TUNE_SPACE) for c in own}  # above: not again as the grid's
        walk = tune_candidates(seed, own)
        grid = [c for c in walk if tuple(c.values()) not in timed_already]
        notes: list[str] = []

        def timed(cand: dict[str, int] | None) -> str:
            """Time one config at every size (the server's own: cand None): "timed", "failed", or "cut" by the budget."""
            got = {}
            try:
                for m in sizes:  # a config counts only where it ran at every size (Triton specializes per size)
                    if cand is not None and clock() >= deadline:
                        return "cut"
                    config = baseline[m] if cand is None else cand
                    self.configs = {m: config}
                    x, rts = routes[m]
                    share = len(rts) // groups  # each distribution's routings: an equal consecutive share
                    chunks = [rts[i * share:(i + 1) * share] for i in range(groups)]
                    got[m] = ([median(time_point(self.torch, self, x, c, device, 2, 5, True)) for c in chunks], config)
            except Exception:  # a config Triton cannot build or launch here (shared memory, registers)
                try:
                    self.torch.cuda.synchronize(device)
                except Exception:  # a device left unusable is the next config's (or the sweep's) error to report
                    pass
                return "failed"
            for m, (times, config) in got.items():
                if cand is None:
                    today[m] = times
                score = max(t / max(b, 1e-12) for t, b in zip(times, today[m], strict=True))  # worst over the distributions
                if cand is None or score < min(best[m][0], 1 - TUNE_MARGIN):
                    best[m] = (score, config)
            return "timed"

        timed(None)  # the server's own config is not one of the grid's: its failure is the error below
        if set(today) != set(sizes):
            raise RuntimeError("the server's own Triton config could not be timed at M=%s: nothing to tune against"
                               % ",".join(str(m) for m in sizes if m not in today))
        build: Builders | None = None
        if builders is not None and clock() < deadline:
            t0 = clock()
            try:
                build = builders(deadline)
            except BuildersFailed as err:  # they never started: build here, as without them
                notes.append("the build processes failed (%s): the configs were built here" % err)
            spent["build_s"] += clock() - t0
        width = build.width if build else 1
        at = 0
        while at < len(grid) and clock() < deadline:
            batch, at = grid[at:at + width], at + width
            if build is not None:
                t0 = clock()
                try:
                    errors = build.build(batch, deadline)
                except BuildersFailed as err:  # they broke: build here, as without them (this batch's configs too)
                    notes.append("the build processes failed (%s): the configs were built here" % err)
                    build.close()
                    build, width, errors = None, 1, {}
                spent["build_s"] += clock() - t0
                if build is not None:
                    failed += sum(1 for e in errors.values() if e)
                    batch = [c for i, c in enumerate(batch) if errors.get(i) == ""]  # not built in time: not timed
                    built += len(batch)
            t0 = clock()
            for cand in batch:
                outcome = timed(cand)
                if outcome == "cut":
                    break
                tried += outcome == "timed"
                failed += outcome == "failed"
            spent["time_s"] += clock() - t0
        self.configs = {m: dict(cfg) for m, cfg in baseline.items()}
        self.configs.update({m: dict(cfg) for m, (_ms, cfg) in best.items()})
        self.tuning = {"budget_s": budget_s, "spent_s": round(clock() - started, 1), "configs_tried": tried,
                       "configs_failed": failed, "space": len(walk), "sizes": sorted(sizes), "file": self.file_name(),
                       "build_processes": width if built else 0, "built_ahead": built,
                       "build_s": round(spent["build_s"], 1), "time_s": round(spent["time_s"], 1),
                       # the server's config's time over the tuned one's, per M, in the tuning's own timing (the worst
                       # over the distributions)
                       "speedup": {str(m): round(1 / max(score, 1e-12), 3) for m, (score, _c) in sorted(best.items())
                                   if m in today}, "margin": TUNE_MARGIN}
        if build is not None:
            build.close()
        if notes:
            self.tuning["notes"] = notes
        return self.tuning


class BuildersFailed(RuntimeError):
    """The build processes could not start or broke (a set-up that raised, one that died): the tuning builds in its own
    process instead."""


def _builder_main(parent: int, conn: Any, setup: Callable[..., Callable[[Any], None]], args: tuple[Any, ...]) -> None:
    """A build process: end with the sweep (PR_SET_PDEATHSIG, SIGKILL when its parent exits: no orphan keeps a CUDA
    context or a core past a killed sweep), run `setup(*args)` and say it is up (""), or why not; then build each
    (index, config) it is sent and answer (index, "" or why not), until its pipe closes."""
    import ctypes  # noqa: PLC0415
    import signal  # noqa: PLC0415

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG (Linux)
    except (AttributeError, OSError):  # elsewhere: close() at the tuning's end is the only bound
        pass
    if os.getppid() != parent:  # the sweep ended before the line above
        os._exit(1)
    try:
        build = setup(*args)
    except Exception as err:
        conn.send(_why(err))
        return
    conn.send("")
    while True:
        try:
            index, config = conn.recv()
        except (EOFError, OSError, TypeError):  # closed, or told to stop (None)
            return
        try:
            build(config)
            conn.send((index, ""))
        except Exception as err:
            conn.send((index, _why(err)))


class Builders:
    """`width` processes that build the tuning's configs ahead of their timing. A Triton build is seconds of one core
    and the timing needs the GPU alone; the H200's host has 16 cores. Each process runs `setup(*args)` once, which
    returns the function that builds one config (the kernel run once at each tuned size under it, which leaves the
    build in Triton's on-disk cache, where the timing process finds it; it raises where the config cannot be built).
    Spawned, not forked (CUDA cannot be used in a forked child), with torch's reductions, so CUDA tensors in `args`
    are shared through CUDA IPC, not copied; each ends with the sweep. One pipe per process, no pool: a process that
    dies is seen at once (multiprocessing.Pool loses the job it held and can hang in its terminate). The constructor
    returns once every process is up (its set-up done: nothing of theirs runs beside a timing afterwards), by
    `deadline`, else BuildersFailed. close() ends them."""

    def __init__(self, width: int, setup: Callable[..., Callable[[Any], None]], args: tuple[Any, ...], deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import torch.multiprocessing as mp  # noqa: PLC0415 - torch's reductions: CUDA tensors cross by IPC

        ctx = mp.get_context("spawn")
        self.width, self.clock = width, clock
        self.procs: list[tuple[Any, Any]] = []
        try:
            for _i in range(width):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_builder_main, args=(os.getpid(), theirs, setup, args), daemon=True)
                proc.start()
                theirs.close()
                self.procs.append((proc, mine))
            for up, (proc, conn) in enumerate(self.procs):
                why = self._answer(proc, conn, deadline, "%d of %d build processes were up within the budget" % (up, width))
                if why:
                    raise BuildersFailed(why)
        except BaseException:
            self.close()
            raise

    def _answer(self, proc: Any, conn: Any, deadline: float, late: str) -> Any:
        """The next message of one process; BuildersFailed where it ended first, or `late` at the deadline."""
        while True:
            left = deadline - self.clock()
            if left <= 0:
                raise BuildersFailed(late)
            if conn.poll(min(left, 1.0)):
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    break
            if not proc.is_alive() and not conn.poll():
                break
        raise BuildersFailed("a build process ended before it answered (exit code %s)" % proc.exitcode)

    def build(self, configs: list[Any], deadline: float) -> dict[int, str]:
        """Build `configs` at once: {index: "" built, or why not}; an index missing was not built by `deadline`
        (the processes are then ended: what they were building would share the GPU with the timing). BuildersFailed
        where a process died (its config is lost, and waiting for it would spend the budget)."""
        from multiprocessing.connection import wait  # noqa: PLC0415

        if not self.procs:
            raise BuildersFailed("the build processes were ended")
        pending = list(enumerate(configs))
        busy: dict[Any, Any] = {}  # conn -> its process
        out: dict[int, str] = {}
        for proc, conn in self.procs:
            if pending:
                conn.send(pending.pop(0))
                busy[conn] = proc
        while busy:
            left = deadline - self.clock()
            if left <= 0:
                self.close()
                return out
            for conn in wait(list(busy), timeout=min(left, 1.0)):
                try:
                    index, why = conn.recv()
                except (EOFError, OSError):
                    self.close()
                    raise BuildersFailed("a build process died while building (a crash in Triton's compiler?)") from None
                out[index] = why
                if pending:
                    conn.send(pending.pop(0))
                else:
                    del busy[conn]
            if any(not proc.is_alive() for proc in busy.values()):
                self.close()
                raise BuildersFailed("a build process died while building (a crash in Triton's compiler?)")
        return out

    def close(self) -> None:
        procs, self.procs = self.procs, []
        for proc, conn in procs:
            conn.close()  # a process waiting for work reads the end and returns
            if proc.is_alive():
                proc.terminate()
        for proc, _conn in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def _tuned_builder(shared: dict[str, Any], inputs: dict[int, tuple[Any, Any, Any]]) -> Callable[[Any], None]:
    """In a build process: the tuned kernel over the sweep's own weights (shared), and the function that builds one
    config by running it once at each tuned size on that size's input and first routing (inputs[m]: x, weights, ids)."""
    torch = _torch()
    kernel = TunedTritonKernel(torch, None, shared=shared)
    device = next(iter(inputs.values()))[0].device
    torch.cuda.set_device(device)

    def build(config: dict[str, int]) -> None:
        for m, (x, topk_w, topk_ids) in sorted(inputs.items()):
            kernel.configs = {m: config}
            kernel(x, topk_w, topk_ids)
        torch.cuda.synchronize(device)

    return build


def build_width(torch: Any, s: dict[str, int], m: int, device: Any, cpus: int | None = None) -> int:
    """How many build processes the tuning starts: a core left to the sweep itself, at most 8, and no more than the
    GPU's free memory holds beside the sweep's own timing and a GiB to spare (each: a CUDA context and one call's
    buffers at the largest tuned size, as the sweep's estimate counts them; free memory is read now, with a server
    beside it where the sweep runs beside one); below 2 it builds in its own process (0)."""
    cores = (cpus if cpus is not None else len(os.sched_getaffinity(0))) - 1
    call = call_bytes(s, m, 2) + triton_call_bytes(s, m, 2)
    each = call + 768 * 1024 * 1024
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0
    # beside the builders: the sweep's own timing at that size (its call's buffers, twice for the graphs) and a GiB
    width = min(cores, 8, max(0, (free - GIB - 2 * call) // each))
    return int(width) if width >= 2 else 0


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


def tensor_throughput(torch: Any, device: Any, n: int = 8192, iters: int = 10) -> float:
    """Dense bf16 matmul FLOP/s (2 n^3 per product): the compute ceiling of the W4A16 kernels, which
    dequantize to bf16 and multiply on the same tensor cores."""
    if device.type != "cuda":
        return 0.0
    a = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    b = torch.randn((n, n), device=device, dtype=torch.bfloat16)
    for _i in range(3):
        a @ b
    samples = []
    for _i in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _i in range(iters):
            a @ b
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000 / iters)
    del a, b
    torch.cuda.empty_cache()
    return 2.0 * n ** 3 / median(samples)


def copy_bandwidth(torch: Any, device: Any, nbytes: int = GIB, iters: int = 20) -> float:
    """Device-to-device copy, bytes read + written per second (the convention of the floor)."""
    if device.type != "cuda":
        return 0.0
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _i in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _i in range(iters):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000 / iters
    del a, b
    torch.cuda.empty_cache()
    return nbytes / seconds


KERNELS: dict[str, Any] = {"sglang": SglangKernel, "triton": TritonKernel, "triton_tuned": TunedTritonKernel,
                           "torch": TorchKernel}


def tune_sizes(cfg: dict[str, Any], sizes: list[int]) -> list[int]:
    """The sizes the tuning times: `tune_batch_sizes` where given (each must be a size of the sweep), else the sweep's
    sizes from 256 up (the verification batches the tuning is for), else all of them."""
    given = [int(m) for m in cfg.get("tune_batch_sizes") or []]
    if given:
        return sorted(set(given))
    return [m for m in sizes if m >= 256] or list(sizes)


def anchors(s: dict[str, int], sizes: list[int], tuned: list[int]) -> list[int]:
    """The sizes the file answers with the server's own config: the sweep's untuned sizes, and anchors where the
    loader would otherwise stretch a tuned entry over sizes never timed (it picks the nearest key for any M:
    fused_moe_triton_config.py 0.5.16:300): powers of two from 1 to twice the largest tuned size, and E and E+1,
    where SGLang's default config changes (`M <= E`, :254)."""
    top = 2 * max(tuned)
    powers = [1 << i for i in range(top.bit_length()) if (1 << i) <= top]
    return sorted((set(sizes) | set(powers) | {s["E"], s["E"] + 1}) - set(tuned))


def write_tuned(kernel: TunedTritonKernel, config_dir: str) -> dict[str, Any]:
    """Write the tuned map where SGLang's loader looks under `config_dir` (its SGLANG_MOE_CONFIG_DIR:
    configs/triton_<version>/<file_name>), then read it back through the loader itself, with the directory set as
    the server would have it: the file is proven to be one the server loads, with these configs."""
    import triton  # noqa: PLC0415

    sub = os.path.join(config_dir, "configs", "triton_%s" % triton.__version__.replace(".", "_"))
    path = os.path.join(sub, kernel.file_name())
    os.makedirs(sub, exist_ok=True)
    loader = first_attr(CONFIG_MODULES, "get_moe_configs")
    # the directory replaces the package's own for every shape (the loader reads SGLANG_MOE_CONFIG_DIR or its package's
    # directory, never both: fused_moe_triton_config.py 0.5.16:90-92): it carries the packaged configs too
    packaged = os.path.join(os.path.dirname(os.path.realpath(sys.modules[loader.__module__].__file__ or "")), "configs")
    copied = keep_packaged(packaged, os.path.join(config_dir, "configs"))
    write_atomic(path, json.dumps({str(m): c for m, c in sorted(kernel.configs.items())}, indent=1))
    before = os.environ.get("SGLANG_MOE_CONFIG_DIR")
    os.environ["SGLANG_MOE_CONFIG_DIR"] = config_dir
    try:
        loader.cache_clear()
        read = loader(kernel.w2.shape[0], kernel.w2.shape[2], "int4_w4a16", 0, kernel.s["group"])
    finally:
        if before is None:
            os.environ.pop("SGLANG_MOE_CONFIG_DIR", None)
        else:
            os.environ["SGLANG_MOE_CONFIG_DIR"] = before
        loader.cache_clear()
    if read != kernel.configs:
        raise RuntimeError("SGLang's loader read %s back as %r, not the tuned configs" % (path, read))
    return {"path": path, "config_dir": config_dir, "loader_read_back": True, "packaged_copied": copied,
            "configs": {str(m): c for m, c in sorted(kernel.configs.items())}}


def keep_packaged(packaged: str, into: str) -> int:
    """Copy the package's config files (`packaged`, SGLang's configs/ directory) into `into` where `into` has none of
    that name: a tuned file (or an operator's) is never replaced by a packaged one. The number copied."""
    copied = 0
    for root, _dirs, files in os.walk(packaged):
        for name in files:
            if not name.endswith(".json"):
                continue
            target = os.path.join(into, os.path.relpath(os.path.join(root, name), packaged))
            if os.path.lexists(target):
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(os.path.join(root, name), encoding="utf-8") as f:
                write_atomic(target, f.read())  # a copy cut short never stays: the next run would skip it as present
            copied += 1
    return copied


def time_point(torch: Any, kernel: Callable[..., Any], x: Any, routings: list[tuple[Any, Any]], device: Any,
               warmup: int, iters: int, use_graph: bool) -> list[float]:
    """Per-call times in ms, one sample per replay of all routings."""
    n = len(routings)
    if device.type != "cuda":
        for i in range(warmup):
            kernel(x, *routings[i % n])
        samples = []
        for _i in range(iters):
            t0 = time.perf_counter()
            for tw, ids in routings:
                kernel(x, tw, ids)
            samples.append((time.perf_counter() - t0) * 1000 / n)
        return samples
    stream = torch.cuda.Stream(device=device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for i in range(max(warmup, 2)):
            kernel(x, *routings[i % n])
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)

    def body() -> None:
        for tw, ids in routings:
            kernel(x, tw, ids)

    step: Callable[[], None] = body
    if use_graph:
        # one graph per routing, all in one memory pool: the pool holds one call's buffers, not n
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        for tw, ids in routings:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                kernel(x, tw, ids)
            graphs.append(graph)

        def replay() -> None:
            for graph in graphs:
                graph.replay()

        step = replay
        for _i in range(max(warmup // n, 2)):
            step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _i in range(iters)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize(device)
    return [start.elapsed_time(end) / n for start, end in events]


def environment(torch: Any, device: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                           "device_type": device.type, "host": platform.node()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, sm_count=props.multi_processor_count, gpu_memory_gib=round(props.total_memory / GIB, 1),
                   cuda=torch.version.cuda)
        try:  # the one GPU query of the project (bc_host.gpus); a hung nvidia-smi costs 20 s, never the sweep
            env["driver"] = next((g["driver"] for g in gpus("nvidia-smi", 20) if g["index"] == (device.index or 0)), "")
        except CommandError:
            env["driver"] = ""
    else:
        env["gpu"] = None
        env["cpu"] = platform.processor() or platform.machine()
    try:
        import sglang  # noqa: PLC0415

        env["sglang"] = getattr(sglang, "__version__", "unknown")
    except Exception:
        env["sglang"] = None
    return env


def _device(torch: Any, cfg: dict[str, Any]) -> Any:
    want_cuda = cfg.get("device", 0) is not None and cfg.get("device_type", "auto") != "cpu"
    if want_cuda and torch.cuda.is_available():
        return torch.device("cuda", int(cfg.get("device", 0)))
    return torch.device("cpu")


def _choose(asked: list[str], cuda: bool, auto: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """The backends that run here and the report of every one asked for. The first is the primary,
    what the run is for: it must run. Another that cannot run is reported, not fatal."""
    report, runnable = [], []
    for name in asked:
        ok, why = available(name, cuda)
        report.append({"name": name, "status": "measured" if ok else "unavailable", "why": why})
        if ok:
            runnable.append(name)
    if report[0]["status"] != "measured":
        if asked[0] == "sglang" and not cuda:
            raise RuntimeError("backend sglang needs a CUDA GPU; none is visible to torch here")
        if auto:
            raise RuntimeError("backend auto: sglang is not importable here (%s); install sglang in this "
                               "Python, or choose backend torch" % report[0]["why"])
        raise RuntimeError("the primary backend %s cannot run here: %s%s" % (
            asked[0], report[0]["why"], "".join("; %s: %s" % (r["name"], r["why"]) for r in report[1:] if r["why"])))
    return runnable, report


def _point(s: dict[str, int], m: int, samples: list[float], touched: float, backend: str, bw: float,
           tflops: float) -> dict[str, Any]:
    ms = median(samples)
    cost = point_cost(s, m, touched, 2, backend)
    floor = floors(s, m, touched, bw, tflops)
    return dict({
        "m": m, "ms": round(ms, 5), "ms_min": round(min(samples), 5), "ms_max": round(max(samples), 5),
        "us_per_token": round(ms * 1000 / m, 4), "experts_touched": round(touched, 2),
        "bytes_moved": int(cost["bytes"]), "gbs": round(cost["bytes"] / (ms / 1000) / 1e9, 1),
        "tflops": round(cost["flops"] / (ms / 1000) / 1e12, 3),
        "efficiency": round(floor["floor_ms"] / ms, 4) if floor["floor_ms"] else None,
    }, **floor)


def run_sweep(cfg: dict[str, Any], save: Callable[[dict[str, Any]], None] = lambda r: None) -> dict[str, Any]:
    torch = _torch()
    t_start = time.monotonic()
    asked_raw = cfg.get("backends") or cfg.get("backend") or ["auto"]
    asked_raw = [asked_raw] if isinstance(asked_raw, str) else list(asked_raw)
    s = validate(cfg["shape"], cfg["batch_sizes"], asked_raw)
    device = _device(torch, cfg)
    cuda = device.type == "cuda"
    backends, report = _choose(backend_list(asked_raw), cuda, asked_raw == ["auto"])
    specs = routing_specs(cfg.get("routing") or [{"kind": "uniform"}], s)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg.get("dtype", "bf16")]
    routings_n, seed = int(cfg.get("routings", 8)), int(cfg.get("seed", 0))
    sizes = sorted({int(m) for m in cfg["batch_sizes"]})
    estimate = estimate_peak_bytes(s, sizes, backends, routings_n)
    if cuda:
        free, _total = torch.cuda.mem_get_info(device)
        if estimate > free:
            raise RuntimeError("not enough free GPU memory on device %d: the sweep of %s needs about %.2f GiB, %.2f GiB "
                               "free; free the GPU (the benchmark cycle's release or stop), or sweep fewer backends or "
                               "smaller batch_sizes/tp_size" % (device.index, "+".join(backends), estimate / GIB, free / GIB))
        torch.cuda.reset_peak_memory_stats(device)
    result: dict[str, Any] = {
        "status": "running", "backend": backends[0], "shape": s, "tp_size": int(cfg["shape"].get("tp_size", 1)),
        "dtype": cfg.get("dtype", "bf16"), "ran_on": "gpu" if cuda else "cpu", "points": [],
        "estimate_peak_gib": round(estimate / GIB, 3), "environment": environment(torch, device),
        "seed": seed, "routings": routings_n, "backends": report, "routing": [r["name"] for r in specs], "series": [],
    }
    if not cuda:
        result["note"] = "ran on the CPU: no CUDA device is visible; times are not GPU kernel times"
    bw, tflops = (copy_bandwidth(torch, device), tensor_throughput(torch, device)) if cuda else (0.0, 0.0)
    result.update(copy_bandwidth_gbs=round(bw / 1e9, 1), dense_tflops=round(tflops / 1e12, 1))
    save(result)

    t_prep = time.monotonic()
    weights = Weights(torch, s, device, dtype, seed)
    kernels = {}
    for name in backends:
        t_kernel = time.monotonic()
        entry = next(r for r in report if r["name"] == name)
        try:
            kernels[name] = build_kernel(torch, name, weights, dtype)
        except Exception as err:  # a secondary backend that cannot be built is reported; the primary must be
            if name == backends[0]:
                raise
            entry.update(status="unavailable", why="%s: %s" % (type(err).__name__, str(err).splitlines()[0][:300] if str(err) else ""))
            if cuda:
                torch.cuda.empty_cache()
            continue
        entry.update(impl=kernels[name].impl, prepare_s=round(time.monotonic() - t_kernel, 2))
    if "triton_tuned" in kernels:
        t_tune = time.monotonic()
        entry = next(r for r in report if r["name"] == "triton_tuned")
        try:
            entry.update(tuning=tune_kernel(torch, cfg, kernels["triton_tuned"], s, sizes, device, dtype, seed))
        except Exception as err:  # a secondary backend: reported, the others are timed (the primary's tuning is fatal)
            if backends[0] == "triton_tuned":
                raise
            entry.update(status="unavailable", why="the tuning failed: %s: %s" % (type(err).__name__, str(err)[:300]))
            del kernels["triton_tuned"]
            if cuda:
                torch.cuda.empty_cache()
        entry["tune_s"] = round(time.monotonic() - t_tune, 2)
        save(result)
    backends = [b for b in backends if b in kernels]
    result["prepare_s"] = round(time.monotonic() - t_prep, 2)
    result["impl"] = kernels[backends[0]].impl
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    result["series"] = [{"backend": b, "routing": r["name"], "impl": kernels[b].impl, "points": []} for r in specs for b in backends]
    for i, spec in enumerate(specs):
        routing = Routing(torch, s, spec, device, gen)
        for m in sizes:
            x = torch.randn((m, s["K"]), generator=gen, device=device).to(dtype if cuda else torch.float32)
            routes = make_routings(torch, s, m, routings_n, device, gen, routing)
            touched = sum(len(torch.unique(ids)) for _w, ids in routes) / routings_n
            for j, name in enumerate(backends):
                kernel = kernels[name]
                samples = time_point(torch, kernel, x, routes, device, int(cfg.get("warmup", 5)),
                                     int(cfg.get("iters", 20)), cuda and kernel.graph_safe)
                result["series"][i * len(backends) + j]["points"].append(_point(s, m, samples, touched, name, bw, tflops))
            result["points"] = result["series"][0]["points"]
            save(result)
    if cuda:
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 3)
        result["estimate_error"] = round(result["peak_memory_gib"] / result["estimate_peak_gib"] - 1, 4)
    del kernels, weights
    if cuda:
        torch.cuda.empty_cache()
    _finish(torch, cfg, result, s, device, dtype, report)
    result["wall_s"] = round(time.monotonic() - t_start, 2)
    save(result)
    return result


def tune_kernel(torch: Any, cfg: dict[str, Any], kernel: TunedTritonKernel, s: dict[str, int], sizes: list[int],
                device: Any, dtype: Any, seed: int) -> dict[str, Any]:
    """Tune the kernel at its sizes on the sweep's own routing distributions (routings of their own: the sweep's inputs
    are not drawn from this), within the run's budget, and write the config file the server loads (proven by its
    loader). Each distribution is timed on its own and a config must beat the server's under every one of them
    (tune(groups=)): tuned on uniform routing alone, configs lost 6-16% under zipf(1) at M=512 and 1024 on the
    H200, and on the mean of both still 6% at M=512 and 4% at 4096 (docs/benchmarks.md, the fourth run)."""
    at = tune_sizes(cfg, sizes)
    gen = torch.Generator(device=device).manual_seed(seed + 3)
    specs = routing_specs(cfg.get("routing") or [{"kind": "uniform"}], s)
    dists = [Routing(torch, s, spec, device, gen) for spec in specs]
    each = max(1, 2 // len(dists))  # two routings per size in all with one distribution, one each with more
    routes = {m: (torch.randn((m, s["K"]), generator=gen, device=device).to(dtype),
                  [r for dist in dists for r in make_routings(torch, s, m, each, device, gen, dist)]) for m in at}
    budget = float(cfg.get("tune_budget_s", 0))
    width = build_width(torch, s, max(at), device) if budget > 0 else 0
    started: list[Builders] = []

    def builders(deadline: float) -> Builders:
        shared = {"s": s, "w13": kernel.w13, "w2": kernel.w2, "s13": kernel.s13, "s2": kernel.s2}
        started.append(Builders(width, _tuned_builder, (shared, {m: (x, *rts[0]) for m, (x, rts) in routes.items()}), deadline))
        return started[-1]

    try:
        tuning = kernel.tune(at, routes, device, budget, seed, anchors(s, sizes, at), builders=builders if width else None,
                             groups=len(dists))
    finally:
        for build in started:  # whatever ended the tuning (an exception included), no build process outlives it
            build.close()
    routes.clear()  # the tuning's inputs freed before the sweep's
    out_dir = cfg.get("tune_dir") or os.path.join(os.path.dirname(cfg.get("output") or ".") or ".", "moe-config")
    tuning.update(write_tuned(kernel, out_dir))
    tuning["routing"] = [spec["name"] for spec in specs]
    return tuning


def _finish(torch: Any, cfg: dict[str, Any], result: dict[str, Any], s: dict[str, int], device: Any, dtype: Any,
            report: list[dict[str, Any]]) -> None:
    """Knees, the fastest backend per M, and each backend against the fp32 reference: a backend
    whose error passes the bound fails the sweep (its times would be of a wrong answer)."""
    for run in result["series"]:
        run.update(knee(run["points"], s["E"]), bound_knee_m=bound_knee(run["points"]))
    result.update(knee(result["points"], s["E"]), bound_knee_m=bound_knee(result["points"]),
                  winners=winners(result["series"]))
    bound = float(cfg.get("check_bound", 0.03))
    wrong = []
    for entry in report:
        if entry["status"] != "measured" or not cfg.get("check", True) or (entry["name"] == "torch" and device.type != "cuda"):
            continue
        try:
            tuned = {int(m): c for m, c in (entry.get("tuning") or {}).get("configs", {}).items()}
            # a tuned backend is checked with each config it tuned (at its M), the others at one M
            at = sorted({int(m) for m in (entry.get("tuning") or {}).get("sizes", [])}) or [16]
            checks = [reference_check(torch, s, device, dtype, int(cfg.get("seed", 0)), m=m, backend=entry["name"],
                                      configs=tuned or None, partial=partial) for m in at
                      for partial in ((False, True) if tuned else (False,))]  # a tuned config on partial tiles too
            # the worst check, a NaN (garbage in masked rows) the worst of all
            check = dict(max(checks, key=lambda c: math.inf if math.isnan(c["relative_error"]) else c["relative_error"]))
            partial_checks = [c for c in checks if c["partial"]]
            check.update(bound=bound, ok=all(c["relative_error"] <= bound for c in checks),
                         partial_tiles_checked=bool(partial_checks) and all(c["partial_tiles"] for c in partial_checks))
        except Exception as err:  # a check that cannot run proves nothing: a failed check, not a lost run
            check = {"relative_error": float("nan"), "bound": bound, "ok": False,
                     "error": "%s: %s" % (type(err).__name__, str(err)[:300])}
        entry["check"] = check
        if not check["ok"] and (entry.get("tuning") or {}).get("path"):
            try:  # a config that computes a wrong answer is never left where a server would load it
                os.remove(entry["tuning"]["path"])
                entry["tuning"]["withdrawn"] = True
            except OSError:
                entry["tuning"]["withdrawn"] = False
        if not check["ok"]:
            wrong.append("%s: %s" % (entry["name"], check.get("error") or "relative error %.4f > %.4f" % (check["relative_error"], bound)))
    primary = report[[r["name"] for r in report].index(result["backend"])]
    if primary.get("check"):
        result["check"] = primary["check"]
    if wrong:
        result["status"] = "error"
        result["error"] = ("against the fp32 reference from the dequantized weights, %s: that kernel computes a wrong answer "
                           "on this host (its times are kept in the output)" % "; ".join(wrong))
        return
    result["status"] = "complete"


def main() -> int:
    cfg = json.load(sys.stdin)
    output: str | None = cfg.get("output")
    save: Callable[[dict[str, Any]], None] = (
        (lambda r: write_atomic(output, json.dumps(r, indent=1, sort_keys=True))) if output else (lambda r: None))
    try:
        result = run_sweep(cfg, save)
    except Exception as err:
        # the worker's protocol with marlin_sweep is its stdout: it runs as `python -m`, not as a module
        print(json.dumps({"status": "error", "error": "%s: %s" % (type(err).__name__, err)}))  # pylint: disable=ansible-bad-function
        return 3
    print(json.dumps(result))  # pylint: disable=ansible-bad-function
    return 0 if result["status"] == "complete" else 3


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
