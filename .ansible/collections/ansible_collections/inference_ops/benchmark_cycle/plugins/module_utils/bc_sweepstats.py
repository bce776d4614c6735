# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure arithmetic of a MoE GEMM sweep: shapes, bytes, FLOPs, memory estimate, knee, plateau.

Standard library only: the module, the filter plugins and the benchmark scripts share it.
"""

from __future__ import annotations

import math
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


# the backends the sweep can time (marlin_sweep's `backends`): SGLang's Marlin MoE, SGLang's Triton
# fused_moe with int4_w4a16 (as the server runs it today, and tuned on this GPU by the sweep: triton_tuned), and the
# dequantized bf16 grouped GEMM; `auto` is sglang
BACKENDS = ("sglang", "triton", "triton_tuned", "torch")
# the backends that stream INT4 words (each holds its own layout of the same values)
INT4_BACKENDS = ("sglang", "triton", "triton_tuned")
TRITON_BACKENDS = ("triton", "triton_tuned")


def backend_list(backends: str | Iterable[str]) -> list[str]:
    """The backends asked for, `auto` read as sglang, each once, in the order given."""
    names = [backends] if isinstance(backends, str) else list(backends)
    out: list[str] = []
    for given in names:
        name = "sglang" if given == "auto" else given
        if name not in BACKENDS:
            raise ShapeError("backend %r is not one of %s (or auto)" % (name, ", ".join(BACKENDS)))
        if name not in out:
            out.append(name)
    if not out:
        raise ShapeError("backends is empty: give one or more of %s" % ", ".join(BACKENDS))
    return out


def validate(shape: dict[str, Any], batch_sizes: Iterable[int], backends: str | Iterable[str]) -> dict[str, int]:
    """Check a sweep before anything is allocated. Returns the per-GPU shape."""
    s = shard(shape)
    chosen = backend_list(backends)
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
    if "sglang" in chosen:
        if s["group"] not in MARLIN_GROUP_SIZES:
            raise ShapeError("group_size %d is not one the Marlin kernel takes (%s)"
                             % (s["group"], ", ".join(map(str, MARLIN_GROUP_SIZES))))
        if s["K"] % 128:
            raise ShapeError("hidden_size %d must be a multiple of 128 (Marlin tile)" % s["K"])
        if s["N"] % 64:
            raise ShapeError("intermediate_size/tp_size = %d must be a multiple of 64 (Marlin tile)" % s["N"])
    for name in (b for b in chosen if b in TRITON_BACKENDS):
        if s["bits"] != 4 or s["group"] < 1:
            raise ShapeError("backend %s runs SGLang's fused_moe int4_w4a16: it needs num_bits 4 and a group_size "
                             ">= 1 (got num_bits %d, group_size %d); drop %s from backends" % (name, s["bits"], s["group"], name))
    if s["group"] != -1 and (s["K"] % s["group"] or s["N"] % s["group"]):
        raise ShapeError("group_size %d must divide hidden_size %d and intermediate_size/tp_size %d"
                         % (s["group"], s["K"], s["N"]))
    return s


ROUTING_KINDS = ("uniform", "zipf", "hot", "replay")


def routing_spec(spec: dict[str, Any], s: dict[str, int], field: str = "routing") -> dict[str, Any]:
    """One routing distribution, checked and named (the name goes into the result and the report):
      uniform              every token picks top_k distinct experts uniformly (the default)
      zipf, skew           expert popularity ~ 1/rank**skew (ranks a seeded permutation of the experts)
      hot, fraction, experts   a fraction of the tokens pick only among a few hot experts
      replay, file         recorded top-k expert ids (e.g. captured from the real server), in windows
    Errors name the field and the fix."""
    kind = spec.get("kind") or "uniform"
    if kind not in ROUTING_KINDS:
        raise ShapeError("%s kind=%r: use one of %s" % (field, kind, ", ".join(ROUTING_KINDS)))
    if kind == "uniform":
        return {"kind": kind, "name": "uniform"}
    if kind == "zipf":
        skew = float(spec.get("skew") if spec.get("skew") is not None else 1.0)
        if not 0 < skew <= 10:
            raise ShapeError("%s zipf skew=%s: give a skew above 0 and at most 10 (1.0 is classic Zipf)" % (field, skew))
        return {"kind": kind, "skew": skew, "name": "zipf(%g)" % skew}
    if kind == "hot":
        fraction = float(spec.get("fraction") if spec.get("fraction") is not None else 0.5)
        if spec.get("experts") is not None and int(spec["experts"]) < 1:
            raise ShapeError("%s hot experts=%s: give from top_k (%d) to num_experts (%d) hot experts"
                             % (field, spec["experts"], s["topk"], s["E"]))
        experts = int(spec["experts"]) if spec.get("experts") is not None else min(2 * s["topk"], s["E"])
        if not 0 < fraction <= 1:
            raise ShapeError("%s hot fraction=%s: give the share of tokens sent to the hot experts, above 0 and at most 1"
                             % (field, fraction))
        if not s["topk"] <= experts <= s["E"]:
            raise ShapeError("%s hot experts=%d: give from top_k (%d) to num_experts (%d) hot experts"
                             % (field, experts, s["topk"], s["E"]))
        return {"kind": kind, "fraction": fraction, "experts": experts, "name": "hot(%g of tokens to %d)" % (fraction, experts)}
    path = spec.get("file")
    if not path:
        raise ShapeError("%s replay needs file: a JSON file of recorded top-k expert ids, [[e0, .., e%d], ...]"
                         % (field, s["topk"] - 1))
    return {"kind": kind, "file": str(path), "name": "replay(%s)" % str(path).rsplit("/", 1)[-1]}


def routing_specs(specs: list[dict[str, Any]], s: dict[str, int], field: str = "routing") -> list[dict[str, Any]]:
    """Every distribution checked (routing_spec); two with the same name (two replay files of one
    basename, the same zipf twice) would overwrite each other's numbers, so a repeat is refused."""
    out = [routing_spec(r, s, "%s[%d]" % (field, i)) for i, r in enumerate(specs or [{"kind": "uniform"}])]
    names = [r["name"] for r in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ShapeError("%s names %s twice: each distribution once (rename a replay file, or drop the repeat)"
                         % (field, ", ".join(repeated)))
    return out


def replay_ids(data: Any, s: dict[str, int], path: str) -> list[list[int]]:
    """Recorded top-k ids from a replay file's JSON: a list of rows, or {"topk_ids": rows}; each row
    top_k distinct expert ids in 0..num_experts-1. Errors name the file, the row and the fix."""
    rows = data.get("topk_ids") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not rows:
        raise ShapeError("replay file %s holds no rows: give [[e0, ..], ..] or {\"topk_ids\": [[..], ..]}" % path)
    for i, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != s["topk"] or len(set(row)) != len(row)
                or not all(isinstance(e, int) and not isinstance(e, bool) and 0 <= e < s["E"] for e in row)):
            raise ShapeError("replay file %s row %d is %s: each row must be top_k=%d distinct expert ids from 0 to %d "
                             "(record it with the same model's expert count)" % (path, i, str(row)[:60], s["topk"], s["E"] - 1))
    return rows


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


