"""The GPU health check: the real nvidia-smi -q -x of the lent H200 (driver 580.159.04, captured by
tests/gpu/probe_release.sh) reads healthy; each unhealthy reading, made from that same real report by
changing one value, is caught and named; the module through the real ansible CLI with the nvidia-smi
double serving those reports."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from test_modules_adhoc import adhoc

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import (
    dcgm_failures,
    judge,
    parse_smi_xml,
    xid_events,
)

ROOT = Path(__file__).resolve().parents[2]
H200 = (ROOT / "tests/unit/fixtures/h200/nvidia-smi-q.xml").read_text()
SMI = ROOT / "tests/doubles/nvidia_smi.py"


def faulty(old: str, new: str, text: str = H200) -> str:
    """The real report with one reading changed (the test fails if the reading is not there)."""
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def test_the_real_h200_reads_healthy():
    gpus = parse_smi_xml(H200)
    assert len(gpus) == 1
    g = gpus[0]
    assert (g["index"], g["name"], g["uuid"]) == (0, "NVIDIA H200", "GPU-17e71e43-915a-9ef6-d571-5812c9a8a04b")
    assert g["temperature_c"] == 33 and g["ecc_uncorrectable_volatile"] == 0 and g["ecc_uncorrectable_aggregate"] == 0
    assert g["throttle"] == [] and not g["persistence_off"] and not g["remapped_rows_pending"]
    assert g["clock_events"] == ["gpu_idle"]  # idle is not a throttle
    verdict = judge(gpus, [], [])
    assert verdict["healthy"] and verdict["problems"] == [] and verdict["warnings"] == []


@pytest.mark.parametrize(("old", "new", "reading", "level"), [
    ("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>Yes</remapped_row_pending>",
     "remapped_rows_pending=True", "fail"),
    ("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>Yes</remapped_row_failure>",
     "remapped_rows_failure=True", "fail"),
    ("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>",
     "ecc_uncorrectable_volatile=2", "fail"),
    ("<pending_retirement>N/A</pending_retirement>", "<pending_retirement>Yes</pending_retirement>",
     "retired_pages_pending=True", "fail"),
    ("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>91 C</gpu_temp>", "temperature_c=91", "fail"),
    ("<clocks_event_reason_hw_thermal_slowdown>Not Active", "<clocks_event_reason_hw_thermal_slowdown>Active",
     "throttle=hw_thermal_slowdown", "fail"),
    ("<clocks_event_reason_sw_power_cap>Not Active", "<clocks_event_reason_sw_power_cap>Active", "power_capped=True", "warn"),
    ("<persistence_mode>Enabled</persistence_mode>", "<persistence_mode>Disabled</persistence_mode>", "persistence_off=True",
     "warn"),
])
def test_each_unhealthy_reading_is_named_with_its_value(old, new, reading, level):
    verdict = judge(parse_smi_xml(faulty(old, new)), [], [])
    found = verdict["problems"] if level == "fail" else verdict["warnings"]
    assert any(reading in p and p.startswith("GPU 0 (NVIDIA H200, GPU-17e71e43") for p in found), verdict
    assert verdict["healthy"] is (level == "warn")


def test_aggregate_ecc_warns_and_volatile_fails():
    aggregate = H200.split("<aggregate>")[0] + "<aggregate>" + H200.split("<aggregate>")[1].replace(
        "<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>", 1)
    verdict = judge(parse_smi_xml(aggregate), [], [])
    assert verdict["healthy"] and any("ecc_uncorrectable_aggregate=3" in w for w in verdict["warnings"])


def test_xids_since_the_start_are_matched_to_their_gpu_and_judged_by_kind():
    log = ("1796126000.1 kernel: NVRM: Xid (PCI:0000:00:06): 79, pid=1234, name=python3, GPU has fallen off the bus.\n"
           "1796126001.2 kernel: NVRM: Xid (PCI:0000:00:06): 13, pid=1234, Graphics Exception\n"
           "1796126002.0 kernel: NVRM: Xid (PCI:0000:41:00): 48, An uncorrectable double bit error\n"
           "1796126003.0 kernel: usb 1-1: new device\n")
    events = xid_events(log)
    assert [e["xid"] for e in events] == [79, 13, 48]
    verdict = judge(parse_smi_xml(H200), events, [])
    assert not verdict["healthy"]
    assert any("xid=79" in p for p in verdict["problems"])  # fallen off the bus: hardware
    assert any("XID 13" in w and "application faults" in w for w in verdict["warnings"])
    assert any("XID 48 on PCI 0000:41:00 (no GPU nvidia-smi lists)" in p for p in verdict["problems"])
    assert not judge(parse_smi_xml(H200), None, [])["problems"]
    assert "XID events unknown" in judge(parse_smi_xml(H200), None, [])["warnings"][0]


def test_unknown_xids_and_the_drivers_recovery_action_fail():
    events = xid_events("1.0 kernel: NVRM: Xid (PCI:0000:00:06): 154, GPU recovery action changed from 0x0 (None) to 0x1 (Reset)")
    assert any("xid=154" in p for p in judge(parse_smi_xml(H200), events, [])["problems"])
    reset = judge(parse_smi_xml(faulty("<gpu_recovery_action>None<", "<gpu_recovery_action>Reset<")), [], [])
    assert not reset["healthy"] and "recovery_action=Reset" in reset["problems"][0]
    repair = judge(parse_smi_xml(faulty("<channel_repair_pending>No<", "<channel_repair_pending>Yes<")), [], [])
    assert not repair["healthy"] and "repair_pending=channel_repair_pending" in repair["problems"][0]


def test_after_the_sweep_its_own_heat_only_warns():
    hot = parse_smi_xml(faulty("<clocks_event_reason_sw_thermal_slowdown>Not Active", "<clocks_event_reason_sw_thermal_slowdown>Active",
                               faulty("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>88 C</gpu_temp>")))
    assert not judge([dict(g) for g in hot], [], [])["healthy"]  # before a cycle: too hot to measure
    post = judge([dict(g) for g in hot], [], [], phase="post")
    assert post["healthy"] and len(post["warnings"]) == 2


def test_rules_are_data_and_overridable():
    warm = faulty("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>82 C</gpu_temp>")
    assert judge(parse_smi_xml(warm), [], [])["healthy"]
    assert not judge(parse_smi_xml(warm), [], [], {"temperature_c": {"max": 80}})["healthy"]


def test_dcgm_failures_and_garbage():
    report = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "Denylist", "results": [{"gpu_id": "0", "status": "Pass"}]},
        {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Fail", "warnings": [{"warning": "row remap"}]}]}]}]}}
    assert dcgm_failures(json.dumps(report)) == ["GPU Memory"]
    assert dcgm_failures("Error: unable to connect to host engine") is None  # not run, not failed
    verdict = judge(parse_smi_xml(H200), [], ["GPU Memory"])
    assert not verdict["healthy"] and "dcgmi diag -r 1: GPU Memory failed" in verdict["problems"][0]


def test_no_xml_is_an_error_naming_it():
    with pytest.raises(ValueError, match="gave no XML"):
        parse_smi_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    with pytest.raises(ValueError, match="listed no GPU"):
        parse_smi_xml("<nvidia_smi_log></nvidia_smi_log>")


# -- the module, with the nvidia-smi double on PATH serving a report --------------------------------
def module_with(tmp_path: Path, xml: str | None, args: dict | None = None) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-smi").write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, SMI))
    (bindir / "nvidia-smi").chmod(0o755)
    report = tmp_path / "q.xml"
    if xml is not None:
        report.write_text(xml)
    old = dict(os.environ)
    os.environ.update(PATH="%s:%s" % (bindir, os.environ["PATH"]), BC_DOUBLE_SMI_XML=str(report))
    try:
        return adhoc("gpu_health", dict({"dcgm": "never"}, **(args or {})))
    finally:
        os.environ.clear()
        os.environ.update(old)


# a missing nvidia-smi never reads healthy: a problem naming the tool and the fix on a host meant to have a GPU (the
# default), on one whose GPUs are asked for or were seen before; only a host declared GPU-less is no_gpu, said plainly
@pytest.mark.parametrize(("required", "expect", "no_gpu", "said"), [
    (True, [], False, "this host is expected to have a GPU"),
    (False, [], True, "declared to have no GPU (required=false): nothing judged"),
    (False, ["GPU-17e71e43"], False, "GPU(s) GPU-17e71e43 were asked for or seen before"),
    (True, ["0"], False, "GPU(s) 0 were asked for"),
])
def test_no_nvidia_smi_is_never_healthy_and_a_problem_unless_the_host_is_declared_gpu_less(required, expect, no_gpu, said):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import without_smi

    got = without_smi(required, expect)
    assert got["checked"] is False and got["healthy"] is False and got["no_gpu"] is no_gpu, got
    assert said in (got["msg"] if no_gpu else got["problems"][0]), got
    assert (got["problems"] == []) is no_gpu
    if not no_gpu:
        assert "Install the NVIDIA driver's utilities" in got["problems"][0] and "required=false" in got["problems"][0]


SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")  # where Ansible's get_bin_path looks beside PATH


@pytest.mark.skipif(any(Path(d, "nvidia-smi").exists() for d in os.environ["PATH"].split(":") + list(SBIN)),
                    reason="this machine has an nvidia-smi")
@pytest.mark.parametrize(("args", "no_gpu"), [({}, False), ({"required": False}, True), ({"required": False, "devices": [0]}, False)])
def test_the_module_without_nvidia_smi(args, no_gpu):
    r = adhoc("gpu_health", dict({"dcgm": "never"}, **args))
    assert r["_status"] == "SUCCESS" and not r["checked"] and not r["healthy"] and r["no_gpu"] is no_gpu, r
    assert bool(r["problems"]) is not no_gpu and (r["problems"] or [r["msg"]])[0].startswith(
        "no nvidia-smi on this host, which is declared" if no_gpu else "nvidia-smi is not on this host's PATH"), r


def test_the_module_reads_the_real_report_healthy(tmp_path):
    r = module_with(tmp_path, H200)
    assert r["_status"] == "SUCCESS" and r["checked"] and r["healthy"] and r["gpus"][0]["uuid"].startswith("GPU-17e71e43")
    assert r["no_gpu"] is False, r
    assert module_with(tmp_path, H200, {"required": False})["healthy"]  # a GPU that is there is judged either way


def test_the_module_names_a_remap_pending_and_never_fails_itself(tmp_path):
    r = module_with(tmp_path, faulty("<remapped_row_pending>No", "<remapped_row_pending>Yes"))
    assert r["_status"] == "SUCCESS" and not r["healthy"] and "remapped_rows_pending=True" in r["problems"][0]


def test_a_gpu_that_cannot_be_read_is_not_healthy(tmp_path):
    r = module_with(tmp_path, None)  # the double's "No devices were found", exit 6
    assert r["_status"] == "SUCCESS" and not r["healthy"] and "nvidia-smi -q -x exited 6" in r["problems"][0]


def test_dcgm_that_cannot_reach_its_host_engine_is_a_concern_unless_required(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dcgmi").write_text("#!/bin/sh\necho 'Error: unable to connect to host engine. Host engine connection invalid.'\nexit 1\n")
    (bindir / "dcgmi").chmod(0o755)
    auto = module_with(tmp_path, H200, {"dcgm": "auto"})
    assert auto["healthy"] and any("DCGM diagnostic not run" in c for c in auto["concerns"]), auto
    always = module_with(tmp_path, H200, {"dcgm": "always"})
    assert not always["healthy"] and "unable to connect to host engine" in always["problems"][0]


def test_the_module_refuses_an_unknown_rule(tmp_path):
    r = module_with(tmp_path, H200, {"rules": {"temprature_c": {"max": 80}}})
    assert r["_status"] == "FAILED!" and "temprature_c: no such reading" in r["msg"]


@pytest.mark.parametrize(("rules", "message"), [
    ({"temperature_c": {"max": "hot"}}, "temperature_c.max=hot: give a number"),
    ({"temperature_c": 80}, "temperature_c must be a mapping"),
    ({"xid": {"max": 3}}, "xid.max=3: give a list"),
    ({"temperature_c": {"level": "panic"}}, "temperature_c.level=panic: use fail or warn"),
    ({"temperature_c": {"maximum": 80}}, "temperature_c: unknown key(s) maximum"),
])
def test_a_bad_rule_is_refused_naming_the_field_not_with_an_exception(tmp_path, rules, message):
    r = module_with(tmp_path, H200, {"rules": rules})
    assert r["_status"] == "FAILED!" and message in r["msg"] and "Traceback" not in json.dumps(r), r


def test_a_gpu_with_no_readings_fails_and_an_unknown_reading_is_a_concern():
    bare = faulty("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>N/A</gpu_temp>")
    verdict = judge(parse_smi_xml(bare), [], [])
    assert verdict["healthy"] and any("temperature_c unknown" in w for w in verdict["warnings"]), verdict
    none = faulty("<persistence_mode>Enabled</persistence_mode>", "<persistence_mode>N/A</persistence_mode>", bare)
    none = none.replace("<volatile>", "<volatile_gone>").replace("</volatile>", "</volatile_gone>")
    verdict = judge(parse_smi_xml(none), [], [])
    assert not verdict["healthy"] and any("no readings" in p for p in verdict["problems"]), verdict


def in_aggregate(old: str, new: str) -> str:
    """The real report with one reading of the aggregate ECC scope changed."""
    head, tail = H200.split("<aggregate>", 1)
    assert old in tail.split("</aggregate>", 1)[0], old
    return head + "<aggregate>" + tail.replace(old, new, 1)


NO_REMAP = faulty("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>N/A</remapped_row_pending>",
                  faulty("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>N/A</remapped_row_failure>"))


# A reading this GPU should give that reads N/A (or is missing) is unknown: a concern naming it, never a 0 or a No.
# Where the real H200 leaves a field N/A legitimately (page retirement, replaced by row remapping since Ampere),
# it stays quiet: test_the_real_h200_reads_healthy has no concern at all.
@pytest.mark.parametrize(("report", "healthy", "said"), [
    (faulty("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>N/A</dram_uncorrectable>"), True,
     "ecc_uncorrectable_volatile unknown"),
    (faulty("<dram_uncorrectable>0</dram_uncorrectable>", ""), True, "ecc_uncorrectable_volatile unknown"),
    (in_aggregate("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>N/A</dram_uncorrectable>"), True,
     "ecc_uncorrectable_aggregate unknown"),
    # errors a counter does count fail whatever the N/A beside them
    (faulty("<sram_uncorrectable_parity>0<", "<sram_uncorrectable_parity>2<",
            faulty("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>N/A</dram_uncorrectable>")), False,
     "ecc_uncorrectable_volatile=2"),
    (faulty("<remapped_row_pending>No</remapped_row_pending>", "<remapped_row_pending>N/A</remapped_row_pending>"), True,
     "remapped_rows_pending unknown"),
    (faulty("<remapped_row_failure>No</remapped_row_failure>", "<remapped_row_failure>N/A</remapped_row_failure>"), True,
     "remapped_rows_failure unknown"),
    # neither row remapping nor page retirement reported: no pending repair is not known
    (NO_REMAP, True, "retired_pages_pending, remapped_rows_pending, remapped_rows_failure unknown"),
], ids=["dram-volatile-na", "dram-volatile-missing", "dram-aggregate-na", "sram-counts-beside-na", "remap-pending-na",
        "remap-failure-na", "no-repair-reading"])
def test_a_reading_the_gpu_should_give_that_reads_na_is_a_concern_naming_it(report, healthy, said):
    verdict = judge(parse_smi_xml(report), [], [])
    assert verdict["healthy"] is healthy, verdict
    assert any(said in text for text in verdict["warnings"] + verdict["problems"]), verdict


def test_a_gpu_that_retires_pages_instead_of_remapping_rows_is_judged_by_retirement():
    older = faulty("<pending_retirement>N/A</pending_retirement>", "<pending_retirement>No</pending_retirement>", NO_REMAP)
    gpus = parse_smi_xml(older)
    assert gpus[0]["retired_pages_pending"] is False and gpus[0]["remapped_rows_pending"] is None
    verdict = judge(gpus, [], [])
    assert verdict["healthy"] and verdict["warnings"] == [], verdict
    pending = judge(parse_smi_xml(older.replace("<pending_retirement>No<", "<pending_retirement>Yes<")), [], [])
    assert not pending["healthy"] and "retired_pages_pending=True" in pending["problems"][0]


def test_a_gpu_that_vanished_since_the_first_check_fails():
    gpus = parse_smi_xml(H200)
    assert judge(gpus, [], [], phase="post", expect=[gpus[0]["uuid"]])["healthy"]
    gone = judge(gpus, [], [], phase="post", expect=[gpus[0]["uuid"], "GPU-0000-gone"])
    assert not gone["healthy"] and any("GPU-0000-gone was there before the sweep and is gone" in p for p in gone["problems"])
    assert not judge([], [], [], phase="post", expect=[gpus[0]["uuid"]])["healthy"]


@pytest.mark.parametrize("line", [
    "[ 1234.5] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, GPU has fallen off the bus.",
    "kernel: NVRM: Xid (0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:00:06.0): 48, pid=77, An uncorrectable double bit error",
    "NVRM: Xid (0000:00:06.0): 119, pid=1, Timeout after 6s of waiting for RPC response",
    # a MIG GPU: the driver names the GPU instance (and the compute instance) after the address (kernel_rc.c)
    "NVRM: Xid (PCI:0000:00:06 GPU-I:05): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:00:06 GPU-I:05 GPU-CI:00): 48, pid=77, An uncorrectable double bit error",
])
def test_xids_are_read_in_every_documented_format(line):
    events = xid_events(line)
    assert len(events) == 1 and events[0]["xid"] in (79, 48, 119), events
    assert events[0]["mig"] == ("GPU-I:05" + (" GPU-CI:00" if "GPU-CI" in line else "") if "GPU-I" in line else "")
    verdict = judge(parse_smi_xml(H200), events, [])
    assert not verdict["healthy"] and any("xid=" in p for p in verdict["problems"]), verdict


def test_an_xid_line_in_a_form_not_known_here_is_a_problem_not_no_xid():
    events = xid_events("kernel: NVRM: Xid (PCI:0000:00:06 GPU-X:9): 79, pid=1, GPU has fallen off the bus.")
    assert events and events[0]["xid"] is None, events
    verdict = judge(parse_smi_xml(H200), events, [])
    assert not verdict["healthy"] and "an XID line in a form this check cannot read" in verdict["problems"][0], verdict


def test_the_readings_go_into_the_report_and_the_history_line(tmp_path):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import judge as judge_
    pre = judge_(parse_smi_xml(H200), [], [])
    post = judge_(parse_smi_xml(faulty("<gpu_temp>33 C</gpu_temp>", "<gpu_temp>91 C</gpu_temp>")), [], [])
    health = {p: dict(v, healthy=v["healthy"], host_time=1.0) for p, v in (("pre", pre), ("post", post))}
    result = tmp_path / "sweep-tp1-sglang.json"
    result.write_text((ROOT / "tests/unit/fixtures/h200/sweep-tp1-sglang-k26.json").read_text())
    history = tmp_path / "history.jsonl"
    r = adhoc("sweep_report", {"result": str(result), "host": "h200", "stamp": "20261201T000000Z", "history": str(history),
                               "plot": False, "gpu_health": json.loads(json.dumps(health))})
    assert r["_status"] == "CHANGED", r
    report = Path(r["report"]).read_text()
    assert "## GPU health" in report and "| post | **NO** | 0 | 91 |" in report and "temperature_c=91" in report
    line = json.loads(history.read_text())
    assert line["gpu_health"]["pre"]["healthy"] is True and line["gpu_health"]["post"]["gpus"][0]["temperature_c"] == 91


def test_a_host_declared_gpu_less_is_reported_as_having_no_gpu_not_as_healthy_or_sick():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import without_smi
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_report import health_summary, render

    pre = dict(without_smi(False), concerns=[], host_time=1.0)
    assert health_summary({"pre": pre})["pre"]["no_gpu"] is True
    result = json.loads((ROOT / "tests/unit/fixtures/h200/sweep-tp1-sglang-k26.json").read_text())
    text = render("lab", "20261201T000000Z", result, None, "plot.png", {"pre": pre})
    assert "| pre | no GPU (none expected) | - |" in text and "**NO**" not in text and "| yes |" not in text
