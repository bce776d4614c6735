"""What the cycle exports, read back by real parsers: the node_exporter textfile by prometheus_client's
text parser (the format node_exporter's textfile collector reads), the JUnit file by junitparser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.module_utils.bc_export import junit, textfile
from junitparser import Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
SWEEP = {"backend": "sglang", "tp_size": 8, "wall_s": 14.2,
         "points": [{"m": 1, "ms": 0.0866, "tflops": 8.1, "gbs": 2291.5}, {"m": 256, "ms": 0.511, "tflops": 210.0, "gbs": 388.0}]}
HEALTH = {"pre": {"gpus": [{"index": 0, "uuid": "GPU-17e7", "temperature_c": 33, "ecc_uncorrectable_volatile": 0,
                            "ecc_uncorrectable_aggregate": None, "problems": []}]},
          "post": {"gpus": [{"index": 0, "uuid": "GPU-17e7", "temperature_c": 91, "ecc_uncorrectable_volatile": 2,
                             "ecc_uncorrectable_aggregate": 2, "problems": ["temperature_c"]}]}}


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_textfile_parses_and_holds_the_cycle():
    summary = {"host": 'ct"200', "unit": "sglang-k26", "failed": False, "strategy": "release", "downtime_s": 13.7,
               "router_out_s": 22.1, "phases": {"drain": 1.0, "stop": None, "sweep": 12.3, "reload": None},
               "freed_mib": 131598, "gpu_health": HEALTH}
    fam = families(textfile(summary, [SWEEP], now=1796126000.0))
    assert fam["benchmark_cycle_success"].samples[0].value == 1
    assert fam["benchmark_cycle_success"].samples[0].labels == {"host": 'ct"200', "unit": "sglang-k26"}  # escaped, read back
    assert fam["benchmark_cycle_downtime_seconds"].samples[0].value == 13.7
    assert fam["benchmark_cycle_strategy_info"].samples[0].labels["strategy"] == "release"
    assert fam["benchmark_cycle_release_freed_bytes"].samples[0].value == 131598 * 1024 * 1024
    phases = {s.labels["phase"]: s.value for s in fam["benchmark_cycle_phase_seconds"].samples}
    assert phases == {"drain": 1.0, "sweep": 12.3}  # no value is no sample, never a NaN
    points = {(s.labels["m"], s.labels["tp"]): s.value for s in fam["benchmark_cycle_sweep_point_seconds"].samples}
    assert points == {("1", "8"): pytest.approx(0.0000866), ("256", "8"): pytest.approx(0.000511)}
    healthy = {s.labels["phase"]: s.value for s in fam["benchmark_cycle_gpu_healthy"].samples}
    assert healthy == {"pre": 1, "post": 0}
    ecc = [s for s in fam["benchmark_cycle_gpu_ecc_uncorrectable_errors"].samples if s.labels["phase"] == "pre"]
    assert [s.labels["scope"] for s in ecc] == ["volatile"]  # aggregate N/A: left out
    assert all(f.type == "gauge" for f in fam.values())


def test_a_failed_cycle_exports_success_0():
    fam = families(textfile({"host": "h", "unit": "u", "failed": True}, [], now=1.0))
    assert fam["benchmark_cycle_success"].samples[0].value == 0
    assert "benchmark_cycle_downtime_seconds" not in fam


def test_junit_has_a_case_per_step_and_a_rescued_failure_still_fails():
    steps = [{"host": "ct200", "step": "cycle_lock", "seconds": 0.4, "failures": [], "skipped": False},
             {"host": "ct200", "step": "gpu_benchmark", "seconds": 14.2, "failures": ["Sweep tp8 sglang: the sweep exited 3"],
              "skipped": False},
             {"host": "ct200", "step": "service_drain", "seconds": 0.0, "failures": [], "skipped": True}]
    xml = JUnitXml.fromstring(junit(steps))
    suites = list(xml)
    assert len(suites) == 1 and suites[0].tests == 3 and suites[0].failures == 1
    cases = {c.name: c for c in suites[0]}
    assert isinstance(cases["gpu_benchmark"].result[0], Failure) and "exited 3" in cases["gpu_benchmark"].result[0].message
    assert isinstance(cases["service_drain"].result[0], Skipped) and cases["cycle_lock"].result == []
    assert abs(cases["gpu_benchmark"].time - 14.2) < 1e-6


def test_the_real_h200_sweep_exports():
    real = json.loads((ROOT / "tests/unit/fixtures/h200/sweep-tp1-sglang-k26.json").read_text())
    fam = families(textfile({"host": "h200", "unit": "u"}, [real], now=2.0))
    got = {s.labels["m"]: s.value for s in fam["benchmark_cycle_sweep_point_seconds"].samples}
    assert got == {str(p["m"]): pytest.approx(p["ms"] / 1000) for p in real["points"]} and len(got) == 6
