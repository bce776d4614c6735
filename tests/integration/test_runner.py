"""The cycle through ansible-runner, with a private data dir laid out as AWX lays it out
(project/, env/extravars from survey answers, env/settings, inventory), asserting on job events."""

from __future__ import annotations

import json
import os
from pathlib import Path

import ansible_runner
import pytest
from conftest import INVENTORY, ROOT, sh

SECRET = "sk-runner-secret-41c2"


@pytest.mark.path("stop.ready", real="ansible-runner as AWX runs it (events, artifacts, a credential file)")
def test_cycle_through_ansible_runner_as_awx_runs_it(llama, tmp_path):
    pdd = tmp_path / "pdd"
    (pdd / "env").mkdir(parents=True)
    (pdd / "project").symlink_to(ROOT)
    # survey answers arrive as strings, the way AWX passes them
    (pdd / "env" / "extravars").write_text(json.dumps({
        "bc_target": "inference", "bc_sweep_batch_sizes": "1,2,4,8", "bc_sweep_tp_sizes": "1",
        "bc_sweep_backends": "torch", "bc_readiness_timeout_s": 120, "bc_stop_policy": "always", "bc_start_delay_s": 3,
        # the key as AWX's credential type (awx/configure.yml) hands it over: a 0600 file, its path in BC_API_KEY_FILE,
        # read as inventory/ct200 reads it
        "bc_api_key": "{{ lookup('inference_ops.benchmark_cycle.bc_secret', 'BC_API_KEY') }}"}))
    key_file = tmp_path / "credential-file"
    key_file.write_text(SECRET + "\n")
    key_file.chmod(0o600)
    (pdd / "env" / "settings").write_text(json.dumps({"idle_timeout": 0, "job_timeout": 3600}))
    (pdd / "env" / "envvars").write_text(json.dumps({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "BC_API_KEY_FILE": str(key_file),
                                                     "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}))
    events: list[dict] = []
    r = ansible_runner.run(private_data_dir=str(pdd), playbook="benchmark_cycle.yml", inventory=str(ROOT / INVENTORY),
                           event_handler=lambda e: events.append(e) or True, quiet=True)
    assert r.status == "successful" and r.rc == 0, r.stdout.read()[-3000:]
    kinds = {e["event"] for e in events}
    retries = {e["event_data"]["task"] for e in events if e["event"] == "runner_retry"}
    # the reload's probes, and the sweep's polls (each one the controller's heartbeat): nothing else retries. How many
    # times each retries is the machine's speed (under load the first probe can find the server ready): not asserted
    assert retries <= {"Wait for the server to be ready", "Sweep tp1 torch"}, retries
    assert any(e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Wait for the server to be ready" for e in events)
    launch = next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Start the sweep tp1 torch")
    assert launch["event_data"]["res"].get("ansible_job_id") and "runner_on_ok" in kinds  # the sweep ran detached
    sweep = next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Sweep tp1 torch")
    assert [p["m"] for p in sweep["event_data"]["res"]["points"]] == [1, 2, 4, 8]  # "1,2,4,8" became a list
    artifacts = Path(r.config.artifact_dir)
    assert (artifacts / "stdout").stat().st_size > 0 and any((artifacts / "job_events").iterdir())
    assert (artifacts / "status").read_text() == "successful"
    # the API key is in the credential's file, and nowhere in what the job printed or recorded: runner keeps the job's
    # environment in artifacts/<id>/command (ansible_runner/runner.py 2.4.3:139-145), which holds the file's path only
    leaked = [p for p in artifacts.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert leaked == [], leaked
    assert json.loads((artifacts / "command").read_text())["env"]["BC_API_KEY_FILE"] == str(key_file)
    assert sh("systemctl is-active llama-lab").strip() == "active"
    # the job's artifacts (AWX shows set_stats on the job): the outcome published by the cycle, the reports added
    stats = next(e for e in events if e["event"] == "playbook_on_stats")["event_data"]["artifact_data"]["benchmark_cycle"]
    host = next(iter(stats))
    assert stats[host]["status"] == "complete" and stats[host]["failure"] is None and stats[host]["reports"], stats
    # and the server got it: the unit's environment file (0600) holds it, and the server refuses a request without it
    assert sh(f"grep -c '{SECRET}' /etc/benchmark-cycle/llama-lab.env").strip() == "1"
    assert sh("curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "
              "-d '{\"prompt\": \"1\", \"n_predict\": 1}' http://127.0.0.1:8080/completion").strip() == "401"


@pytest.mark.path("stop.sweep_failed.started", real="ansible-runner's artifacts of a failed job")
def test_a_failed_job_publishes_its_outcome_too(llama, tmp_path):
    """A roll that stops at a failed host runs no later play: the outcome (what failed, whether the service was started
    again, the drain, the router) is published by the cycle itself, on every exit, for AWX to show on the failed job."""
    pdd = tmp_path / "pdd"
    (pdd / "env").mkdir(parents=True)
    (pdd / "project").symlink_to(ROOT)
    sh("printf '#!/bin/sh\\ncase \"$1\" in -c) exec /opt/bench-venv/bin/python \"$@\";; esac\\nexit 3\\n' > /usr/local/bin/failing-python"
       " && chmod +x /usr/local/bin/failing-python")
    (pdd / "env" / "extravars").write_text(json.dumps({
        "bc_target": "inference", "bc_sweep_batch_sizes": "1,2", "bc_sweep_tp_sizes": "1", "bc_sweep_backends": "torch",
        "bc_stop_policy": "always", "bc_start_delay_s": 1, "bc_sweep_python": "/usr/local/bin/failing-python"}))
    (pdd / "env" / "envvars").write_text(json.dumps({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                                     "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}))
    events: list[dict] = []
    r = ansible_runner.run(private_data_dir=str(pdd), playbook="benchmark_cycle.yml", inventory=str(ROOT / INVENTORY),
                           event_handler=lambda e: events.append(e) or True, quiet=True)
    assert r.status == "failed", r.stdout.read()[-3000:]
    stats = next(e for e in events if e["event"] == "playbook_on_stats")["event_data"]["artifact_data"]["benchmark_cycle"]
    outcome = next(iter(stats.values()))
    assert outcome["status"] == "failed" and "the service was started again" in outcome["failure"], outcome
    assert outcome["strategy"] == "stop" and outcome["results_dir"], outcome
    assert sh("systemctl is-active llama-lab").strip() == "active"