def point_cost(s: dict[str, int], m: int, experts_touched: float, dtype_bytes: int = 2,
               backend: str = "sglang") -> dict[str, float]:
    """Bytes the kernel must move (weights of touched experts, in the backend's own format, plus
    activations) and its FLOPs. The INT4 backends stream packed words and scales, torch bf16."""
    act = m * s["K"] * dtype_bytes * 2 + m * s["topk"] * (2 * s["N"] + s["N"] + s["K"]) * dtype_bytes
    flops = 2.0 * m * s["topk"] * (s["K"] * 2 * s["N"] + s["N"] * s["K"])
    weights = dense_weight_bytes(s, experts_touched, dtype_bytes) if backend == "torch" else weight_bytes(s, experts_touched, dtype_bytes)
    return {"bytes": weights + act, "flops": flops}


def floors(s: dict[str, int], m: int, experts_touched: float, bandwidth: float, tensor_flops: float,
           dtype_bytes: int = 2) -> dict[str, Any]:
    """The roofline floor of one point for INT4 weights: the time to stream the touched experts'
    INT4 words and scales plus the activations at the measured copy bandwidth (bytes/s), and the
    time of the FLOPs at the measured dense bf16 tensor throughput (FLOP/s); the floor is the larger,
    and `bound` says which. Either rate 0 (not measured: no GPU) gives Nones."""
    if bandwidth <= 0 or tensor_flops <= 0:
        return {"floor_bytes_ms": None, "floor_flops_ms": None, "floor_ms": None, "bound": None}
    cost = point_cost(s, m, experts_touched, dtype_bytes)
    by_bytes, by_flops = cost["bytes"] / bandwidth * 1000, cost["flops"] / tensor_flops * 1000
    return {"floor_bytes_ms": round(by_bytes, 5), "floor_flops_ms": round(by_flops, 5),
            "floor_ms": round(max(by_bytes, by_flops), 5), "bound": "compute" if by_flops > by_bytes else "memory"}


