# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure arithmetic of a MoE GEMM sweep: shapes, bytes, FLOPs, memory estimate, knee, plateau.

Standard library only: the module, the filter plugins and the benchmark scripts share it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MARLIN_GROUP_SIZES = (-1, 32, 64, 128)
GIB = 1024 ** 3


class ShapeError(ValueError):
    """A sweep parameter the kernel cannot take; the message names the field and the fix."""


def shard(shape: dict[str, Any]) -> dict[str, int]:
    """Per-GPU shape: tensor parallelism splits the intermediate size."""
    tp = int(shape.get("tp_size", 1))
    inter = int(shape["intermediate_size"])
    if tp < 1:
        raise ShapeError("tp_size must be >= 1, got %d" % tp)
    if inter < 1:
        raise ShapeError("intermediate_size must be >= 1, got %d" % inter)
    group = int(shape["group_size"])
    if group != -1 and group < 1:
        raise ShapeError("group_size must be -1 (per channel) or >= 1, got %d" % group)
    if inter % tp:
        raise ShapeError("intermediate_size %d is not divisible by tp_size %d" % (inter, tp))
    return {
        "E": int(shape["num_experts"]), "K": int(shape["hidden_size"]), "N": inter // tp,
        "topk": int(shape["top_k"]), "group": int(shape["group_size"]), "bits": int(shape.get("num_bits", 4)),
    }


def validate(shape: dict[str, Any], batch_sizes: Iterable[int], backend: str) -> dict[str, int]:
    """Check a sweep before anything is allocated. Returns the per-GPU shape."""
    s = shard(shape)
    for field, key in (("num_experts", "E"), ("hidden_size", "K"), ("top_k", "topk")):
        if s[key] < 1:
            raise ShapeError("%s must be >= 1, got %d" % (field, s[key]))
    if s["topk"] > s["E"]:
        raise ShapeError("top_k %d exceeds num_experts %d: a token cannot pick more experts than exist"
                         % (s["topk"], s["E"]))
    if s["bits"] not in (4, 8):
        raise ShapeError("num_bits must be 4 or 8, got %d" % s["bits"])
    sizes = list(batch_sizes)
    if not sizes:
        raise ShapeError("batch_sizes is empty: give token counts such as [1, 2, 4, ..., 1024]")
    bad = [m for m in sizes if int(m) < 1]
    if bad:
        raise ShapeError("batch_sizes must be positive integers, got %s" % bad)
    if backend in ("sglang", "auto"):
        if s["group"] not in MARLIN_GROUP_SIZES:
            raise ShapeError("group_size %d is not one the Marlin kernel takes (%s)"
                             % (s["group"], ", ".join(map(str, MARLIN_GROUP_SIZES))))
        if s["K"] % 128:
            raise ShapeError("hidden_size %d must be a multiple of 128 (Marlin tile)" % s["K"])
        if s["N"] % 64:
            raise ShapeError("intermediate_size/tp_size = %d must be a multiple of 64 (Marlin tile)" % s["N"])
    if s["group"] != -1 and (s["K"] % s["group"] or s["N"] % s["group"]):
        raise ShapeError("group_size %d must divide hidden_size %d and intermediate_size/tp_size %d"
                         % (s["group"], s["K"], s["N"]))
    return s


def weight_bytes(s: dict[str, int], experts: float | None = None, dtype_bytes: int = 2) -> float:
    """Bytes of quantized w13 (K x 2N) + w2 (N x K) and their scales for `experts` experts."""
    e = s["E"] if experts is None else experts
    elems = s["K"] * 2 * s["N"] + s["N"] * s["K"]
    packed = elems * s["bits"] / 8
    groups_k = 1 if s["group"] == -1 else s["K"] // s["group"]
    groups_n = 1 if s["group"] == -1 else s["N"] // s["group"]
    scales = (groups_k * 2 * s["N"] + groups_n * s["K"]) * dtype_bytes
    return e * (packed + scales)


def dense_weight_bytes(s: dict[str, int], experts: float | None = None, dtype_bytes: int = 2) -> float:
    e = s["E"] if experts is None else experts
    return e * (s["K"] * 2 * s["N"] + s["N"] * s["K"]) * dtype_bytes


def expected_experts_touched(s: dict[str, int], m: int) -> float:
    """Expected distinct experts hit by m tokens each picking top_k distinct experts uniformly."""
    miss = (1 - s["topk"] / s["E"]) ** m
    return s["E"] * (1 - miss)


def point_cost(s: dict[str, int], m: int, experts_touched: float, dtype_bytes: int = 2) -> dict[str, float]:
    """Bytes the kernel must move (weights of touched experts + activations) and its FLOPs."""
    act = m * s["K"] * dtype_bytes * 2 + m * s["topk"] * (2 * s["N"] + s["N"] + s["K"]) * dtype_bytes
    flops = 2.0 * m * s["topk"] * (s["K"] * 2 * s["N"] + s["N"] * s["K"])
    return {"bytes": weight_bytes(s, experts_touched, dtype_bytes) + act, "flops": flops}


def call_bytes(s: dict[str, int], m: int, dtype_bytes: int = 2) -> float:
    """Device memory of one fused MoE call at m tokens: input, gating scores, the two GEMMs'
    intermediates (SGLang's intermediate_cache13 and cache2), output, routing and sort buffers."""
    E, K, N, topk = s["E"], s["K"], s["N"], s["topk"]
    acts = (m * K * 2 + m * E + m * topk * (max(2 * N, K) + N)) * dtype_bytes
    sort = (m * topk + E * 64) * 4 * 3 + m * topk * 8
    return acts + sort + 4 * 1024 * 1024  # + workspace and allocator rounding


