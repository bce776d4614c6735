# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cycle's results where operators look: node_exporter's textfile collector (Prometheus text
exposition format 0.0.4) and JUnit XML. Pure functions of the cycle's summary; no imports beyond
the standard library, so the filter plugin and the callback share them."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

PREFIX = "benchmark_cycle_"
HELP = {
    "last_run_timestamp_seconds": "When the cycle ended (epoch seconds).",
    "success": "1 when the cycle completed and the service serves correctly, else 0.",
    "strategy_info": "How the sweep got its GPU (beside, release, release_all, stop).",
    "downtime_seconds": "From the stop or the release until the service answered correctly again (0 beside it).",
    "router_out_seconds": "From the router's remove hook to its restore hook.",
    "phase_seconds": "Seconds of each phase of the cycle.",
    "release_freed_bytes": "GPU memory the in-place release freed, measured with nvidia-smi.",
    "identity_ok": "After a whole-GPU resume: 1 when the server was proven the one released, else 0 (restarted).",
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
    downtime_s, router_out_s, phases {name: s}, freed_mib, identity {verdict} after a whole-GPU resume, gpu_health
    {phase: report}) and the
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
    verdict = (summary.get("identity") or {}).get("verdict") if isinstance(summary.get("identity"), dict) else None
    if verdict:  # only after a whole-GPU resume; anything but ok is 0 (mismatch, unknown)
        add("identity_ok", 1 if verdict == "ok" else 0, verdict=verdict)
    _sweep_samples(add, sweeps or [])
    _gpu_samples(add, summary.get("gpu_health") or {})
    lines = []
    for name, rows in samples.items():
        if not rows:
            continue
        lines += ["# HELP %s%s %s" % (PREFIX, name, HELP[name]), "# TYPE %s%s gauge" % (PREFIX, name)]
        for labels, value in rows:
            text = ",".join('%s="%s"' % (k, _label_value(v)) for k, v in labels.items())
            lines.append("%s%s{%s} %s" % (PREFIX, name, text, repr(value) if value != int(value) else int(value)))
    return "\n".join(lines) + "\n"


def _sweep_samples(add: Callable[..., None], sweeps: list[dict[str, Any]]) -> None:
    """Each sweep point's time, TFLOP/s and bandwidth, labelled by backend, TP size and M."""
    for sweep in sweeps:
        labels = {"backend": sweep.get("backend", ""), "tp": sweep.get("tp_size", "")}
        for point in sweep.get("points") or []:
            m = point.get("m")
            if finite_number(point.get("ms")) is not None:
                add("sweep_point_seconds", float(point["ms"]) / 1000, m=m, **labels)
            add("sweep_point_tflops", point.get("tflops"), m=m, **labels)
            if finite_number(point.get("gbs")) is not None:
                add("sweep_point_bytes_per_second", float(point["gbs"]) * 1e9, m=m, **labels)


def _gpu_samples(add: Callable[..., None], health: dict[str, Any]) -> None:
    """Each GPU's health, temperature and uncorrectable ECC errors, per phase (pre, post) of the GPU check."""
    for phase, report in sorted(health.items()):
        for gpu in report.get("gpus") or []:
            labels = {"phase": phase, "gpu": gpu.get("index"), "uuid": gpu.get("uuid", "")}
            add("gpu_healthy", 0 if gpu.get("problems") else 1, **labels)
            add("gpu_temperature_celsius", gpu.get("temperature_c"), **labels)
            for scope in ("volatile", "aggregate"):
                add("gpu_ecc_uncorrectable_errors", gpu.get("ecc_uncorrectable_" + scope), scope=scope, **labels)


