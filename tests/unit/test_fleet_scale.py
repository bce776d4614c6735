"""The fleet benchmark's own parts (bench/fleet_scale.py, lab/router_double.py), without a lab: the router double
as a real HTTP server on loopback, the recap reader on a real ansible-playbook recap, the batch as Ansible makes it,
and the model's arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "lab"))

import fleet_scale
import router_double


@pytest.fixture
def router():
    router_double.POOL.reset()
    server = ThreadingHTTPServer(("127.0.0.1", 0), router_double.Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def call(url: str, method: str = "GET") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_router_double_counts_who_is_out_exactly(router):
    assert call(router + "/hosts/lab1/out")[0] == 409  # never heard of: in
    assert call(router + "/hosts/lab1/in")[0] == 200
    assert call(router + "/hosts/lab1/out", "POST") == (200, {"host": "lab1", "state": "out", "was": "in"})
    call(router + "/hosts/lab2/out", "POST")
    call(router + "/hosts/lab1/in", "POST")
    call(router + "/hosts/lab3/out", "POST")
    assert call(router + "/hosts/lab1/out")[0] == 409 and call(router + "/hosts/lab2/out")[0] == 200
    _, state = call(router + "/state")
    assert state["out"] == ["lab2", "lab3"] and state["max_out"] == 2
    assert [(e["host"], e["state"], e["out"]) for e in state["events"]] == [
        ("lab1", "out", 1), ("lab2", "out", 2), ("lab1", "in", 1), ("lab3", "out", 2)]
    # a repeated hook (a retry) is a transition the router records, not a second host out
    call(router + "/hosts/lab3/out", "POST")
    assert call(router + "/state")[1]["max_out"] == 2
    call(router + "/reset", "POST")
    assert call(router + "/state")[1] == {"out": [], "max_out": 0, "max_out_hosts": [], "events": [], "samples": []}


def test_the_router_double_refuses_what_is_not_its_api(router):
    assert call(router + "/hosts/lab1/sideways", "POST")[0] == 404
    assert call(router + "/hosts/../etc/out", "POST")[0] == 404
    assert call(router + "/hosts/" + "x" * 65 + "/out", "POST")[0] == 404
    assert call(router + "/state")[1]["events"] == []


def test_the_router_double_samples_each_second_by_its_own_clock():
    router_double.POOL.reset()
    router_double.POOL.set("lab1", "out")
    router_double.POOL.sample()
    router_double.POOL.set("lab1", "in")
    router_double.POOL.sample()
    assert [s[1] for s in router_double.POOL.state()["samples"]] == [["lab1"], []]


@pytest.mark.parametrize(("serial", "count", "batch"), [("1", 24, 1), ("25%", 24, 6), ("50%", 24, 12), ("25%", 3, 1),
                                                        ("34%", 9, 3), ("100%", 4, 4), ("30", 24, 24)])
def test_the_batch_is_ansibles_own(serial, count, batch):
    assert fleet_scale.batch_of(serial, count) == batch


def test_the_recap_and_what_failed_are_read_from_a_real_run(tmp_path):
    """A real ansible-playbook run with a failed, an unreachable and a fine host: the counters of each."""
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  vars: {ansible_python_interpreter: '{{ ansible_playbook_python }}'}\n  hosts:\n"
                   "    good: {ansible_connection: local}\n    bad: {ansible_connection: local}\n"
                   "    gone: {ansible_connection: ssh, ansible_host: 127.0.0.1, ansible_port: 1}\n")
    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.command: 'true'\n"
                    "    - ansible.builtin.fail: {msg: no}\n      when: inventory_hostname == 'bad'\n")
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(play)],
                         capture_output=True, text=True, timeout=120, check=False).stdout
    rows = fleet_scale.recap(out)
    assert rows["good"]["failed"] == 0 and rows["good"]["unreachable"] == 0 and rows["good"]["changed"] == 1
    assert rows["bad"]["failed"] == 1
    assert rows["gone"]["unreachable"] == 1
    # what the run said where a host failed, for a failed roll's message
    assert "FAILED!" in fleet_scale.said_to(out, "bad") and "UNREACHABLE!" in fleet_scale.said_to(out, "gone")
    assert fleet_scale.said_to(out, "good") == "nothing"


def test_the_model_is_calibrated_on_serial_one_and_predicts_the_batches():
    rolls = [{"label": "serial-1", "batch": 1, "hosts": 24, "wall_s": 500.0, "controller_cpu_s": 240.0, "hosts_cpu_s": 240.0,
              "host_cycle_s": 20.0, "overhead_s": 20.0},
             {"label": "serial-25", "batch": 6, "hosts": 24, "wall_s": 275.0, "overhead_s": 25.0},
             {"label": "serial-50", "batch": 12, "hosts": 24, "wall_s": 130.0, "overhead_s": 10.0}]
    m = fleet_scale.model(rolls, cores=2)
    assert (m["t1_s"], m["c_cpu_s"]) == (20.0, 20.0)
    # o + 24 x 20; o + 4 batches of max(20, 6 * 20 / 2) = 60 s; o + 2 batches of 120 s
    assert [r["predicted_s"] for r in m["rows"]] == [500.0, 265.0, 250.0]
    assert m["rows"][1]["error"] == pytest.approx(10 / 265, abs=1e-3)
    assert m["rows"][2]["error"] == pytest.approx(-120 / 250, abs=1e-3)


def test_each_hosts_cycle_is_read_from_the_callbacks_timeline(tmp_path):
    log = tmp_path / "events.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in [
        {"t": 1.0, "event": "start", "task": "Remember when the cycle started (the maintenance window)", "host": None},
        {"t": 1.5, "event": "ok", "task": "cycle : Remember when the cycle started (the maintenance window)", "host": "lab1"},
        {"t": 9.0, "event": "ok", "task": "cycle_lock : Release the lock this cycle holds", "host": "lab1"},
        {"t": 9.5, "event": "ok", "task": "Remember when the cycle started (the maintenance window)", "host": "lab2"},
        {"t": 12.0, "event": "failed", "task": "Sweep", "host": "lab2"}]) + "\n")
    # lab2 never released its lock here: it has no span, rather than a made-up one
    assert fleet_scale.cycle_spans(fleet_scale.events_of(log)) == {"lab1": (1.5, 9.0)}
    assert fleet_scale.cycle_spans(fleet_scale.events_of(tmp_path / "absent.jsonl")) == {}


def test_the_probe_cost_is_the_gap_between_attempts_less_the_delay(tmp_path):
    task = "service_readiness : Wait for the server to be ready"
    log = tmp_path / "events.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in [
        {"t": 10.0, "event": "start", "task": task, "host": None},
        {"t": 10.5, "event": "retry", "task": task, "host": "lab1"}, {"t": 11.8, "event": "retry", "task": task, "host": "lab1"},
        {"t": 13.1, "event": "ok", "task": task, "host": "lab1"},
        {"t": 10.6, "event": "retry", "task": task, "host": "lab2"}, {"t": 12.0, "event": "ok", "task": task, "host": "lab2"},
        {"t": 30.0, "event": "retry", "task": "gpu_benchmark : Sweep tp1 torch", "host": "lab1"}]) + "\n")
    # gaps 1.3, 1.3 (lab1) and 1.4 (lab2), less the 1 s delay: the median 0.3
    assert fleet_scale.probe_cost_s(fleet_scale.events_of(log), 1.0) == pytest.approx(0.3)
    assert fleet_scale.probe_cost_s(fleet_scale.events_of(tmp_path / "none.jsonl"), 1.0) is None


def test_the_fleet_and_the_molecule_labs_never_touch_each_others_containers_or_ports():
    """The fleet stage runs beside the molecule scenarios (./tasks test): each lab removes only its own containers, and
    no two lab hosts (any count up to MAX_HOSTS, and test_vllm_unit.py's host at base + 90) share a loopback port."""
    import lab

    names = ["bc-lab-1", "bc-lab-12", "bc-lab-vllm", "bc-fleet-1", "bc-fleet-9", "bc-fleet-router", "bc-labx", "other-1"]
    assert lab.owned(names, lab.LABS["lab"]) == ["bc-lab-1", "bc-lab-12", "bc-lab-vllm"]
    assert lab.owned(names, lab.LABS["lab"], hosts_only=True) == ["bc-lab-1", "bc-lab-12"]
    assert lab.owned(names, lab.LABS["fleet"]) == ["bc-fleet-1", "bc-fleet-9", "bc-fleet-router"]
    assert lab.owned(names, lab.LABS["fleet"], hosts_only=True) == ["bc-fleet-1", "bc-fleet-9"]
    assert lab.ROUTER in lab.owned([lab.ROUTER], lab.LABS["fleet"])  # the router is the fleet's, removed with it
    ports = [base + one.port_offset + i for one in lab.LABS.values() for i in range(1, lab.MAX_HOSTS + 1)
             for base in (lab.SSH_PORT_BASE, lab.HTTP_PORT_BASE)]
    ports += [lab.SSH_PORT_BASE + 90, lab.HTTP_PORT_BASE + 90, lab.ROUTER_LOOPBACK_PORT]
    assert len(ports) == len(set(ports))
    assert len({one.inventory for one in lab.LABS.values()}) == len(lab.LABS)
    with pytest.raises(SystemExit, match="from 1 to"):
        lab.up(lab.MAX_HOSTS + 1, lab=lab.LABS["fleet"])
