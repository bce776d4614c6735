# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is each GPU healthy enough to benchmark on, and to serve from? Pure parsing and judging.

The readings come from `nvidia-smi -q -x` (its XML: ECC errors, retired pages, remapped rows,
clock-event reasons, temperature, persistence mode), the kernel log's `NVRM: Xid` lines since the
cycle started, and `dcgmi diag -r 1 -j` where DCGM is installed. The rules are data (`RULES`): each
reading, its limit, and whether crossing it fails the check or only warns. Checked against the real
nvidia-smi of the lent H200 (driver 580.159.04: tests/unit/fixtures/h200/nvidia-smi-q.xml).
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

# reading -> (limit, level, what it means). A reading above its limit (or True for a flag) is a problem.
RULES: dict[str, dict[str, Any]] = {
    "ecc_uncorrectable_volatile": {"max": 0, "level": "fail", "why": "uncorrectable ECC errors since the driver loaded"},
    "ecc_uncorrectable_aggregate": {"max": 0, "level": "warn", "why": "uncorrectable ECC errors over the GPU's life"},
    "retired_pages_pending": {"max": False, "level": "fail", "why": "pages waiting to be retired (a GPU reset is needed)"},
    "remapped_rows_pending": {"max": False, "level": "fail", "why": "rows waiting to be remapped (a GPU reset is needed)"},
    "remapped_rows_failure": {"max": False, "level": "fail", "why": "a row remap failed (the GPU needs service)"},
    "temperature_c": {"max": 85, "level": "fail", "why": "too hot to measure: its clocks will drop"},
    # clock-event reasons that make a benchmark lie (the GPU runs below its clocks)
    "throttle": {"max": [], "level": "fail", "why": "clocks held down by",
                 "reasons": ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"]},
    "power_capped": {"max": False, "level": "warn", "why": "clocks limited by the software power cap"},
    "persistence_off": {"max": False, "level": "warn", "why": "persistence mode is off (each start re-initialises the GPU)"},
    # XIDs in the kernel log: an application's own fault (13, 31, 43, 45 in NVIDIA's XID catalogue) is a
    # warning; every other one (the hardware, the driver, NVLink, a recovery action) fails
    "xid": {"max": [], "level": "fail", "why": "XID events in the kernel log since the cycle started",
            "application": [13, 31, 43, 45]},
    # the driver's own verdict (580+): anything but None (Reset, Reboot, Drain...) needs service
    "recovery_action": {"max": [], "level": "fail", "why": "the driver asks for a recovery action"},
    "repair_pending": {"max": [], "level": "fail", "why": "a memory channel or TPC repair is pending (a GPU reset is needed)"},
    # the driver's own word that memory cannot be repaired any more (580+: ecc_errors/unrepairable_memory)
    "unrepairable_memory": {"max": False, "level": "fail", "why": "memory the GPU can no longer repair (the GPU needs service)"},
    "dcgm_failed": {"max": [], "level": "fail", "why": "DCGM diagnostic (dcgmi diag -r 1) failed"},
}

# NVIDIA's XID catalogue documents the line with and without "PCI:" before the address
# (`NVRM: Xid (PCI:0000:3b:00): 79, pid=...` and `NVRM: Xid (0000:3b:00): 79, ...`); on a MIG GPU the driver adds the
# GPU instance, and the compute instance, after the address (NVIDIA/open-gpu-kernel-modules
# src/nvidia/src/kernel/gpu/rc/kernel_rc.c, XID_PRINT_WITH_ATTR: `PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u`)
XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)"
                      r"(?P<mig>(?:\s+GPU-C?I:\d+)*)\s*\):?\s*(?P<xid>\d+)(?:,\s*(?P<rest>.*))?")
# readings a healthy GPU reports; one that is missing or N/A is unknown, and a GPU with none of them known
# gave no readings at all (a failing driver or a GPU falling off the bus): never read as healthy
KNOWN_READINGS = ("temperature_c", "ecc_uncorrectable_volatile", "persistence_mode")
# memory repair: GPUs since Ampere remap rows and report page retirement N/A (row remapping replaces it: the real
# H200's report); older ones retire pages and have no row remapper. Whichever the GPU reports is judged; a GPU that
# reports neither is not known to have no pending repair
RETIREMENT = ("retired_pages_pending",)
REMAPPING = ("remapped_rows_pending", "remapped_rows_failure")
RULE_KEYS = {"max", "level"}


