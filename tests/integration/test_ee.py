"""The cycle inside the execution environment (execution-environment.yml, built by lab/ee.py), run the way AWX's
execution nodes run a job: ansible-runner with process isolation (podman), a private data dir holding a copy of the
project, the inventory, the survey's answers and the credential's injected file (#28).

What differs from AWX, and why: podman is rootful here and runner runs as root, so the job's container runs as uid 0
(`--user=0`): on an AWX execution node, rootless podman maps the container's uid 0 to the node's own unprivileged user,
the owner of the private data dir (the image's USER 1000 could not write the 0700 artifacts folder runner makes). The
machine credential is a key file in env/ named by the inventory, not runner's ssh-agent path. The lab hosts are reached
over the host's network (their ssh ports are published on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import ansible_runner
import pytest
import yaml
from conftest import HOST, INVENTORY, ROOT, SWEEP_RUNNING, gated_sweep_python, serving, sh, wait_in_host, wait_serving

# On one worker, one after the other (the xdist_group): the kill finds its job's container by the image it runs
# (`podman ps --filter ancestor=`), which another worker's job would also match
pytestmark = pytest.mark.xdist_group("ee")
SECRET = "sk-ee-secret-7d1f"


@pytest.fixture(scope="module")
def ee_image() -> str:
    """The EE ./tasks built here (BC_EE_LOCAL_IMAGE), else built now (cached by its recipe: lab/ee.py)."""
    if os.environ.get("BC_EE_LOCAL_IMAGE"):
        return os.environ["BC_EE_LOCAL_IMAGE"]
    proc = subprocess.run([sys.executable, str(ROOT / "lab/ee.py"), "build"], capture_output=True, text=True, timeout=3600,
                          check=False, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def project_copy(dest: Path) -> None:
    """What an AWX project sync checks out: the tracked files (and new ones not ignored), links as links (the clone's view
    of itself as the collection, collections/ansible_collections/inference_ops/benchmark_cycle, is one), nothing built
    or cached."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).symlink_to(os.readlink(src))
        elif src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def private_data_dir(tmp: Path, extravars: dict, results: Path) -> Path:
    pdd = tmp / "pdd"
    (pdd / "env").mkdir(parents=True)
    (pdd / "inventory").mkdir()
    project_copy(pdd / "project")
    # the inventory AWX writes for the job: the lab host and its group's variables, the key as a file of the job's own
    lab = yaml.safe_load((ROOT / INVENTORY / "hosts.yml").read_text())
    key = Path(lab["all"]["vars"]["ansible_ssh_private_key_file"])
    shutil.copy(key, pdd / "env" / "machine_key")
    lab["all"]["vars"] = dict(yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text()),
                              ansible_ssh_private_key_file="/runner/env/machine_key")
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(lab))
    # the credential type's injector (awx/configure.yml): the key in a 0600 file, its path in BC_API_KEY_FILE
    (pdd / "env" / "bc_api_key").write_text(SECRET + "\n")
    (pdd / "env" / "extravars").write_text(json.dumps(extravars))
    (pdd / "env" / "envvars").write_text(json.dumps({"BC_API_KEY_FILE": "/runner/env/bc_api_key", "BC_RESULTS_DIR": "/results"}))
    (pdd / "env" / "settings").write_text(json.dumps({"idle_timeout": 0, "job_timeout": 3600}))
    for secret in ("machine_key", "bc_api_key"):
        (pdd / "env" / secret).chmod(0o600)
    return pdd


def run_kwargs(pdd: Path, image: str, results: Path, ident: str) -> dict:
    return {"private_data_dir": str(pdd), "playbook": "benchmark_cycle.yml", "ident": ident, "quiet": True,
            "process_isolation": True, "process_isolation_executable": "podman", "container_image": image,
            "container_options": ["--network=host", "--user=0"], "container_volume_mounts": [f"{results}:/results:Z"]}


SURVEY = {"bc_target": "inference", "bc_sweep_batch_sizes": "1,2,4,8", "bc_sweep_tp_sizes": "1", "bc_sweep_backends": "torch",
          "bc_readiness_timeout_s": 120, "bc_stop_policy": "always", "bc_start_delay_s": 1,
          "bc_api_key": "{{ lookup('inference_ops.benchmark_cycle.bc_secret', 'BC_API_KEY') }}"}


