# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reports of a sweep on the controller: report.md, a log-log PNG, and history.jsonl."""

from __future__ import annotations

import json
import os
from typing import Any

from ansible.module_utils.bc_sweepstats import merge_reference, sweep_compare, sweep_table


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
    key = (host, shape_key(result), result["backend"], result.get("ran_on"))
    same = [h for h in history if (h.get("host"), h.get("shape_key"), h.get("backend"), h.get("ran_on")) == key
            and h.get("stamp") != stamp]
    return same[-1] if same else None


def health_summary(health: dict[str, Any] | None) -> dict[str, Any]:
    """The GPU health readings of the cycle, per phase: healthy, the problems, and per GPU its
    temperature, volatile uncorrectable ECC errors and XIDs (what the history keeps)."""
    out = {}
    for phase, report in sorted((health or {}).items()):
        out[phase] = {"healthy": report.get("healthy"), "problems": report.get("problems", []),
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
        "gpu_health": health_summary(health),
    }


def plot(path: str, title: str, primary: dict[str, Any], reference: dict[str, Any] | None) -> None:
    import matplotlib  # noqa: PLC0415 - the controller's plotting dependency, loaded only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    pts = sorted(primary["points"], key=lambda p: p["m"])
    ms = [p["m"] for p in pts]
    label = "%s (%s)" % (primary["backend"], primary.get("impl", ""))
    ax1.loglog(ms, [p["ms"] for p in pts], "o-", label=label)
    ax2.loglog(ms, [p["us_per_token"] for p in pts], "o-", label=label)
    if all(p.get("floor_ms") for p in pts):
        ax1.loglog(ms, [p["floor_ms"] for p in pts], "k--", label="weight-streaming floor")
        ax2.loglog(ms, [p["floor_ms"] * 1000 / p["m"] for p in pts], "k--", label="floor")
    if reference:
        rp = sorted(reference["points"], key=lambda p: p["m"])
        ax1.loglog([p["m"] for p in rp], [p["ms"] for p in rp], "s:", label="torch %s reference" % reference.get("dtype", ""))
        ax2.loglog([p["m"] for p in rp], [p["us_per_token"] for p in rp], "s:", label="torch reference")
    if primary.get("knee_m"):
        for ax in (ax1, ax2):
            ax.axvline(primary["knee_m"], color="tab:red", alpha=0.5, linestyle="-.", label="knee M=%d" % primary["knee_m"])
    ax1.set(xlabel="tokens M", ylabel="ms per MoE layer call", title="time vs M")
    ax2.set(xlabel="tokens M", ylabel="us per token", title="per-token cost vs M")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(host: str, stamp: str, primary: dict[str, Any], reference: dict[str, Any] | None,
           previous: dict[str, Any] | None, png_name: str, health: dict[str, Any] | None = None) -> str:
    env = primary.get("environment", {})
    s = primary["shape"]
    table_src = dict(primary)
    if reference:
        table_src["points"] = merge_reference(primary["points"], reference["points"])
    lines = [
        "# Marlin MoE sweep: %s, %s" % (host, stamp), "",
        "- shape: %d experts, hidden %d, intermediate/GPU %d (tp_size %s), top-%d, group %d, INT%d, %s"
        % (s["E"], s["K"], s["N"], primary.get("tp_size"), s["topk"], s["group"], s["bits"], primary.get("dtype")),
        "- backend: %s (%s), ran on %s: %s" % (primary["backend"], primary.get("impl", ""), primary.get("ran_on"),
                                              env.get("gpu") or env.get("cpu")),
        "- versions: torch %s, sglang %s, python %s, driver %s" % (env.get("torch"), env.get("sglang"), env.get("python"),
                                                                  env.get("driver", "-")),
        "- knee: M=%s; plateau %.4f ms at M=%s" % (primary.get("knee_m"), primary.get("plateau_ms") or 0, primary.get("plateau_m")),
        "- copy bandwidth measured in this run: %s GB/s" % (primary.get("copy_bandwidth_gbs") or "-"),
        "- peak memory: %s GiB (preflight estimate %s GiB)" % (primary.get("peak_memory_gib", "-"), primary.get("estimate_peak_gib")),
        "- weight preparation %s s, whole sweep %s s" % (primary.get("prepare_s"), primary.get("wall_s")),
    ]
    if primary.get("check"):
        lines.append("- correctness: relative error %.4f vs fp32 reference (%d experts, M=%d)"
                     % (primary["check"]["relative_error"], primary["check"]["experts"], primary["check"]["m"]))
    if primary.get("note"):
        lines.append("- note: " + primary["note"])
    lines += ["", sweep_table(table_src), "", "![sweep](%s)" % png_name, ""]
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
                    phase, "yes" if report["healthy"] else "**NO**", gpu.get("index", "-"), gpu.get("temperature_c", "-"),
                    gpu.get("ecc_uncorrectable_volatile", "-"), ",".join(map(str, gpu.get("xid") or [])) or "-",
                    "; ".join(report["problems"]).replace("|", "/") or "-"))
    return "\n".join(lines) + "\n"
