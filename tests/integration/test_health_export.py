"""A host returns to service only with healthy GPUs, and the results go where operators look. The lab
host gets the nvidia-smi double serving the REAL H200's `nvidia-smi -q -x` (tests/unit/fixtures/h200),
or a fault made from it by changing one reading. The cycle's node_exporter textfile is read back by
prometheus_client's parser, its JUnit file by junitparser, and its Grafana annotation is received by a
loopback double of Grafana's API that checks the token and the body."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    H200_REPORT,
    HOST,
    ROOT,
    env,
    gated_sweep_python,
    install_gpu_double,
    lab_setting,
    open_sweep_gate,
    playbook_cmd,
    remove_gpu_double,
    serve_gpu_report,
    sh,
    wait_for_sweep,
)
from junitparser import Failure, JUnitXml
from prometheus_client.parser import text_string_to_metric_families
from test_guarantees import router, with_router

H200 = H200_REPORT.read_text()
TOKEN = "glsa_bcTestToken_7f3e9a"
FAULTS = {
    "remapped_rows_pending=True": ("<remapped_row_pending>No", "<remapped_row_pending>Yes"),
    "ecc_uncorrectable_volatile=2": ("<dram_uncorrectable>0<", "<dram_uncorrectable>2<"),
    "retired_pages_pending=True": ("<pending_retirement>N/A", "<pending_retirement>Yes"),
    "throttle=hw_thermal_slowdown": ("<clocks_event_reason_hw_thermal_slowdown>Not Active",
                                     "<clocks_event_reason_hw_thermal_slowdown>Active"),
}


@pytest.fixture
def gpu_lab(llama):
    install_gpu_double()
    yield llama
    remove_gpu_double()
    sh("rm -rf /var/lib/node-exporter")


def cycle_turning_sick(extra: dict, tmp: Path) -> tuple[int, str, Path]:
    """A cycle whose GPU goes bad during its sweep (the report changes once the sweep has started)."""
    log, junit = tmp / "events.jsonl", tmp / "junit.xml"
    # the sweep held at a gate until the GPU has gone bad: whatever the machine's speed, the change lands during it
    extra = dict(extra, bc_sweep_python=gated_sweep_python())
    proc = subprocess.Popen(playbook_cmd("benchmark_cycle.yml", extra_vars=extra), cwd=ROOT, text=True,
                            env=env(BC_CYCLE_EVENT_LOG=str(log), BC_CYCLE_JUNIT=str(junit)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_for_sweep(proc)
    # a row remap pending: the GPU needs a reset (its own heat after a sweep would only warn)
    serve_gpu_report(H200.replace(*FAULTS["remapped_rows_pending=True"], 1))
    open_sweep_gate()
    out, _ = proc.communicate(timeout=1800)
    return proc.returncode, out, junit


@pytest.mark.parametrize("policy", ["unrouted", "serve"])
@pytest.mark.path("stop.gpu_sick.started",
                  real="the post-sweep GPU check on the host after a real sweep; the textfile, JUnit and Grafana exports")
def test_a_gpu_that_goes_bad_during_the_sweep_fails_the_cycle_and_the_policy_decides_the_router(
        gpu_lab, policy, tmp_path, reliability):
    from doubles.grafana_api import Grafana
    grafana = Grafana(TOKEN)
    try:
        extra = with_router({"bc_gpu_health_policy": policy, "bc_textfile_dir": "/var/lib/node-exporter",
                             "bc_grafana_annotation": {"url": grafana.url, "token": TOKEN, "tags": ["lab"]}})
        sh("mkdir -p /var/lib/node-exporter")
        started = time.monotonic()
        rc, out, junit = cycle_turning_sick(extra, tmp_path)
        flat = " ".join(out.split())
        assert rc != 0 and "GPU health after the sweep: GPU 0 (NVIDIA H200" in flat, flat[-3000:]
        assert "remapped_rows_pending=True" in flat and "the service was started again and answers correctly" in flat
        assert router() == (["remove"] if policy == "unrouted" else ["remove", "restore"])
        assert ("stays OUT of the router" in flat) is (policy == "unrouted")
        assert TOKEN not in out
        # node_exporter's textfile on the host, read back by a real Prometheus parser
        fam = {f.name: f for f in text_string_to_metric_families(sh("cat /var/lib/node-exporter/benchmark_cycle_llama-lab.prom"))}
        assert fam["benchmark_cycle_success"].samples[0].value == 0
        health = {s.labels["phase"]: s.value for s in fam["benchmark_cycle_gpu_healthy"].samples}
        assert health == {"pre": 1, "post": 0}
        assert fam["benchmark_cycle_downtime_seconds"].samples[0].value > 0
        points = {s.labels["m"] for s in fam["benchmark_cycle_sweep_point_seconds"].samples}
        assert points == {str(m) for m in lab_setting("bc_sweep_batch_sizes")}
        # the JUnit file, read by a JUnit parser: a case per step, the sweep's GPU failure on its step
        # a case per step, named by its role's full name (the collection's): keyed here by the role's own name
        cases = {c.name.removeprefix("inference_ops.benchmark_cycle."): c for suite in JUnitXml.fromfile(str(junit)) for c in suite}
        assert {"cycle_lock", "service_unit", "service_drain", "gpu_benchmark", "service_start", "service_readiness",
                "gpu_health"} <= set(cases)
        assert cases["service_readiness"].result == [] and cases["cycle_lock"].result == []
        # the cycle role's own step: the play fails there, with the original error, once the service is back
        assert any(isinstance(r, Failure) for r in cases["cycle"].result)
        # what Grafana received: one annotation of the window, with the token, tagged as failed
        assert len(grafana.annotations) == 1, grafana.received
        note = grafana.annotations[0]
        assert {"benchmark-cycle", HOST, "llama-lab", "failed", "lab"} <= set(note["tags"])
        assert 0 < note["timeEnd"] - note["time"] <= (time.monotonic() - started) * 1000 + 1000
        assert grafana.received[0]["headers"]["Authorization"] == "Bearer " + TOKEN
    finally:
        grafana.close()
    reliability(fault="GPU goes bad during the sweep (policy %s)" % policy,
                injected="the H200 report turns to a pending row remap once the sweep started",
                did="post-check named it; the service was started and serves; router %s; the play failed; textfile, JUnit "
                    "and the Grafana annotation say so" % ("NOT restored" if policy == "unrouted" else "restored"),
                service_after="active, answers 2+2=4", data_kept="full results", detect_s=None, run_s=None)
