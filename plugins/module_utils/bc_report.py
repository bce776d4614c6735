# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reports of a sweep on the controller: report.md, a log-log PNG, and history.jsonl."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    bands,
    cell,
    merge_reference,
    one_backend_cost,
    series_of,
    sweep_compare,
    sweep_table,
)


def shape_key(result: dict[str, Any]) -> str:
    s = result["shape"]
    return "E%(E)d-K%(K)d-N%(N)d-top%(topk)d-g%(group)d-int%(bits)d" % s


def read_history(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a torn line from an interrupted writer is skipped, not fatal
    return out


def previous_run(history: list[dict[str, Any]], host: str, result: dict[str, Any], stamp: str) -> dict[str, Any] | None:
    """The last earlier run of the same host, shape, primary backend, device kind and first routing
    (a line written before routings were named was uniform): what the report compares with."""
    key = (host, shape_key(result), result["backend"], result.get("ran_on"), series_of(result)[0]["routing"])
    same = [h for h in history
            if (h.get("host"), h.get("shape_key"), h.get("backend"), h.get("ran_on"), h.get("routing", "uniform")) == key
            and h.get("stamp") != stamp]
    return same[-1] if same else None


def health_summary(health: dict[str, Any] | None) -> dict[str, Any]:
    """The GPU health readings of the cycle, per phase: healthy, no_gpu (a host declared GPU-less, nothing judged),
    the problems, and per GPU its
    temperature, volatile uncorrectable ECC errors and XIDs (what the history keeps)."""
    out = {}
    for phase, report in sorted((health or {}).items()):
        out[phase] = {"healthy": report.get("healthy"), "no_gpu": report.get("no_gpu") is True, "problems": report.get("problems", []),
                      "gpus": [{k: g.get(k) for k in ("index", "uuid", "temperature_c", "ecc_uncorrectable_volatile", "xid")}
                               for g in report.get("gpus", [])]}
    return out


def history_line(host: str, stamp: str, result: dict[str, Any], report: str,
                 health: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "stamp": stamp, "host": host, "shape_key": shape_key(result), "tp_size": result.get("tp_size"),
        "backend": result["backend"], "ran_on": result.get("ran_on"), "gpu": result.get("environment", {}).get("gpu"),
        "knee_m": result.get("knee_m"), "plateau_ms": result.get("plateau_ms"),
        "points": [{"m": p["m"], "ms": p["ms"]} for p in result["points"]], "report": report,
        "routing": series_of(result)[0]["routing"],
        "series": [{"backend": r["backend"], "routing": r["routing"], "points": [{"m": p["m"], "ms": p["ms"]} for p in r["points"]]}
                   for r in series_of(result)],
        "gpu_health": health_summary(health),
        # the tuned Triton's configs with the result they gave (the file can be made again from the history)
        "tuned": {b["name"]: {k: b["tuning"].get(k) for k in ("configs", "file", "sizes", "speedup", "configs_tried")}
                  for b in result.get("backends") or [] if b.get("tuning")},
    }


def plot(path: str, title: str, result: dict[str, Any]) -> None:
    """Log-log time and per-token cost vs M: every backend under every routing (one color per
    backend, one line style per routing), with both floors of the first routing and the knee."""
    import matplotlib  # noqa: PLC0415 - the controller's plotting dependency, loaded only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.2))
    runs = series_of(result)
    backends = list(dict.fromkeys(r["backend"] for r in runs))
    routings = list(dict.fromkeys(r["routing"] for r in runs))
    styles = ["o-", "s--", "^:", "d-."]
    for run in runs:
        pts = sorted(run["points"], key=lambda p: p["m"])
        ms = [p["m"] for p in pts]
        color = "C%d" % backends.index(run["backend"])
        style = styles[routings.index(run["routing"]) % len(styles)]
        label = "%s, %s" % (run["backend"], run["routing"])
        ax1.loglog(ms, [p["ms"] for p in pts], style, color=color, label=label, markersize=4)
        ax2.loglog(ms, [p["ms"] * 1000 / p["m"] for p in pts], style, color=color, label=label, markersize=4)
    first = sorted(runs[0]["points"], key=lambda p: p["m"])
    for key, label, style in (("floor_bytes_ms", "INT4 bytes / copy bandwidth", "k--"),
                              ("floor_flops_ms", "FLOPs / dense bf16 throughput", "k:")):
        if first and all(p.get(key) for p in first):
            ax1.loglog([p["m"] for p in first], [p[key] for p in first], style, label=label)
            ax2.loglog([p["m"] for p in first], [p[key] * 1000 / p["m"] for p in first], style, label=label)
    if first and all(p.get("floor_ms") for p in first) and not any(p.get("floor_bytes_ms") for p in first):
        ax1.loglog([p["m"] for p in first], [p["floor_ms"] for p in first], "k--", label="weight-streaming floor")
        ax2.loglog([p["m"] for p in first], [p["floor_ms"] * 1000 / p["m"] for p in first], "k--", label="floor")
    marks = ((result.get("knee_m"), "tab:red", "knee M=%s"), (result.get("bound_knee_m"), "tab:purple", "compute bound from M=%s"))
    for m, color, label in marks:
        if m:
            for ax in (ax1, ax2):
                ax.axvline(m, color=color, alpha=0.5, linestyle="-.", label=label % m)
    ax1.set(xlabel="tokens M", ylabel="ms per MoE layer call", title="time vs M")
    ax2.set(xlabel="tokens M", ylabel="us per token", title="per-token cost vs M")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def side_by_side(result: dict[str, Any]) -> list[str]:
    """Per routing: each M with the floor (and its bound) and every backend's time and its ratio to
    the floor, the fastest in bold."""
    runs = series_of(result)
    backends = list(dict.fromkeys(r["backend"] for r in runs))
    if len(runs) < 2:
        return []
    lines = []
    for routing in dict.fromkeys(r["routing"] for r in runs):
        by = {r["backend"]: {p["m"]: p for p in r["points"]} for r in runs if r["routing"] == routing}
        ref = next(iter(by.values()))
        lines += ["", "### Routing %s" % routing, "",
                  "| M | experts | floor ms | bound | " + " | ".join("%s ms | x floor" % b for b in backends) + " | fastest |",
                  "|---:|---:|---:|---|" + "---:|---:|" * len(backends) + "---|"]
        for m in sorted(ref):
            cells = [(b, by.get(b, {}).get(m)) for b in backends]
            timed = [(b, p["ms"]) for b, p in cells if p]
            best = min(timed, key=lambda bm: bm[1])[0] if timed else "-"
            row = [str(m), cell(ref[m].get("experts_touched")), cell(ref[m].get("floor_ms")), ref[m].get("bound") or "-"]
            for b, p in cells:
                ms = cell(p["ms"]) if p else "-"
                row += ["**%s**" % ms if b == best else ms,
                        cell(round(p["ms"] / p["floor_ms"], 3)) if p and p.get("floor_ms") else "-"]
            lines.append("| " + " | ".join([*row, best]) + " |")
    return lines


def what_to_run(result: dict[str, Any]) -> list[str]:
    """The fastest backend per M band (per routing) and what one backend for every M costs, for this
    tensor-parallel shape; the tuned Triton's tuning beside it."""
    rows = result.get("winners") or []
    if not rows:
        return []
    lines = ["", "## What to run at tp_size %s" % result.get("tp_size"), "", "| routing | M | fastest |", "|---|---|---|"]
    lines += ["| %s | %s | %s |" % (b["routing"], b["from_m"] if b["from_m"] == b["to_m"] else "%d-%d" % (b["from_m"], b["to_m"]),
                                    b["fastest"]) for b in bands(rows)]
    lines += ["", "One backend for every M (the server's --moe-runner-backend is one choice): its time over the fastest's",
              "", "| backend | geometric mean | worst | at | points |", "|---|---:|---:|---|---:|"]
    lines += ["| %s | %s | %s | %s | %d of %d |" % (c["backend"], c["mean_x_fastest"], c["worst_x_fastest"], c["worst_at"],
                                                    c["rows"], c["of"]) for c in one_backend_cost(rows)]
    for b in result.get("backends") or []:
        t = b.get("tuning")
        if t:
            lines += ["", "%s: %d configs of %d timed (%d could not build here) in %s s (budget %s s) at M=%s, on %s routing; the tuned "
                      "config over the server's own, in the tuning's timing (the worst over the routings; x1.0: the "
                      "server's config kept): %s; written as %s (read back by SGLang's "
                      "loader: %s), for SGLANG_MOE_CONFIG_DIR=%s" % (
                          b["name"], t["configs_tried"], t["space"], t["configs_failed"], t["spent_s"], t["budget_s"],
                          ",".join(map(str, t["sizes"])), " and ".join(t.get("routing") or ["uniform"]),
                          ", ".join("M=%s x%s" % kv for kv in sorted(t.get("speedup", {}).items(), key=lambda kv: int(kv[0]))),
                          t.get("path") or t.get("file"), "yes" if t.get("loader_read_back") else "no", t.get("config_dir"))]
    return lines


def render(host: str, stamp: str, primary: dict[str, Any], previous: dict[str, Any] | None, png_name: str,
           health: dict[str, Any] | None = None) -> str:
    env = primary.get("environment", {})
    s = primary["shape"]
    runs = series_of(primary)
    table_src = dict(primary)
    reference = next((r for r in runs if r["backend"] == "torch" and r["routing"] == runs[0]["routing"]), None)
    if reference and primary["backend"] != "torch":
        table_src["points"] = merge_reference(primary["points"], reference["points"])
    backends = primary.get("backends") or [{"name": primary["backend"], "status": "measured", "impl": primary.get("impl", "")}]
    lines = [
        "# Marlin MoE sweep: %s, %s" % (host, stamp), "",
        "- shape: %d experts, hidden %d, intermediate/GPU %d (tp_size %s), top-%d, group %d, INT%d, %s"
        % (s["E"], s["K"], s["N"], primary.get("tp_size"), s["topk"], s["group"], s["bits"], primary.get("dtype")),
        "- backends: %s; ran on %s: %s" % ("; ".join(
            "%s (%s)" % (b["name"], b.get("impl") or "not timed: %s" % b.get("why", "")) for b in backends),
            primary.get("ran_on"), env.get("gpu") or env.get("cpu")),
        "- routing: %s" % ", ".join(dict.fromkeys(r["routing"] for r in runs)),
        "- versions: torch %s, sglang %s, python %s, driver %s" % (
            env.get("torch"), env.get("sglang"), env.get("python"), env.get("driver", "-")),
        "- knee (%s, %s): M=%s; plateau %.4f ms at M=%s" % (
            primary["backend"], runs[0]["routing"], primary.get("knee_m"), primary.get("plateau_ms") or 0, primary.get("plateau_m")),
        "- measured in this run: copy bandwidth %s GB/s, dense bf16 %s TFLOP/s; the floor is compute bound from M=%s"
        % (primary.get("copy_bandwidth_gbs") or "-", primary.get("dense_tflops") or "-", primary.get("bound_knee_m") or "-"),
        "- peak memory: %s GiB (preflight estimate %s GiB)" % (primary.get("peak_memory_gib", "-"), primary.get("estimate_peak_gib")),
        "- weight preparation %s s, whole sweep %s s" % (primary.get("prepare_s"), primary.get("wall_s")),
    ]
    for b in backends:
        if b.get("check"):
            c = b["check"]
            lines.append("- correctness of %s: relative error %.4f vs fp32 reference (%s experts, M=%s; bound %s)%s%s"
                         % (b["name"], c["relative_error"], c.get("experts", "-"), c.get("m", "-"), c.get("bound", "-"),
                            "; partial M tiles checked too" if c.get("partial_tiles_checked") else "",
                            "; the check could not run: %s" % c["error"] if c.get("error") else ""))
    if not primary.get("backends") and primary.get("check"):
        lines.append("- correctness: relative error %.4f vs fp32 reference (%d experts, M=%d)"
                     % (primary["check"]["relative_error"], primary["check"]["experts"], primary["check"]["m"]))
    if primary.get("note"):
        lines.append("- note: " + primary["note"])
    lines += ["", "## %s, %s routing" % (primary["backend"], runs[0]["routing"]), "", sweep_table(table_src), "",
              "![sweep](%s)" % png_name]
    side = side_by_side(primary)
    if side:
        lines += ["", "## Kernels side by side (x floor: time / roofline floor; 1.0 is the floor)", *side]
        lines += what_to_run(primary)
    lines.append("")
    if previous:
        cmp_rows = sweep_compare(primary["points"], previous["points"])
        lines += ["## Against the previous run (%s)" % previous["stamp"], "",
                  "| M | now ms | then ms | now/then |", "|---:|---:|---:|---:|"]
        lines += ["| %d | %.4f | %.4f | %.3f |" % (r["m"], r["current"], r["previous"], r["ratio"]) for r in cmp_rows]
    else:
        lines += ["No earlier run of this host and shape to compare with."]
    summary = health_summary(health)
    if summary:
        lines += ["", "## GPU health", "", "| check | healthy | GPU | temperature C | uncorrectable ECC | XIDs | problems |",
                  "|---|---|---:|---:|---:|---|---|"]
        for phase, report in summary.items():
            for gpu in report["gpus"] or [{}]:
                lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    phase, "no GPU (none expected)" if report["no_gpu"] else "yes" if report["healthy"] else "**NO**",
                    gpu.get("index", "-"), gpu.get("temperature_c", "-"),
                    gpu.get("ecc_uncorrectable_volatile", "-"), ",".join(map(str, gpu.get("xid") or [])) or "-",
                    "; ".join(report["problems"]).replace("|", "/") or "-"))
    return "\n".join(lines) + "\n"
