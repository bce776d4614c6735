"""The cycle through ansible-runner, with a private data dir laid out as AWX lays it out
(project/, env/extravars from survey answers, env/settings, inventory), asserting on job events."""

from __future__ import annotations

import json
import os
from pathlib import Path

import ansible_runner
from conftest import INVENTORY, ROOT, sh

SECRET = "sk-runner-secret-41c2"


def test_cycle_through_ansible_runner_as_awx_runs_it(llama, tmp_path):
    pdd = tmp_path / "pdd"
    (pdd / "env").mkdir(parents=True)
    (pdd / "project").symlink_to(ROOT)
    # survey answers arrive as strings, the way AWX passes them
    (pdd / "env" / "extravars").write_text(json.dumps({
        "bc_target": "inference", "bc_sweep_batch_sizes": "1,2,4,8", "bc_sweep_tp_sizes": "1",
        "bc_sweep_backends": "torch", "bc_readiness_timeout_s": 120, "bc_stop_policy": "always", "bc_start_delay_s": 3,
        "bc_api_key": SECRET}))
    (pdd / "env" / "settings").write_text(json.dumps({"idle_timeout": 0, "job_timeout": 3600}))
    (pdd / "env" / "envvars").write_text(json.dumps({"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                                                     "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}))
    events: list[dict] = []
    r = ansible_runner.run(private_data_dir=str(pdd), playbook="benchmark_cycle.yml", inventory=str(ROOT / INVENTORY),
                           event_handler=lambda e: events.append(e) or True, quiet=True)
    assert r.status == "successful" and r.rc == 0, r.stdout.read()[-3000:]
    kinds = {e["event"] for e in events}
    retries = {e["event_data"]["task"] for e in events if e["event"] == "runner_retry"}
    # the reload's probes, and the sweep's polls (each one the controller's heartbeat): nothing else retries
    assert "Wait for the server to be ready" in retries and retries <= {"Wait for the server to be ready", "Sweep tp1 torch"}, retries
    launch = next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Start the sweep tp1 torch")
    assert launch["event_data"]["res"].get("ansible_job_id") and "runner_on_ok" in kinds  # the sweep ran detached
    sweep = next(e for e in events if e["event"] == "runner_on_ok" and e["event_data"]["task"] == "Sweep tp1 torch")
    assert [p["m"] for p in sweep["event_data"]["res"]["points"]] == [1, 2, 4, 8]  # "1,2,4,8" became a list
    artifacts = Path(r.config.artifact_dir)
    assert (artifacts / "stdout").stat().st_size > 0 and any((artifacts / "job_events").iterdir())
    assert (artifacts / "status").read_text() == "successful"
    # the API key is in the extravars AWX wrote, and nowhere in what the job printed or recorded
    leaked = [p for p in artifacts.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert leaked == [], leaked
    assert sh("systemctl is-active llama-lab").strip() == "active"