# what XML 1.0 cannot hold (ElementTree writes it anyway, and every reader refuses the file), and a terminal's colour
# and cursor sequences (a router hook's or a server's output): taken out of every text the JUnit file carries
_NOT_XML = re.compile("\x1b\\[[0-9;?]*[ -/]*[@-~]|[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: Any) -> str:
    """`text` as XML 1.0 can carry it: control characters and terminal escape sequences removed."""
    return _NOT_XML.sub("", str(text))


def junit(steps: list[dict[str, Any]], name: str = "benchmark_cycle") -> str:
    """JUnit XML: one testsuite per host, one testcase per step ({host, step, seconds, failures:
    [message], skipped}). A step that failed and was rescued still fails: it did fail."""
    root = ET.Element("testsuites", name=name)
    for host in sorted({s["host"] for s in steps}):
        mine = [s for s in steps if s["host"] == host]
        suite = ET.SubElement(root, "testsuite", name=xml_text("%s %s" % (name, host)), tests=str(len(mine)),
                              failures=str(sum(1 for s in mine if s["failures"])),
                              skipped=str(sum(1 for s in mine if s.get("skipped") and not s["failures"])),
                              time="%.3f" % sum(s["seconds"] for s in mine))
        for step in mine:
            case = ET.SubElement(suite, "testcase", classname=xml_text("%s.%s" % (name, host)), name=xml_text(step["step"]),
                                 time="%.3f" % step["seconds"])
            if step["failures"]:
                failure = ET.SubElement(case, "failure", message=xml_text(step["failures"][0])[:500])
                failure.text = xml_text("\n".join(step["failures"]))
            elif step.get("skipped"):
                ET.SubElement(case, "skipped")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# A webhook's events (bc_notify_webhook.on): the cycle failed, it left the host out of the router, it succeeded. The
# first two are sent unless the operator lists others; a success only when asked for.
NOTIFY_EVENTS = ("failed", "router_out", "success")
NOTIFY_DEFAULT = ("failed", "router_out")
# a failure's text is the verdict of the whole cycle: enough to read it, bounded for a chat or a ticket
NOTIFY_FAILURE_MAX = 2000
_REDACTED = "<redacted>"  # module_utils/bc_host.py REDACTED (this module imports only the standard library)


def _flag(value: Any) -> bool | None:
    """True, False, or None for a value that says neither (absent, unknown)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else ""
    return True if text in ("true", "yes", "1") else False if text in ("false", "no", "0") else None


def router_state(owed: Any, lb_out: Any) -> str:
    """Where the host stands with the router once the cycle ends: 'out' when a hook took it out and it was not put
    back (the bring-back's plan says the router is still owed; without the plan, the drain's own flag), 'back' when
    a hook took it out and put it back, 'none' when no hook ever took it out."""
    owed_flag, out_flag = _flag(owed), _flag(lb_out)
    if owed_flag or (owed_flag is None and out_flag):
        return "out"
    return "back" if out_flag is False else "none"


def notification(summary: dict[str, Any], on: Any = None, secrets: Any = ()) -> dict[str, Any] | None:
    """The webhook's JSON body for the cycle's summary (host, unit, failed, failure, router_owed, lb_out, strategy,
    downtime_s, job_id), or None when none of its events is one the operator asked for (`on`; None: NOTIFY_DEFAULT). A cycle not known to
    have succeeded (failed absent or unreadable) counts as failed; the failure's text is cut to NOTIFY_FAILURE_MAX and
    each given secret (4 characters or more) is replaced, whatever the text came through."""
    failed = _flag(summary.get("failed")) is not False
    router = router_state(summary.get("router_owed"), summary.get("lb_out"))
    held = [e for e, holds in (("failed", failed), ("router_out", router == "out"), ("success", not failed)) if holds]
    wanted = [str(e) for e in (NOTIFY_DEFAULT if on is None else on if isinstance(on, (list, tuple)) else [on])]
    events = [e for e in held if e in wanted]
    if not events:
        return None
    values = [secrets] if isinstance(secrets, str) else list(secrets or [])
    hidden = sorted({str(s) for s in values if s and len(str(s)) >= 4}, key=len, reverse=True)

    def scrub(text: Any) -> str | None:
        if text is None or str(text).strip() in ("", "None"):
            return None
        out = str(text)
        for secret in hidden:
            out = out.replace(secret, _REDACTED)
        return out[:NOTIFY_FAILURE_MAX]

    host, unit = str(summary.get("host", "")), str(summary.get("unit", ""))
    failure = scrub(summary.get("failure")) if failed else None
    downtime = finite_number(summary.get("downtime_s"))
    text = "benchmark cycle on %s (%s): %s%s%s" % (
        host, unit, "FAILED" if failed else "ok",
        {"out": ", the host is OUT of the router", "back": ", back in the router"}.get(router, ""),
        ": " + failure if failure else "")
    return {"source": "benchmark-cycle", "events": events, "status": "failed" if failed else "complete",
            "host": host, "unit": unit, "failure": failure, "router": router,
            "strategy": summary.get("strategy") or None, "downtime_s": downtime,
            "job_id": scrub(summary.get("job_id")), "text": scrub(text)}
