# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cycle's results where operators look: node_exporter's textfile collector (Prometheus text
exposition format 0.0.4) and JUnit XML. Pure functions of the cycle's summary; no imports beyond
the standard library, so the filter plugin and the callback share them."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

PREFIX = "benchmark_cycle_"
HELP = {
    "last_run_timestamp_seconds": "When the cycle ended (epoch seconds).",
    "success": "1 when the cycle completed and the service serves correctly, else 0.",
    "strategy_info": "How the sweep got its GPU (beside, release, stop).",
    "downtime_seconds": "From the stop or the release until the service answered correctly again (0 beside it).",
    "router_out_seconds": "From the router's remove hook to its restore hook.",
    "phase_seconds": "Seconds of each phase of the cycle.",
    "release_freed_bytes": "GPU memory the in-place release freed, measured with nvidia-smi.",
    "sweep_point_seconds": "Median time of one MoE GEMM call at M tokens.",
    "sweep_point_tflops": "Achieved TFLOP/s at M tokens.",
    "sweep_point_bytes_per_second": "Achieved weight-streaming bandwidth at M tokens.",
    "gpu_healthy": "1 when the GPU passed the health check of that phase.",
    "gpu_temperature_celsius": "GPU temperature at the health check.",
    "gpu_ecc_uncorrectable_errors": "Uncorrectable ECC errors at the health check, by scope.",
}


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def finite_number(value: Any) -> float | None:
    """`value` as a finite float, or None (not a number, NaN, infinite)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def textfile(summary: dict[str, Any], sweeps: list[dict[str, Any]] | None = None, now: float = 0.0) -> str:
    """The textfile for node_exporter from the cycle's summary (host, unit, failed, strategy,
    downtime_s, router_out_s, phases {name: s}, freed_mib, gpu_health {phase: report}) and the
    fetched sweep results. Every sample is a gauge; a value that is not a finite number is left out."""
    base = {"host": summary.get("host", ""), "unit": summary.get("unit", "")}
    samples: dict[str, list[tuple[dict[str, Any], float]]] = {name: [] for name in HELP}

    def add(name: str, value: Any, **labels: Any) -> None:
        number = finite_number(value)
        if number is not None:
            samples[name].append((dict(base, **labels), number))

    add("last_run_timestamp_seconds", now)
    add("success", 0 if summary.get("failed") else 1)
    if summary.get("strategy"):
        add("strategy_info", 1, strategy=summary["strategy"])
    add("downtime_seconds", summary.get("downtime_s"))
    add("router_out_seconds", summary.get("router_out_s"))
    for phase, seconds in sorted((summary.get("phases") or {}).items()):
        add("phase_seconds", seconds, phase=phase)
    if finite_number(summary.get("freed_mib")) is not None:
        add("release_freed_bytes", float(summary["freed_mib"]) * 1024 * 1024)
    for sweep in sweeps or []:
        labels = {"backend": sweep.get("backend", ""), "tp": sweep.get("tp_size", "")}
        for point in sweep.get("points") or []:
            m = point.get("m")
            if finite_number(point.get("ms")) is not None:
                add("sweep_point_seconds", float(point["ms"]) / 1000, m=m, **labels)
            add("sweep_point_tflops", point.get("tflops"), m=m, **labels)
            if finite_number(point.get("gbs")) is not None:
                add("sweep_point_bytes_per_second", float(point["gbs"]) * 1e9, m=m, **labels)
    for phase, report in sorted((summary.get("gpu_health") or {}).items()):
        for gpu in report.get("gpus") or []:
            labels = {"phase": phase, "gpu": gpu.get("index"), "uuid": gpu.get("uuid", "")}
            add("gpu_healthy", 0 if gpu.get("problems") else 1, **labels)
            add("gpu_temperature_celsius", gpu.get("temperature_c"), **labels)
            for scope in ("volatile", "aggregate"):
                add("gpu_ecc_uncorrectable_errors", gpu.get("ecc_uncorrectable_" + scope), scope=scope, **labels)
    lines = []
    for name, rows in samples.items():
        if not rows:
            continue
        lines += ["# HELP %s%s %s" % (PREFIX, name, HELP[name]), "# TYPE %s%s gauge" % (PREFIX, name)]
        for labels, value in rows:
            text = ",".join('%s="%s"' % (k, _label_value(v)) for k, v in labels.items())
            lines.append("%s%s{%s} %s" % (PREFIX, name, text, repr(value) if value != int(value) else int(value)))
    return "\n".join(lines) + "\n"


def junit(steps: list[dict[str, Any]], name: str = "benchmark_cycle") -> str:
    """JUnit XML: one testsuite per host, one testcase per step ({host, step, seconds, failures:
    [message], skipped}). A step that failed and was rescued still fails: it did fail."""
    root = ET.Element("testsuites", name=name)
    for host in sorted({s["host"] for s in steps}):
        mine = [s for s in steps if s["host"] == host]
        suite = ET.SubElement(root, "testsuite", name="%s %s" % (name, host), tests=str(len(mine)),
                              failures=str(sum(1 for s in mine if s["failures"])),
                              skipped=str(sum(1 for s in mine if s.get("skipped") and not s["failures"])),
                              time="%.3f" % sum(s["seconds"] for s in mine))
        for step in mine:
            case = ET.SubElement(suite, "testcase", classname="%s.%s" % (name, host), name=step["step"],
                                 time="%.3f" % step["seconds"])
            if step["failures"]:
                failure = ET.SubElement(case, "failure", message=step["failures"][0][:500])
                failure.text = "\n".join(step["failures"])
            elif step.get("skipped"):
                ET.SubElement(case, "skipped")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