@pytest.mark.path("stop.ready", real="the built execution environment (podman) running the cycle")
def test_the_cycle_runs_inside_the_execution_environment_as_an_awx_job(llama, ee_image, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    pdd = private_data_dir(tmp_path, SURVEY, results)
    events: list[dict] = []
    r = ansible_runner.run(**run_kwargs(pdd, ee_image, results, "ee-cycle"), event_handler=lambda e: events.append(e) or True)
    out = r.stdout.read()
    assert r.status == "successful" and r.rc == 0, out[-3000:]
    artifacts = Path(r.config.artifact_dir)
    command = json.loads((artifacts / "command").read_text())["command"]
    assert command[:2] == ["podman", "run"] and ee_image in command  # it ran in the image, not on this machine
    # the EE's own ansible-core and collections (the profile_tasks callback of ansible.cfg is ansible.posix's)
    assert "TASKS RECAP" in out
    sweep = next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Sweep tp1 torch")
    assert [p["m"] for p in sweep["event_data"]["res"]["points"]] == [1, 2, 4, 8]
    # the results came out through the results volume (the project copy is thrown away after a job)
    reports = list(results.glob(f"{HOST}/*/*.report.md"))
    assert reports, sorted(str(p) for p in results.rglob("*"))
    stats = next(e for e in events if e["event"] == "playbook_on_stats")["event_data"]["artifact_data"]["benchmark_cycle"]
    assert stats[HOST]["status"] == "complete" and stats[HOST]["results_dir"] == "/results", stats
    assert all(r.startswith(f"/results/{HOST}/") for r in stats[HOST]["reports"]), stats
    # the key arrived through the credential's file and is nowhere in what the job recorded or left on the volume
    kept = [*artifacts.rglob("*"), *results.rglob("*")]
    leaked = [p for p in kept if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert leaked == [] and SECRET not in out
    assert serving(api_key=SECRET) == "active, answers 2+2=4"  # the server has it: it answers a request with it
    assert serving().endswith("no answer")  # and refuses one without
    assert sh("systemctl is-active llama-lab").strip() == "active"


@pytest.mark.path("switch.fired.started", real="podman kill of the job's container; the host's switch and its clock")
def test_an_execution_environment_killed_mid_sweep_is_covered_by_the_hosts_dead_man_switch(llama, ee_image, tmp_path,
                                                                                          reliability):
    """The job's container is killed while the host is stopped for the sweep (a node lost, a pod evicted): nothing of
    the controller is left to start the service. The host's switch does, when the controller's last promise of a
    next contact runs out (its journal says so); the time from the kill to serving is recorded, not asserted."""
    results = tmp_path / "results"
    results.mkdir()
    # the gate holds the sweep until the kill; its budget bounds the controller's promise made at the sweep's launch (a
    # kill before the first poll's heartbeat waits that out: the switch's worst case, not its grace)
    # (the stop keeps the lab's own bound: a fixed 10 s one killed a slow but healthy systemctl stop beside stress-ng)
    sweep_budget = 120
    extravars = dict(SURVEY, bc_sweep_python=gated_sweep_python(), bc_sweep_timeout_s=sweep_budget)
    pdd = private_data_dir(tmp_path, extravars, results)
    thread, runner = ansible_runner.run_async(**run_kwargs(pdd, ee_image, results, "ee-kill"))
    try:
        # the sweep, or the job's end first (a cycle refused before its sweep): never a wait that outlives the job
        wait_in_host(SWEEP_RUNNING, 600, stop=lambda: not thread.is_alive(), what="the sweep")
        assert thread.is_alive(), "the job ended (%s) before its sweep ran: %s" % (
            runner.status, (Path(runner.config.artifact_dir) / "stdout").read_text(errors="replace")[-3000:])
        names = subprocess.run(["podman", "ps", "--filter", f"ancestor={ee_image}", "--format", "{{.Names}}"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.split()
        assert len(names) == 1, names
        since = int(sh("date +%s")) - 1  # this case's switch, not an earlier one's on this long-lived host
        subprocess.run(["podman", "kill", names[0]], check=True, timeout=60, capture_output=True)
        killed_at = time.monotonic()
        thread.join(timeout=120)
        assert not thread.is_alive() and runner.status in ("failed", "error"), runner.status
        assert sh("systemctl is-active llama-lab", check=False).strip() != "active"
        grace = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())["bc_switch_grace_s"]
        # a hang guard sized for a loaded machine (the longest promise, the grace, the server's start, minutes to spare),
        # not a timing claim
        wait_serving(sweep_budget + 60 + grace + 300, api_key=SECRET, what="the service back by the switch")
        back_s = time.monotonic() - killed_at
        journal = sh(f"journalctl --no-pager --since @{since} -u bc-deadman-llama-lab.service -o cat || true")
        assert "the heartbeat of the controller stopped" in journal, journal
        assert not sh("pgrep -af [b]c_marlin || true").strip()  # the orphaned sweep ended with it
    finally:
        sh("rm -f /usr/local/bin/bc-gated-python")
        subprocess.run(["podman", "rm", "-f", "ansible_runner_ee-kill"], capture_output=True, timeout=60, check=False)
    reliability(fault="the execution environment killed mid-sweep",
                injected="podman kill of the ansible-runner job's container (process isolation, the built EE) while the "
                         "host was stopped for the sweep",
                did="the host's dead-man switch ended the orphaned sweep and started the service (time: kill to serving)",
                service_after=serving(api_key=SECRET), data_kept="-", detect_s=back_s, run_s=None)
