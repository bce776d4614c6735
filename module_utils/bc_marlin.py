# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The INT4 Marlin MoE GEMM sweep itself. Runs in its own process (`python -m
ansible.module_utils.bc_marlin` with a JSON config on stdin), so a crash, an OOM kill or a
signal ends only this process: the module reports it, and every finished point is already in
the output file (rewritten after each point).

Backends:
  sglang  SGLang's fused_marlin_moe on GPTQ-packed INT4 weights repacked by its Marlin helpers
  torch   dequantized grouped GEMM (bf16/fp16 on GPU via torch._grouped_mm, fp32 loop on CPU)
Timing on GPU: CUDA graph replays, each graph holding `routings` calls with different top-k ids
(so small-M points do not sit in L2), CUDA events around each replay, median/min/max.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

from ansible.module_utils.bc_sweepstats import (
    GIB,
    estimate_peak_bytes,
    knee,
    median,
    point_cost,
    validate,
)


def _torch() -> Any:
    import torch  # noqa: PLC0415 - imported only where the sweep runs

    return torch


def sglang_available() -> tuple[bool, str]:
    try:
        from sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe import fused_marlin_moe  # noqa: F401,PLC0415
    except Exception as err:
        return False, "%s: %s" % (type(err).__name__, err)
    return True, ""


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


def make_routings(torch: Any, s: dict[str, int], m: int, count: int, device: Any, gen: Any) -> list[tuple[Any, Any]]:
    out = []
    for _ in range(count):
        scores = torch.rand((m, s["E"]), generator=gen, device=device)
        weights, ids = torch.topk(scores, s["topk"], dim=-1)
        out.append(((weights / weights.sum(-1, keepdim=True)).to(torch.float32), ids.to(torch.int32)))
    return out


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

    def __init__(self, torch: Any, w: Weights) -> None:
        from sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe import fused_marlin_moe  # noqa: PLC0415
        from sglang.srt.layers.quantization.marlin_utils import marlin_moe_permute_scales  # noqa: PLC0415

        gptq_marlin_moe_repack = first_attr(REPACK_MODULES, "gptq_marlin_moe_repack")

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


def reference_check(torch: Any, s: dict[str, int], device: Any, dtype: Any, seed: int, experts: int = 8,
                    m: int = 16) -> dict[str, Any]:
    """Relative error of SGLang's kernel against an fp32 reference from the dequantized weights."""
    small = dict(s, E=min(experts, s["E"]), topk=min(s["topk"], experts, s["E"]))
    w = Weights(torch, small, device, dtype, seed + 7)
    kernel = SglangKernel(torch, w)
    ref = TorchKernel(torch, w, torch.float32)
    ref.grouped = False  # fp32 loop: the reference, not a kernel under test
    gen = torch.Generator(device=device).manual_seed(seed + 11)
    x = torch.randn((m, small["K"]), generator=gen, device=device).to(dtype)
    tw, ids = make_routings(torch, small, m, 1, device, gen)[0]
    got = kernel(x, tw, ids).to(torch.float32)
    want = ref(x.to(torch.float32), tw, ids)
    rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
    return {"experts": small["E"], "m": m, "relative_error": rel}


def copy_bandwidth(torch: Any, device: Any, nbytes: int = GIB, iters: int = 20) -> float:
    """Device-to-device copy, bytes read + written per second (the convention of the floor)."""
    if device.type != "cuda":
        return 0.0
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        b.copy_(a)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000 / iters
    del a, b
    torch.cuda.empty_cache()
    return nbytes / seconds


def time_point(torch: Any, kernel: Callable[..., Any], x: Any, routings: list[tuple[Any, Any]], device: Any,
               warmup: int, iters: int, use_graph: bool) -> list[float]:
    """Per-call times in ms, one sample per replay of all routings."""
    n = len(routings)
    if device.type != "cuda":
        for i in range(warmup):
            kernel(x, *routings[i % n])
        samples = []
        for _ in range(iters):
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
        for _ in range(max(warmup // n, 2)):
            step()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
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
        try:
            import subprocess  # noqa: PLC0415

            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(device.index or 0)],
                capture_output=True, text=True, timeout=20, check=False).stdout.strip()
        except (OSError, ValueError, subprocess.TimeoutExpired):  # a hung nvidia-smi costs 20 s, never the sweep
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


def run_sweep(cfg: dict[str, Any], save: Callable[[dict[str, Any]], None] = lambda r: None) -> dict[str, Any]:
    torch = _torch()
    t_start = time.monotonic()
    s = validate(cfg["shape"], cfg["batch_sizes"], cfg["backend"])
    want_cuda = cfg.get("device", 0) is not None and cfg.get("device_type", "auto") != "cpu"
    cuda = want_cuda and torch.cuda.is_available()
    device = torch.device("cuda", int(cfg.get("device", 0))) if cuda else torch.device("cpu")
    backend = cfg["backend"]
    if backend == "auto":
        ok, why = sglang_available()
        if not ok:
            raise RuntimeError("backend auto: sglang is not importable here (%s); install sglang in this "
                               "Python, or choose backend torch" % why)
        backend = "sglang"
    if backend == "sglang" and not cuda:
        raise RuntimeError("backend sglang needs a CUDA GPU; none is visible to torch %s here" % torch.__version__)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[cfg.get("dtype", "bf16")]
    routings_n = int(cfg.get("routings", 8))
    sizes = sorted({int(m) for m in cfg["batch_sizes"]})
    estimate = estimate_peak_bytes(s, sizes, backend, routings_n)
    if cuda:
        free, _total = torch.cuda.mem_get_info(device)
        if estimate > free:
            raise RuntimeError("not enough free GPU memory on device %d: the sweep needs about %.2f GiB, %.2f GiB "
                               "free; stop the service (allow_stop) or shrink batch_sizes/tp_size"
                               % (device.index, estimate / GIB, free / GIB))
        torch.cuda.reset_peak_memory_stats(device)
    result: dict[str, Any] = {
        "status": "running", "backend": backend, "shape": s, "tp_size": int(cfg["shape"].get("tp_size", 1)),
        "dtype": cfg.get("dtype", "bf16"), "ran_on": "gpu" if cuda else "cpu", "points": [],
        "estimate_peak_gib": round(estimate / GIB, 3), "environment": environment(torch, device),
        "seed": int(cfg.get("seed", 0)), "routings": routings_n,
    }
    if not cuda:
        result["note"] = "ran on the CPU: no CUDA device is visible; times are not GPU kernel times"
    bw = copy_bandwidth(torch, device) if cuda else 0.0
    result["copy_bandwidth_gbs"] = round(bw / 1e9, 1)
    save(result)

    t_prep = time.monotonic()
    weights = Weights(torch, s, device, dtype, int(cfg.get("seed", 0)))
    kernel = SglangKernel(torch, weights) if backend == "sglang" else TorchKernel(torch, weights, dtype)
    result["prepare_s"] = round(time.monotonic() - t_prep, 2)
    result["impl"] = kernel.impl
    use_graph = cuda and cfg.get("cuda_graph", True) and kernel.graph_safe
    gen = torch.Generator(device=device).manual_seed(int(cfg.get("seed", 0)) + 1)
    bytes_per_el = 2
    for m in sizes:
        x = torch.randn((m, s["K"]), generator=gen, device=device).to(dtype if cuda else torch.float32)
        routings = make_routings(torch, s, m, routings_n, device, gen)
        touched = sum(len(torch.unique(ids)) for _w, ids in routings) / routings_n
        samples = time_point(torch, kernel, x, routings, device, int(cfg.get("warmup", 5)),
                             int(cfg.get("iters", 20)), use_graph)
        ms = median(samples)
        cost = point_cost(s, m, touched, bytes_per_el)
        floor_ms = cost["bytes"] / bw * 1000 if bw else None
        result["points"].append({
            "m": m, "ms": round(ms, 5), "ms_min": round(min(samples), 5), "ms_max": round(max(samples), 5),
            "us_per_token": round(ms * 1000 / m, 4), "experts_touched": round(touched, 2),
            "bytes_moved": int(cost["bytes"]), "gbs": round(cost["bytes"] / (ms / 1000) / 1e9, 1),
            "tflops": round(cost["flops"] / (ms / 1000) / 1e12, 3),
            "floor_ms": round(floor_ms, 5) if floor_ms else None,
            "efficiency": round(floor_ms / ms, 4) if floor_ms else None,
        })
        save(result)
    if cuda:
        result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 3)
        result["estimate_error"] = round(result["peak_memory_gib"] / result["estimate_peak_gib"] - 1, 4)
    del kernel, weights
    if cuda:
        torch.cuda.empty_cache()
    if backend == "sglang" and cfg.get("check", True):
        result["check"] = reference_check(torch, s, device, dtype, int(cfg.get("seed", 0)))
    result.update(knee(result["points"], s["E"]))
    result["status"] = "complete"
    result["wall_s"] = round(time.monotonic() - t_start, 2)
    save(result)
    return result


def _write_atomic(path: str, data: dict[str, Any]) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main() -> int:
    cfg = json.load(sys.stdin)
    output: str | None = cfg.get("output")
    save: Callable[[dict[str, Any]], None] = (lambda r: _write_atomic(output, r)) if output else (lambda r: None)
    try:
        result = run_sweep(cfg, save)
    except Exception as err:
        print(json.dumps({"status": "error", "error": "%s: %s" % (type(err).__name__, err)}))
        return 3
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