def bound_knee(points: list[dict[str, Any]]) -> int | None:
    """The smallest M from which the floor is compute bound (FLOPs, not bytes), None if never."""
    return next((p["m"] for p in sorted(points, key=lambda q: q["m"]) if p.get("bound") == "compute"), None)


def winners(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per routing and M: the fastest backend, its time, and every backend's time and ratio to the
    floor (ms / floor_ms: 1.0 is at the floor). `series` are the sweep's {backend, routing, points}."""
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for run in series:
        for p in run["points"]:
            row = table.setdefault((run["routing"], p["m"]), {"routing": run["routing"], "m": p["m"], "backends": {}})
            row["backends"][run["backend"]] = {
                "ms": p["ms"], "to_floor": round(p["ms"] / p["floor_ms"], 3) if p.get("floor_ms") else None}
    out = []
    for (_routing, _m), row in sorted(table.items(), key=lambda kv: (kv[0][0] != series[0]["routing"], kv[0])):
        best = min(row["backends"].items(), key=lambda kv: kv[1]["ms"])
        out.append(dict(row, fastest=best[0], fastest_ms=best[1]["ms"]))
    return out


def bands(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per routing, the M bands over which one backend is fastest: contiguous runs of `winners` rows (sorted by M)
    with the same `fastest`, as {routing, from_m, to_m, fastest, sizes}."""
    out: list[dict[str, Any]] = []
    for row in sorted(rows, key=lambda r: (r["routing"], r["m"])):
        last = out[-1] if out else None
        if last and last["routing"] == row["routing"] and last["fastest"] == row["fastest"]:
            last.update(to_m=row["m"], sizes=last["sizes"] + 1)
        else:
            out.append({"routing": row["routing"], "from_m": row["m"], "to_m": row["m"], "fastest": row["fastest"], "sizes": 1})
    return out


def one_backend_cost(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What choosing one backend for every M costs (the server's --moe-runner-backend is one choice): per backend,
    over every (routing, M) it was timed at, the geometric mean and the worst of its time over the fastest's, and
    where the worst is; the cheapest first. A backend missing at some rows says how many it covers."""
    ratios: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for row in rows:
        for name, timing in row["backends"].items():
            if row.get("fastest_ms") and timing.get("ms"):
                ratios.setdefault(name, []).append((timing["ms"] / row["fastest_ms"], row))
    out = []
    for name, got in ratios.items():
        worst, at = max(got, key=lambda x: x[0])
        geo = math.exp(sum(math.log(r) for r, _row in got) / len(got))
        out.append({"backend": name, "mean_x_fastest": round(geo, 3), "worst_x_fastest": round(worst, 3),
                    "worst_at": "%s M=%d" % (at["routing"], at["m"]), "rows": len(got), "of": len(rows)})
    return sorted(out, key=lambda c: (c["of"] - c["rows"], c["mean_x_fastest"]))


def call_bytes(s: dict[str, int], m: int, dtype_bytes: int = 2) -> float:
    """Device memory of one fused MoE call at m tokens: input, gating scores, the two GEMMs'
    intermediates (SGLang's intermediate_cache13 and cache2), output, routing and sort buffers."""
    E, K, N, topk = s["E"], s["K"], s["N"], s["topk"]
    acts = (m * K * 2 + m * E + m * topk * (max(2 * N, K) + N)) * dtype_bytes
    sort = (m * topk + E * 64) * 4 * 3 + m * topk * 8
    return acts + sort + 4 * 1024 * 1024  # + workspace and allocator rounding


def triton_call_bytes(s: dict[str, int], m: int, dtype_bytes: int = 2) -> float:
    """What SGLang's Triton path keeps beyond call_bytes at m tokens: the down-projection output per (token, expert),
    and the input copy (its in-place call)."""
    return (m * s["topk"] * s["K"] + m * s["K"]) * dtype_bytes


def resident_bytes(s: dict[str, int], backend: str, dtype_bytes: int = 2) -> float:
    """Weights a backend keeps on the device for the whole sweep: each INT4 backend its own layout
    of the packed words and scales (the same size), torch the dequantized bf16 matrices."""
    return dense_weight_bytes(s, dtype_bytes=dtype_bytes) if backend == "torch" else weight_bytes(s, dtype_bytes=dtype_bytes)


def build_bytes(s: dict[str, int], backend: str, dtype_bytes: int = 2, chunk_experts: int = 8) -> float:
    """Transient memory while a backend's weights are built: one GPTQ chunk of experts and its
    repacked copy (INT4), or one GPTQ chunk and one expert's fp32 dequantization (torch)."""
    chunk = min(chunk_experts, s["E"])
    if backend == "torch":
        return weight_bytes(s, chunk, dtype_bytes) + 3 * s["K"] * 2 * s["N"] * 4
    return 2 * weight_bytes(s, chunk, dtype_bytes)


def estimate_peak_bytes(s: dict[str, int], batch_sizes: Iterable[int], backends: str | Iterable[str],
                        routings: int = 8, dtype_bytes: int = 2, chunk_experts: int = 8) -> int:
    """Peak device memory of the sweep: the resident weights of every backend (all are built before
    the first point, so that each M is timed back to back on the same inputs) + the larger of the
    last build and the largest point's working set (one call's buffers, shared by the per-routing
    graphs; torch's grouped GEMM also holds its gathered inputs) + the routings. The copy-bandwidth
    and tensor-throughput probes run before the weights exist."""
    chosen = backend_list(backends)
    m = max(batch_sizes)
    weights = sum(resident_bytes(s, b, dtype_bytes) for b in chosen)
    build = max(build_bytes(s, b, dtype_bytes, chunk_experts) for b in chosen)
    acts = call_bytes(s, m, dtype_bytes)
    if set(chosen) & set(TRITON_BACKENDS):
        acts += triton_call_bytes(s, m, dtype_bytes)
    if "torch" in chosen:  # gathered inputs, both GEMMs' outputs, and the fp32 copy of the weighted output
        acts += 3 * m * s["topk"] * (2 * s["N"] + s["K"]) * dtype_bytes + m * s["topk"] * s["K"] * 2
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


def series_compare(current: list[dict[str, Any]], previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (backend, routing) present in both runs: the per-M comparison (sweep_compare) and the
    worst deviation |ratio - 1| (a run-to-run fidelity figure)."""
    prev = {(r["backend"], r["routing"]): r for r in previous}
    out = []
    for run in current:
        old = prev.get((run["backend"], run["routing"]))
        if old:
            rows = sweep_compare(run["points"], old["points"])
            out.append({"backend": run["backend"], "routing": run["routing"], "rows": rows,
                        "worst": round(max((abs(r["ratio"] - 1) for r in rows), default=0.0), 4)})
    return out


def series_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every (backend, routing) series of a result; a result of one backend (before multi-backend
    sweeps) is one uniform series."""
    if result.get("series"):
        return result["series"]
    return [{"backend": result["backend"], "routing": "uniform", "impl": result.get("impl", ""), "points": result["points"]}]


def ratios(series: list[dict[str, Any]], axis: str, baseline: str) -> list[dict[str, Any]]:
    """Within one run, along `axis` ("backend" or "routing"): per M and the other axis's value, each
    series' time over the `baseline` series' (above 1 is slower)."""
    other = "routing" if axis == "backend" else "backend"
    base = {(r[other], p["m"]): p["ms"] for r in series if r[axis] == baseline for p in r["points"]}
    return [{"routing": r["routing"], "backend": r["backend"], "m": p["m"], "ms": p["ms"],
             "ratio": round(p["ms"] / base[(r[other], p["m"])], 4)}
            for r in series if r[axis] != baseline for p in r["points"] if base.get((r[other], p["m"]))]


def cell(value: Any) -> str:
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
            row += [p.get("torch_ms"), p.get("speedup")]
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def merge_reference(points: list[dict[str, Any]], reference: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points with torch_ms (the bf16 reference at the same M) and speedup = torch_ms / ms."""
    ref = {p["m"]: p["ms"] for p in reference}
    return [dict(p, torch_ms=ref.get(p["m"]), speedup=round(ref[p["m"]] / p["ms"], 3) if p["m"] in ref else None)
            for p in points]
