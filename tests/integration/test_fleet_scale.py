"""The fleet at the size CI affords (#31): 9 lab hosts (BC_FLEET_HOSTS), the SGLang double on
each under systemd (its unit applied by tests/integration/apply_unit.yml), every router hook talking to one router
double, the real cycle rolled in batches of 3 (serial 34%) with three faulty hosts. It is the one real case of the
path `roll.fleet` (#45: molecule's fleet scenario, 3 hosts at serial 1, walked the same path and is merged here): the
healthy hosts of the first two batches each out of the router and back once, never more out at once than a batch and
the failed hosts it keeps out (exact and sampled by the router), a failure after the stop that still starts the
service, the failure share, the roll stopped and the later batches untouched (their servers' PIDs).
bench/fleet_scale.py does the rolls and checks each invariant from what the router saw and the hosts say;
`./tasks fleet 24` is the full run whose figures are in docs/fleet.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import fleet_scale


@pytest.mark.path("roll.fleet", real="nine hosts behind a router double, in batches, with faults placed")
def test_a_fleet_rolls_in_batches_and_stops_at_its_failure_share(reliability):
    out = ROOT / "results" / "fleet" / "ci.json"
    hosts = os.environ.get("BC_FLEET_HOSTS", "9")
    try:
        rc = fleet_scale.main(["--hosts", hosts, "--serials", "--faults-serial", "34%", "--apply-unit", "--out", str(out)])
    finally:
        # the fleet's hosts and router removed (this stage runs beside integration and vllm; ./tasks fleet leaves
        # them for a look): nothing of it left running
        subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "down", "--lab", "fleet"], check=False, timeout=600)
    summary = json.loads(out.read_text())
    assert rc == 0, "\n".join(summary["problems"])
    assert summary["install"]["rc"] == 0 and not summary["rolls"], summary["install"]
    faults, roll = summary["faults"]["placed"], summary["faults"]["result"]
    # never more out of the router at once than a batch and the faulty hosts it keeps out (exact and sampled by the
    # router); each healthy host of the first two batches out once and back (fleet_scale.faults_problems)
    kept_out = len(faults["router_out_at_end"])
    assert 1 <= roll["max_out"] <= roll["batch"] + kept_out and roll["max_out_sampled"] <= roll["batch"] + kept_out, roll
    # the never-ready host (first batch) was within the failure share; the second batch's sick GPU and unreachable host
    # were not (Ansible's own count leaves the unreachable one out): the third batch was refused at its first task,
    # untouched (fleet_scale checks its router transitions, its recap and its servers' PIDs)
    assert {faults["never_ready"], faults["bad_gpu"], faults["unreachable_after_stop"]} <= set(faults["failed"])
    assert set(faults["later_batches"]) <= set(faults["failed"])
    assert all(state == "active" for state in faults["services_after"].values()), faults["services_after"]
    result = roll
    reliability(fault="a fleet roll with three faulty hosts",
                injected=f"{hosts} hosts in batches of {roll['batch']} behind a router double, bc_max_fail_percentage "
                         f"{faults['max_fail_percentage']}: {faults['never_ready']} never ready (batch 1); {faults['bad_gpu']}'s GPU "
                         f"bad during the sweep and {faults['unreachable_after_stop']} unreachable after its stop (batch 2)",
                did="batch 1 within the share, batch 2 beyond it (the unreachable host counted): the next batch refused at its "
                    f"first task, untouched; at most {result['max_out']} out of the router at once",
                service_after="all active (the unreachable host's by its dead-man switch); out of the router: "
                              + (", ".join(faults["router_out_at_end"]) or "none"),
                data_kept="each finished host's results", detect_s=None, run_s=result["wall_s"])
