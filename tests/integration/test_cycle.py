"""The whole cycle against the lab, with real systemd, real servers and real ansible-playbook runs."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import BIN, DOUBLE, ROOT, env, playbook, sh

SECRET = "sk-lab-secret-9f8e7d"


def test_cycle_llamacpp_drains_sweeps_restarts_and_answers(llama):
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_start_delay_s": 3, "bc_api_key": SECRET})
    assert run.rc == 0, run.out[-4000:]
    # the reload was waited out by module retries, with a progress line per retry
    assert re.search(r"lab1 reload 00:0\d  loading ", run.out), run.out[-3000:]
    assert "answer: '4'" in run.out
    report = re.search(r"(/\S+/results/lab1/\d{8}T\d{6}Z/sweep-tp1-torch\.report\.md)", run.out).group(1)
    assert Path(report).exists() and Path(report).with_suffix("").with_suffix(".png").exists()
    assert "ran on cpu" in Path(report).read_text()
    history = [json.loads(ln) for ln in (ROOT / "results/history.jsonl").read_text().splitlines()]
    assert history[-1]["host"] == "lab1" and history[-1]["report"] == report
    # the service is back and really serves; the lock is gone; the key stayed secret
    assert sh("systemctl is-active llama-lab").strip() == "active"
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"
    assert SECRET not in run.out
    assert sh("stat -c %a /etc/benchmark-cycle/llama-lab.env").strip() == "600"
    assert SECRET in sh("cat /etc/benchmark-cycle/llama-lab.env")
    assert SECRET not in sh("cat /etc/systemd/system/llama-lab.service")
    assert sh("stat -c %a /var/lib/benchmark-cycle/results").strip() == "755"
    answer = sh(f"curl -s -H 'Authorization: Bearer {SECRET}' -H 'Content-Type: application/json' "
                "-d '{\"prompt\":\"2+2=\",\"max_tokens\":4,\"temperature\":0}' http://127.0.0.1:8080/v1/completions")
    assert json.loads(answer)["choices"][0]["text"] == "4"


def test_cycle_sglang_double_waits_through_closed_port_and_warmup(lab):
    run = playbook("benchmark_cycle.yml", extra_vars=dict(DOUBLE, bc_readiness_delay_s=1))
    assert run.rc == 0, run.out[-4000:]
    phases = re.findall(r"lab1 reload \d\d:\d\d  (\w+)\s+\"([^\"]*)\"", run.out)
    seen = {p for p, _s in phases}
    assert "loading" in seen and "warming" in seen, phases  # refused while loading, 503 while warming
    assert any("CUDA graph" in stage or "Load weight" in stage for _p, stage in phases), phases
    unit = sh("cat /etc/systemd/system/sglang-double.service")
    assert "KillMode=mixed" in unit and "TimeoutStopSec=65" in unit  # lab drain deadline 20 + 15 + margin 30
    assert re.search(r"ExecStart=/usr/bin/python3 -m sglang.launch_server .*--tp-size 8 .*--enable-metrics .*--port 30001", unit)
    assert "# Ansible managed" in unit or "Ansible managed" in unit
    reload_s = float(re.search(r"reload_s: '?([\d.]+)", run.out).group(1))
    assert reload_s >= 5.0  # 3 s load (port closed) + 2 s warmup
    sh("systemctl stop sglang-double")


def test_drain_deadline_aborts_and_leaves_the_service_untouched(lab):
    extra = dict(DOUBLE, bc_drain_deadline_s=3)
    extra["bc_engine_env"] = dict(DOUBLE["bc_engine_env"], BC_DOUBLE_TOKEN_MS="1000", BC_DOUBLE_LOAD_S="0.2", BC_DOUBLE_WARMUP_S="0.2")
    assert playbook("benchmark_cycle.yml", extra_vars=extra).rc == 0  # applies the env, serves
    before = sh("systemctl show -p ExecMainPID --value sglang-double").strip()
    sh("(curl -s -m 60 -d '{\"prompt\":\"x\",\"max_tokens\":40}' http://127.0.0.1:30001/v1/completions >/dev/null &) ; sleep 0.5")
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    assert run.rc != 0
    assert "drain deadline passed: 1.0 request(s) still in flight" in run.out
    assert "set service_drain_on_deadline=force" in run.out
    assert sh("systemctl show -p ExecMainPID --value sglang-double").strip() == before  # never stopped
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"
    sh("systemctl stop sglang-double")


def test_sweep_killed_mid_run_the_service_comes_back_and_the_play_fails(llama):
    sh("printf '#!/bin/sh\\ncase \"$*\" in *bc_marlin*) kill -9 $$;; esac\\nexec /opt/bench-venv/bin/python \"$@\"\\n'"
       " > /usr/local/bin/crashing-python && chmod +x /usr/local/bin/crashing-python")
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_sweep_python": "/usr/local/bin/crashing-python"})
    assert run.rc != 0
    assert "killed by SIGKILL" in run.out
    assert "the service was started again and answers correctly" in run.out
    assert sh("systemctl is-active llama-lab").strip() == "active"
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"


def test_bad_flag_fails_fast_and_rolls_back_to_the_previous_unit(llama):
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_engine_extra_args": ["--no-such-flag"]})
    assert run.rc != 0
    assert "rolled back to the previous unit, which is serving again" in run.out
    assert "journal lines of llama-lab" in run.out  # the failure carries the journal tail
    assert run.seconds < 120
    assert "--no-such-flag" not in sh("cat /etc/systemd/system/llama-lab.service")
    assert sh("systemctl is-active llama-lab").strip() == "active"


def test_second_cycle_is_refused_and_a_stale_lock_is_broken_only_on_request(llama):
    owner = json.dumps({"token": "other-cycle", "user": "alice", "controller": "awx-1", "pid": "4242", "started": "earlier"})
    sh(f"mkdir -p /run/lock/benchmark-cycle-llama-lab.lock && echo '{owner}' > /run/lock/benchmark-cycle-llama-lab.lock/owner.json")
    pid_before = sh("systemctl show -p ExecMainPID --value llama-lab").strip()
    run = playbook("benchmark_cycle.yml")
    assert run.rc != 0 and "another benchmark cycle holds" in run.out and "alice@awx-1" in run.out
    assert "cannot be broken" in run.out
    assert sh("systemctl show -p ExecMainPID --value llama-lab").strip() == pid_before  # untouched
    sh("touch -d '3 hours ago' /run/lock/benchmark-cycle-llama-lab.lock")
    assert "may be stale" in playbook("benchmark_cycle.yml").out
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_lock_break": True})
    assert run.rc == 0, run.out[-3000:]
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"


def test_typo_in_inventory_variable_is_refused_naming_the_fix(llama):
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_readines_timeout_s": 5})
    assert run.rc != 0
    assert "bc_readines_timeout_s -> did you mean bc_readiness_timeout_s?" in run.out
    pid_before = sh("systemctl show -p ExecMainPID --value llama-lab").strip()
    run = playbook("benchmark_cycle.yml", extra_vars={"bc_engine_settings": {"model_path": "/opt/lab-model/lab-tiny.gguf",
                                                                            "mem_fration_static": 0.8}})
    assert run.rc != 0 and "service_unit_settings.mem_fration_static. Supported parameters include" in run.out
    assert sh("systemctl show -p ExecMainPID --value llama-lab").strip() == pid_before  # never stopped


def test_real_site_inventory_parses_and_the_playbook_passes_syntax_check():
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "/usr/bin:/bin"}
    inv = subprocess.run([str(Path(ROOT / ".venv/bin/ansible-inventory")), "-i", "inventory/ct200", "--list"], cwd=ROOT,
                         capture_output=True, text=True, check=True, env=env)
    data = json.loads(inv.stdout)
    assert data["_meta"]["hostvars"]["ct200"]["bc_unit"] == "sglang-k26-ddtree"
    syn = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "--syntax-check", "benchmark_cycle.yml", "-i", "inventory/ct200"],
                         cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    assert syn.returncode == 0, syn.stdout + syn.stderr


def test_playbook_killed_mid_sweep_then_rerun_brings_the_service_back(llama):
    cmd = [str(BIN / "ansible-playbook"), "benchmark_cycle.yml", "-i", "inventory/lab", "-e", "bc_sweep_iters=400"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "ansible.module_utils.bc_marlin" not in sh("pgrep -af [b]c_marlin || true"):
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # the controller dies mid-sweep (a killed terminal, a lost AWX node)
    proc.wait(timeout=60)
    assert sh("systemctl is-active llama-lab", check=False).strip() != "active"  # stopped by the drain, left down
    assert "token" in sh("cat /run/lock/benchmark-cycle-llama-lab.lock/owner.json")  # and the lock held
    run = playbook("benchmark_cycle.yml")
    assert run.rc == 0, run.out[-3000:]
    assert re.search(r"no\s+longer\s+runs\s+on\s+this\s+controller", run.out)  # the dead cycle's lock was broken
    assert sh("systemctl is-active llama-lab").strip() == "active"
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"


def test_server_that_never_gets_ready_fails_within_the_budget_naming_the_phase(lab):
    extra = dict(DOUBLE, bc_readiness_timeout_s=6, bc_readiness_delay_s=1)
    extra["bc_engine_env"] = dict(DOUBLE["bc_engine_env"], BC_DOUBLE_LOAD_S="0.2", BC_DOUBLE_WARMUP_S="100000")
    run = playbook("benchmark_cycle.yml", extra_vars=extra)
    assert run.rc != 0
    assert "is not ready: still warming when the 6 s budget ran out" in run.out
    assert run.seconds < 90  # two bounded waits (the start, then the restart-as-is), not 15 minutes
    sh("systemctl stop sglang-double")
