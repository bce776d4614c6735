"""The whole cycle against the lab, with real systemd, real servers and real ansible-playbook runs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import CONTAINER, DOUBLE, HOST, ROOT, Run, playbook, serving, sh, wait_in_host

SECRET = "sk-lab-secret-9f8e7d"
# a served model name with shell syntax in it: it must reach the server as one literal argument
ALIAS = "lab $(touch /tmp/pwned) `touch /tmp/pwned2`; x"


# a fixed task timeout once bounded the host's first contact, ssh master and module transfer included: a controller
# busy enough to take longer than that to open the master failed the preflight (#45); the fault is a master that
# opens this much slower than that old bound
OLD_FIXED_TASK_TIMEOUT_S = 30
SLOW_MASTER_S = OLD_FIXED_TASK_TIMEOUT_S + 5
# the lab's whole sweep and its plot, as inventory/lab gives them (a parallel worker's own inventory cuts both:
# conftest.one_host_inventory): this case proves the sweep and the plot in full
LAB_VARS = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())
FULL_SWEEP = {"bc_sweep_batch_sizes": LAB_VARS["bc_sweep_batch_sizes"], "bc_sweep_routing": LAB_VARS["bc_sweep_routing"],
              "gpu_benchmark_plot": True}


@pytest.mark.path("stop.ready", real="the whole cycle against the real llama-server under systemd; the host's process "
                  "table and cgroups (server-named processes outside the unit); the server's argv as systemd starts it (no "
                  "shell); an HTTP annotation refused by a Grafana double")
def test_cycle_llamacpp_drains_sweeps_restarts_and_answers(llama, tmp_path, monkeypatch, reliability):
    """The green stop path's one cycle, asserting all it promises: the drain, the sweep and its reports, the reload
    waited out, the key kept secret, nothing world-writable; the first contact slower than the old fixed task bound;
    processes that never belonged to the unit left alone; user strings reaching the server as literal arguments; a
    Grafana that refuses the token a warning, not a failed cycle."""
    from doubles.grafana_api import Grafana
    from test_health_export import TOKEN as GRAFANA_TOKEN

    # a 10 s load (ExecStartPre): long enough for a probe to land in it on a busy machine; the first contact's ssh master
    # (a fresh control path dir: no master of an earlier run) opens slower than the old fixed task timeout
    monkeypatch.setenv("BC_SLOW_MASTER_S", str(SLOW_MASTER_S))
    strays = started_strays()
    grafana = Grafana("another-token")
    try:
        run = playbook("benchmark_cycle.yml", extra_vars={
            **FULL_SWEEP, "bc_start_delay_s": 10, "bc_api_key": SECRET, "ansible_control_path_dir": str(tmp_path / "cp"),
            "ansible_ssh_executable": str(ROOT / "tests/integration/slow_master_ssh.sh"),
            "bc_engine_settings": dict(LAB_SETTINGS, served_model_name=ALIAS),
            "bc_grafana_annotation": {"url": grafana.url, "token": GRAFANA_TOKEN}})
        assert run.rc == 0, run.out[-4000:]
        strays_left_alone(run)
        # the Grafana double refused the token: a warning, the cycle green, the token in no output
        assert "WARNING: the Grafana annotation failed: HTTP 401" in run.out and GRAFANA_TOKEN not in run.out
        assert json.loads(grafana.received[0]["body"])["text"].startswith(f"benchmark cycle on {HOST}")
    finally:
        grafana.close()
        strays()
    first = run.at("Read which process the unit runs", "start")
    assert run.at("Read which process the unit runs") - first >= SLOW_MASTER_S  # the slow master was this task's
    # the reload was waited out by module retries, with a progress line per retry
    assert re.search(rf"{HOST} reload \d\d:\d\d  loading ", run.out), run.out[-3000:]
    assert "answer: '4'" in run.out
    assert "Publish the host's outcome as job artifacts" in run.out
    report = re.search(rf"(/\S+/results/{HOST}/\d{{8}}T\d{{6}}Z/sweep-tp1-torch\.report\.md)", run.out).group(1)
    assert Path(report).exists() and Path(report).with_suffix("").with_suffix(".png").exists()
    assert "ran on cpu" in Path(report).read_text()
    # this host's last line (the other lab hosts' cycles write theirs to the same history)
    history = [h for ln in (ROOT / "results/history.jsonl").read_text().splitlines() if (h := json.loads(ln))["host"] == HOST]
    assert history[-1]["report"] == report
    # the service is back and really serves; the lock is gone; the key stayed secret
    assert sh("systemctl is-active llama-lab").strip() == "active"
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"
    assert SECRET not in run.out
    assert sh("stat -c %a /etc/benchmark-cycle/llama-lab.env").strip() == "600"
    assert SECRET in sh("cat /etc/benchmark-cycle/llama-lab.env")
    assert SECRET not in sh("cat /etc/systemd/system/llama-lab.service")
    assert sh("stat -c %a /var/lib/benchmark-cycle/results").strip() == "755"
    # nothing the cycle writes is world-writable, on the host or on the controller
    assert sh("find /var/lib/benchmark-cycle /etc/benchmark-cycle /etc/systemd/system/llama-lab.service -perm -o+w").strip() == ""
    assert [p for p in (ROOT / "results").rglob("*") if p.stat().st_mode & 0o002] == []
    answer = sh(f"curl -s -H 'Authorization: Bearer {SECRET}' -H 'Content-Type: application/json' "
                "-d '{\"prompt\":\"2+2=\",\"max_tokens\":4,\"temperature\":0}' http://127.0.0.1:8080/v1/completions")
    assert json.loads(answer)["choices"][0]["text"] == "4"
    # the alias reached the server as one argv element, byte for byte, and no shell ever ran it
    assert sh("ls /tmp/pwned /tmp/pwned2 2>/dev/null || true").strip() == ""
    models = json.loads(sh(f"curl -s -H 'Authorization: Bearer {SECRET}' http://127.0.0.1:8080/v1/models"))
    assert [m["id"] for m in models["data"]] == [ALIAS]
    reliability(fault="server-named processes outside the unit",
                injected="a hand-started llama-server, one inside another unit, and a compiler building llama-server.cpp",
                did="none belonged to the unit (its cgroup, its main PID's descendants, the engine's exact names): all left "
                    "alone; the cycle completed",
                service_after=serving(api_key=SECRET), data_kept="full results", detect_s=None, run_s=run.seconds)



def started_strays():
    """Processes that never belonged to the unit, running before the cycle: a server process outside any unit (a
    hand-started run), a same-named one in another service, and a compiler building llama-server.cpp (it only mentions
    the name). Returns what ends them. Only the unit's own former processes with the engine's exact names are leftovers
    (tests/unit/test_unit_lifecycle.py)."""
    sh("systemd-run --unit other-llama --property=Type=exec bash -c 'exec -a llama-server sleep 3600'")
    subprocess.Popen(["podman", "exec", CONTAINER, "bash", "-c", "exec -a llama-server sleep 3601"])
    subprocess.Popen(["podman", "exec", CONTAINER, "bash", "-c",
                      "exec -a cc1plus python3 -c 'import time; time.sleep(3600)' tools/server/llama-server.cpp"])
    wait_in_host("pgrep -f '^llama-server 3601' >/dev/null && pgrep -f '[c]c1plus' >/dev/null", 300)  # all run before the cycle
    return lambda: sh("systemctl stop other-llama; pkill -f '^llama-server 3601'; pkill -f '[c]c1plus'; true")


def strays_left_alone(run: Run) -> None:
    assert re.search(r"leftovers_killed: false", run.out)
    assert sh("pgrep -f '^llama-server 3601' || true").strip()  # the hand-started one survives
    assert sh("systemctl is-active other-llama").strip() == "active"  # another service's process is not ours
    assert sh("pgrep -f '[c]c1plus' || true").strip()  # a process that only mentions the server's name survives


@pytest.mark.path("stop.ready", real="a server whose port is closed while loading, then warming (time)")
def test_cycle_sglang_double_waits_through_closed_port_and_warmup(lab):
    # an 8 s load (port closed) and a 6 s warmup (503): long enough for a probe to land in each on a busy machine
    double_env = dict(DOUBLE["bc_engine_env"], BC_DOUBLE_LOAD_S="8", BC_DOUBLE_WARMUP_S="6")
    run = playbook("benchmark_cycle.yml", extra_vars=dict(DOUBLE, bc_readiness_delay_s=1, bc_engine_env=double_env))
    assert run.rc == 0, run.out[-4000:]
    phases = re.findall(rf"{HOST} reload \d\d:\d\d  (\w+)\s+\"([^\"]*)\"", run.out)
    seen = {p for p, _s in phases}
    assert "loading" in seen and "warming" in seen, phases  # refused while loading, 503 while warming
    assert any("CUDA graph" in stage or "Load weight" in stage for _p, stage in phases), phases
    unit = sh("cat /etc/systemd/system/sglang-double.service")
    assert "KillMode=mixed" in unit and "TimeoutStopSec=65" in unit  # lab drain deadline 20 + 15 + margin 30
    assert re.search(r"ExecStart=/usr/bin/python3 -m sglang.launch_server .*--tp-size 8 .*--enable-metrics .*--port 30001", unit)
    assert "# Ansible managed" in unit or "Ansible managed" in unit
    reload_s = float(re.search(r"reload_s: '?([\d.]+)", run.out).group(1))
    assert reload_s >= 14.0  # 8 s load (port closed) + 6 s warmup
    sh("systemctl stop sglang-double")


@pytest.mark.path("none.static", real="ansible-inventory and ansible-playbook --syntax-check on the real inventory")
def test_real_site_inventory_parses_and_the_playbook_passes_syntax_check():
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": "/usr/bin:/bin"}
    inv = subprocess.run([str(Path(ROOT / ".venv/bin/ansible-inventory")), "-i", "inventory/ct200", "--list"], cwd=ROOT,
                         capture_output=True, text=True, check=True, env=env)
    data = json.loads(inv.stdout)
    assert data["_meta"]["hostvars"]["ct200"]["bc_unit"] == "sglang-k26-ddtree"
    syn = subprocess.run([str(ROOT / ".venv/bin/ansible-playbook"), "--syntax-check", "benchmark_cycle.yml", "-i", "inventory/ct200"],
                         cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    assert syn.returncode == 0, syn.stdout + syn.stderr


LAB_SETTINGS = {"model_path": "/opt/lab-model/lab-tiny.gguf", "host": "0.0.0.0", "context_length": 512, "enable_metrics": True,
                "threads": 1, "parallel": 2}


@pytest.mark.path("check_mode", real="Ansible's check mode against a live host")
def test_check_mode_shows_the_unit_diff_and_changes_nothing(llama):
    pid = sh("systemctl show -p ExecMainPID --value llama-lab").strip()
    unit = sh("sha256sum /etc/systemd/system/llama-lab.service")
    results = sh("ls /var/lib/benchmark-cycle/results | wc -l")
    # URL router hooks (a port nothing listens on): check mode calls neither, and says so (uri has no check mode: a
    # hook it skipped read as a failed one)
    hooks = {"bc_lb_remove": {"url": "http://127.0.0.1:9/out"}, "bc_lb_restore": {"url": "http://127.0.0.1:9/in"}}
    run = playbook("benchmark_cycle.yml", "--check", "--diff", extra_vars=dict(hooks, bc_start_delay_s=7))
    assert run.rc == 0, run.out[-3000:]
    assert f"check mode: the router hook (remove) of {HOST} is not called (a URL)" in " ".join(run.out.split())
    assert "+ExecStartPre=/bin/sleep 7" in run.out  # the unit's diff
    assert "check mode: nothing swept" in run.out
    assert sh("systemctl show -p ExecMainPID --value llama-lab").strip() == pid  # not stopped, not restarted
    assert sh("sha256sum /etc/systemd/system/llama-lab.service") == unit
    assert sh("ls /var/lib/benchmark-cycle/results | wc -l") == results
    assert sh("ls /run/lock | grep -c benchmark-cycle || true").strip() == "0"