def estimate_peak_bytes(s: dict[str, int], batch_sizes: Iterable[int], backend: str,
                        routings: int = 8, dtype_bytes: int = 2, chunk_experts: int = 8) -> int:
    """Peak device memory of the sweep: resident weights + one chunk being built + the largest
    point's working set (one call's buffers, shared by the per-routing graphs) + the routings.
    The copy-bandwidth probe (1 GiB, 17x the H200's L2) runs before the weights exist."""
    m = max(batch_sizes)
    chunk = min(chunk_experts, s["E"])
    packed = weight_bytes(s, dtype_bytes=dtype_bytes)
    if backend == "torch":
        # dense weights, plus one GPTQ chunk and one expert's fp32 dequantization in flight
        weights = dense_weight_bytes(s, dtype_bytes=dtype_bytes)
        build = weight_bytes(s, chunk, dtype_bytes) + 3 * s["K"] * 2 * s["N"] * 4
        acts = 3 * m * s["topk"] * (2 * s["N"] + s["K"]) * dtype_bytes + call_bytes(s, m, dtype_bytes)
    else:
        weights = packed
        build = 2 * weight_bytes(s, chunk, dtype_bytes)  # a GPTQ chunk and its repacked copy
        acts = call_bytes(s, m, dtype_bytes)
    routing = routings * m * s["topk"] * 8 + m * s["E"] * 4
    context = 64 * 1024 * 1024
    return int(max(GIB, weights + max(build, acts + routing)) + context)


def knee(points: list[dict[str, Any]], num_experts: int | None = None, key: str = "ms",
         tolerance: float = 0.10) -> dict[str, Any]:
    """Plateau and knee of a sweep.

    The plateau is the time once every expert's weights are streamed (the first point whose
    experts_touched reaches 99% of num_experts; the largest M if none does or num_experts is not
    given): the weight-streaming regime. The knee is the smallest M whose time is within
    `tolerance` of the plateau. Returns {knee_m, plateau_m, plateau_ms}; Nones for no points."""
    pts = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["m"])
    if not pts:
        return {"knee_m": None, "plateau_m": None, "plateau_ms": None}
    full = pts[-1]
    if num_experts:
        full = next((p for p in pts if p.get("experts_touched", 0) >= 0.99 * num_experts), pts[-1])
    plateau = full[key]
    knee_m = next(p["m"] for p in pts if abs(p[key] - plateau) <= tolerance * plateau)
    return {"knee_m": knee_m, "plateau_m": full["m"], "plateau_ms": plateau}


def median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    if not n:
        raise ValueError("median of no values")
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def per_token(points: list[dict[str, Any]], key: str = "ms") -> list[dict[str, Any]]:
    """Each point with us_per_token = key(ms) * 1000 / m."""
    out = []
    for p in points:
        if p["m"] < 1:
            raise ValueError("point m=%r: m must be >= 1" % p["m"])
        out.append(dict(p, us_per_token=round(p[key] * 1000.0 / p["m"], 4)))
    return out


def roofline(points: list[dict[str, Any]], bandwidth_gbs: float) -> list[dict[str, Any]]:
    """Each point with floor_ms = bytes_moved / bandwidth and efficiency = floor / measured."""
    if bandwidth_gbs <= 0:
        raise ValueError("bandwidth_gbs must be > 0, got %r" % bandwidth_gbs)
    out = []
    for p in points:
        floor = p["bytes_moved"] / (bandwidth_gbs * 1e9) * 1000
        out.append(dict(p, floor_ms=round(floor, 5), efficiency=round(floor / p["ms"], 4)))
    return out


def sweep_compare(current: list[dict[str, Any]], previous: list[dict[str, Any]], key: str = "ms") -> list[dict[str, Any]]:
    """Per M present in both: current, previous and ratio = current / previous (< 1 is faster)."""
    prev = {p["m"]: p[key] for p in previous}
    return [{"m": p["m"], "current": p[key], "previous": prev[p["m"]], "ratio": round(p[key] / prev[p["m"]], 4)}
            for p in sorted(current, key=lambda q: q["m"]) if p["m"] in prev and prev[p["m"]]]


def _fmt(value: Any) -> str:
    """Table cell: 1 decimal from 100 up, 3 from 1 up, 4 below 1; '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.1f" % value if abs(value) >= 100 else "%.3f" % value if abs(value) >= 1 else "%.4f" % value
    return str(value)


def sweep_table(result: dict[str, Any]) -> str:
    """Markdown table of a sweep result (module output or saved JSON)."""
    head = ["M", "ms (median)", "min", "max", "us/token", "experts", "GB/s", "TFLOP/s", "floor ms", "efficiency"]
    with_ref = any("torch_ms" in p for p in result.get("points", []))
    if with_ref:
        head += ["torch bf16 ms", "INT4 speed-up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for p in sorted(result.get("points", []), key=lambda q: q["m"]):
        row = [p["m"], p["ms"], p["ms_min"], p["ms_max"], p["us_per_token"], p["experts_touched"], p["gbs"],
               p["tflops"], p.get("floor_ms"), p.get("efficiency")]
        if with_ref:
            row +=  [p.get("torch_ms"), p.get("speedup")]
        lines.append("| " + " | ".join(_fmt(v) for v in row) + " |")
    return "\n".join(lines)


def merge_reference(points: list[dict[str, Any]], reference: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points with torch_ms (the bf16 reference at the same M) and speedup = torch_ms / ms."""
    ref = {p["m"]: p["ms"] for p in reference}
    return [dict(p, torch_ms=ref.get(p["m"]), speedup=round(ref[p["m"]] / p["ms"], 3) if p["m"] in ref else None)
            for p in points]