def rules_problems(overrides: Any) -> list[str]:
    """Problems of rule overrides ({reading: {max, level}}), each naming the reading and the fix: an
    unknown reading or key, a level other than fail/warn, a limit of another type than the rule's."""
    if not isinstance(overrides, dict):
        return ["rules must be a mapping of reading: {max, level}, e.g. {temperature_c: {max: 80}}"]
    out = []
    for key, change in overrides.items():
        if key not in RULES:
            out.append("%s: no such reading; the readings are %s" % (key, ", ".join(sorted(RULES))))
            continue
        if not isinstance(change, dict):
            out.append("%s must be a mapping, e.g. {max: 80, level: warn}" % key)
            continue
        unknown = sorted(map(str, set(change) - RULE_KEYS))
        if unknown:
            out.append("%s: unknown key(s) %s; a rule takes max and level" % (key, ", ".join(unknown)))
        if "level" in change and change["level"] not in ("fail", "warn"):
            out.append("%s.level=%s: use fail or warn" % (key, str(change["level"])[:40]))
        if "max" in change:
            limit, kind = change["max"], type(RULES[key]["max"])
            if kind in (bool, list):
                ok = isinstance(limit, kind)
            else:
                ok = isinstance(limit, (int, float)) and not isinstance(limit, bool) and math.isfinite(limit)
            if not ok:
                out.append("%s.max=%s: give %s" % (key, str(limit)[:40], {bool: "true or false", list: "a list"}.get(kind, "a number")))
    return out


def _text(node: ET.Element | None, path: str) -> str:
    found = node.find(path) if node is not None else None
    return (found.text or "").strip() if found is not None else ""


def _int(text: str) -> int | None:
    match = re.match(r"-?\d+", text or "")
    return int(match.group()) if match else None


def _uncorrectable(node: ET.Element | None) -> int | None:
    """Uncorrectable ECC errors of one scope: current drivers count dram_uncorrectable and
    sram_uncorrectable_*; older ones double_bit/total. Errors a counter does count are returned whatever
    the others say; otherwise None (unknown) when any counter is N/A or missing (ECC off, or a DRAM count
    the driver did not give: never read as 0)."""
    if node is None:
        return None
    values = [_int(child.text or "") for child in node if "uncorrectable" in child.tag]
    if not values and node.find("double_bit/total") is not None:
        values = [_int(_text(node, "double_bit/total"))]
    if any(child.tag.startswith("sram_") for child in node) and node.find("dram_uncorrectable") is None:
        values.append(None)  # the SRAM/DRAM split of current drivers without its DRAM count: not 0
    counted = sum(v for v in values if v is not None)
    if counted > 0:
        return counted
    return counted if values and None not in values else None


def _yes_no(text: str) -> bool | None:
    """nvidia-smi's Yes/No; None for N/A, missing or anything else (unknown)."""
    return {"Yes": True, "No": False}.get(text)


def _unknown(readings: dict[str, Any]) -> list[str]:
    """The readings this GPU should report and does not (missing or N/A): the three every GPU reports, both ECC
    scopes, and its memory repair (retirement or remapping, whichever it reports; both when it reports neither)."""
    remaps = any(readings[k] is not None for k in REMAPPING)
    retires = any(readings[k] is not None for k in RETIREMENT)
    repair = (REMAPPING if remaps else ()) + (RETIREMENT if retires else ())
    should = (*KNOWN_READINGS, "ecc_uncorrectable_aggregate", *(repair or RETIREMENT + REMAPPING))
    return [k for k in should if readings[k] is None]


def parse_smi_xml(text: str) -> list[dict[str, Any]]:
    """Each GPU's readings from `nvidia-smi -q -x`, or a ValueError naming what is wrong."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError("nvidia-smi -q -x gave no XML (%s)" % err) from None
    gpus = []
    for gpu in root.findall("gpu"):
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:  # drivers before 535 name them throttle reasons
            reasons = gpu.find("clocks_throttle_reasons")
        active = []
        for child in reasons if reasons is not None else []:
            if (child.text or "").strip() == "Active":
                active.append(re.sub(r"^clocks?_(?:event|throttle)_reasons?_", "", child.tag))
        persistence = _text(gpu, "persistence_mode")
        readings = {"temperature_c": _int(_text(gpu, "temperature/gpu_temp")),
                    "ecc_uncorrectable_volatile": _uncorrectable(gpu.find("ecc_errors/volatile")),
                    "ecc_uncorrectable_aggregate": _uncorrectable(gpu.find("ecc_errors/aggregate")),
                    "persistence_mode": persistence if persistence in ("Enabled", "Disabled") else None,
                    "retired_pages_pending": _yes_no(_text(gpu, "retired_pages/pending_retirement")),
                    "remapped_rows_pending": _yes_no(_text(gpu, "remapped_rows/remapped_row_pending")),
                    "remapped_rows_failure": _yes_no(_text(gpu, "remapped_rows/remapped_row_failure"))}
        gpus.append({
            "unknown": _unknown(readings),
            "index": _int(_text(gpu, "minor_number")),
            "uuid": _text(gpu, "uuid"),
            "name": _text(gpu, "product_name"),
            "pci": gpu.get("id", ""),
            "persistence_off": _text(gpu, "persistence_mode") == "Disabled",
            "temperature_c": readings["temperature_c"],
            "ecc_uncorrectable_volatile": readings["ecc_uncorrectable_volatile"],
            "ecc_uncorrectable_aggregate": readings["ecc_uncorrectable_aggregate"],
            "retired_pages_pending": readings["retired_pages_pending"],
            "remapped_rows_pending": readings["remapped_rows_pending"],
            "remapped_rows_failure": readings["remapped_rows_failure"],
            "throttle": sorted(r for r in active if r in RULES["throttle"]["reasons"]),
            "recovery_action": [a for a in [_text(gpu, "gpu_recovery_action")] if a not in ("", "None", "N/A")],
            "repair_pending": [k for k in ("channel_repair_pending", "tpc_repair_pending")
                               if _text(gpu, "ecc_errors/" + k) == "Yes"],
            "power_capped": "sw_power_cap" in active,
            "unrepairable_memory": _text(gpu, "ecc_errors/unrepairable_memory") == "Yes",
            "clock_events": sorted(active),
        })
    if not gpus:
        raise ValueError("nvidia-smi -q -x listed no GPU")
    return gpus


def xid_events(log: str) -> list[dict[str, Any]]:
    """`NVRM: Xid (PCI:...): N, ...` lines of a kernel log: pci, xid, mig (the MIG instance the driver names,
    e.g. `GPU-I:05`, "" for none), the line. A `NVRM: Xid` line in a form not known here is kept with pci ""
    and xid None: an XID that cannot be read is not no XID."""
    events = []
    for line in log.splitlines():
        match = XID_LINE.search(line)
        if match:
            events.append({"pci": match.group("pci"), "xid": int(match.group("xid")),
                           "mig": " ".join(match.group("mig").split()), "line": line.strip()[:300]})
        elif "NVRM: Xid" in line:
            events.append({"pci": "", "xid": None, "mig": "", "line": line.strip()[:300]})
    return events


def _same_pci(smi_id: str, kernel_id: str) -> bool:
    """nvidia-smi's 00000000:00:06.0 and the kernel's 0000:00:06 (or 0000:00:06.0) are one device."""
    def norm(text: str) -> str:
        parts = text.lower().split(":")
        if len(parts) >= 3:
            parts[0] = parts[0][-4:]
        return ":".join(parts).split(".", maxsplit=1)[0]
    return norm(smi_id) == norm(kernel_id)


def dcgm_failures(text: str) -> list[str] | None:
    """The names of the tests a `dcgmi diag -j` JSON marks failed ("Fail" as a result or status);
    None when it gave no JSON (DCGM's host engine not running: the diagnostic did not run)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    failed: list[str] = []

    def walk(node: Any, name: str) -> None:
        if isinstance(node, dict):
            label = str(node.get("test_name") or node.get("name") or name)
            status = str(node.get("status") or node.get("result") or "")
            if status.lower() == "fail":
                failed.append(label)
            for key, value in node.items():
                walk(value, label if key in ("results", "status", "result") else str(key))
        elif isinstance(node, list):
            for item in node:
                walk(item, name)
    walk(data, "dcgm")
    return sorted(set(failed))


def without_smi(required: bool, expect: list[str] | None = None) -> dict[str, Any]:
    """The verdict on a host without nvidia-smi. Nothing is judged (checked false) and nothing reads healthy: a host
    meant to have a GPU (`required`), or whose GPUs are asked for or were seen before (`expect`), fails naming the
    missing tool and the fix; only a host declared GPU-less (required false, nothing expected) is `no_gpu`, with no
    problem, said plainly."""
    if not required and not expect:
        return {"checked": False, "healthy": False, "no_gpu": True, "problems": [], "gpus": [],
                "msg": "no nvidia-smi on this host, which is declared to have no GPU (required=false): nothing judged; "
                       "there is no GPU here to be healthy or sick"}
    why = ("GPU(s) %s were asked for or seen before" % ", ".join(map(str, expect)) if expect
           else "this host is expected to have a GPU")
    return {"checked": False, "healthy": False, "no_gpu": False, "gpus": [],
            "problems": ["nvidia-smi is not on this host's PATH (nor /sbin, /usr/sbin, /usr/local/sbin) and %s: its GPUs "
                         "cannot be judged. Install the NVIDIA driver's utilities (nvidia-smi comes with them) or put "
                         "nvidia-smi on PATH; a host without a GPU is declared with required=false (the cycle: "
                         "bc_sweep_backends with no GPU-only backend, e.g. [torch])" % why],
            "msg": "no nvidia-smi on a host expected to have a GPU: not healthy"}


# right after a heavy sweep a GPU is hot and may be clocked down for it: in the post-check these are
# warnings (the sweep's own heat), not a GPU that went bad
POST_SWEEP = {"temperature_c": {"level": "warn"}, "throttle": {"level": "warn"}}


def judge(gpus: list[dict[str, Any]], xids: list[dict[str, Any]] | None, dcgm: list[str] | None,
          overrides: dict[str, Any] | None = None, phase: str = "pre", expect: list[str] | None = None) -> dict[str, Any]:
    """Problems (fail) and warnings, each naming the GPU, the reading and its value. `xids` None:
    the kernel log could not be read (said, not failed); `dcgm` None: not run. `expect`: the UUIDs
    (or indices, as text) an earlier check saw; one that is gone now fails (it fell off the bus).
    A reading that is missing or N/A is a concern; a GPU with none of its readings fails."""
    base = {k: dict(v, **(POST_SWEEP.get(k, {}) if phase == "post" else {})) for k, v in RULES.items()}
    rules = {k: dict(v, **((overrides or {}).get(k) or {})) for k, v in base.items()}
    problems: list[str] = []
    warnings: list[str] = []
    for gpu in gpus:
        gpu["xid"] = sorted({e["xid"] for e in xids or [] if e["xid"] is not None and _same_pci(gpu["pci"], e["pci"])})
        gpu["problems"] = []
        name = "GPU %s (%s, %s)" % (gpu["index"], gpu["name"], gpu["uuid"] or gpu["pci"])
        unknown = gpu.get("unknown") or []
        if all(k in unknown for k in KNOWN_READINGS):
            problems.append("%s: no readings (%s all missing or N/A): a GPU that reports nothing is not known to be healthy"
                            % (name, ", ".join(KNOWN_READINGS)))
            gpu["problems"].append("no_readings")
        elif unknown:
            warnings.append("%s: %s unknown (missing or N/A in nvidia-smi -q -x): not judged" % (name, ", ".join(unknown)))
        for key, rule in rules.items():
            value = gpu.get(key)
            if key == "xid":
                bad = [x for x in value if x not in rule["application"]]
                soft = [x for x in value if x in rule["application"]]
                if soft:
                    warnings.append("%s: XID %s in the kernel log since the cycle started (application faults)"
                                    % (name, ", ".join(map(str, soft))))
                value = bad
            if value is None or key == "dcgm_failed":
                continue
            crossed = bool(value) if isinstance(rule["max"], (bool, list)) else value > rule["max"]
            if crossed:
                shown = ",".join(map(str, value)) if isinstance(value, list) else value
                limit = "" if isinstance(rule["max"], (bool, list)) else "; limit %s" % rule["max"]
                text = "%s: %s=%s (%s%s)" % (name, key, shown, rule["why"], limit)
                (problems if rule["level"] == "fail" else warnings).append(text)
                gpu["problems"].append(key)
    seen = {str(g.get("uuid") or "") for g in gpus} | {str(g.get("index")) for g in gpus}
    for gone in [e for e in expect or [] if str(e) not in seen]:
        problems.append("GPU %s was there before the sweep and is gone now (fell off the bus? see the kernel log)" % gone)
    if not gpus:
        problems.append("no GPU to judge: nvidia-smi listed none of the GPUs asked for")
    for event in [e for e in xids or [] if e["xid"] is None]:
        problems.append("an XID line in a form this check cannot read (a fault not known to be harmless): %s" % event["line"])
    unmatched = [e for e in xids or [] if e["xid"] is not None and not any(_same_pci(g["pci"], e["pci"]) for g in gpus)]
    for event in unmatched:
        problems.append("XID %d on PCI %s (no GPU nvidia-smi lists): %s" % (event["xid"], event["pci"], event["line"]))
    if dcgm:
        problems.append("dcgmi diag -r 1: %s failed (%s)" % (", ".join(dcgm), rules["dcgm_failed"]["why"]))
    if xids is None:
        warnings.append("the kernel log could not be read: XID events unknown")
    return {"healthy": not problems, "problems": problems, "warnings": warnings, "gpus": gpus}
