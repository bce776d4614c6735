"""The lab for integration tests: real podman containers with systemd as PID 1, the real
llama-server under systemd, the real ansible-playbook over ssh. Started once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOST = "lab1"
CONTAINER = "bc-lab-1"


@dataclass
class Run:
    rc: int
    out: str
    seconds: float


def env() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
                PATH=f"{BIN}:{os.environ['PATH']}")


def playbook(path: str, *extra: str, extra_vars: dict | None = None, timeout: int = 600) -> Run:
    cmd = [str(BIN / "ansible-playbook"), path, "-i", "inventory/lab", *extra]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout, check=False)
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


def sh(cmd: str, check: bool = True) -> str:
    """Run a shell command inside the lab host (podman exec: test assertions, not the product)."""
    proc = subprocess.run(["podman", "exec", CONTAINER, "sh", "-c", cmd], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab command failed ({proc.returncode}): {cmd}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def artifacts() -> dict[str, str]:
    out = subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "artifacts"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@pytest.fixture(scope="session")
def lab() -> str:
    subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "up", "1"], check=True, cwd=ROOT, env=env())
    run = playbook("playbooks/lab_provision.yml", extra_vars=artifacts())
    assert run.rc == 0, run.out[-3000:]
    # the SGLang test double, for SGLang-only behaviour under a real systemd
    sh("mkdir -p /opt/sglang-double")
    subprocess.run(["podman", "cp", str(ROOT / "tests/doubles/sglang"), f"{CONTAINER}:/opt/sglang-double/sglang"], check=True)
    return HOST


@pytest.fixture
def llama(lab: str) -> str:
    """The lab's llama-server, serving (re-provisioned if a test left it otherwise)."""
    if sh("systemctl is-active llama-lab", check=False).strip() != "active" or "no-such" in sh("cat /etc/systemd/system/llama-lab.service"):
        run = playbook("playbooks/lab_provision.yml", extra_vars=artifacts())
        assert run.rc == 0, run.out[-3000:]
    sh("rm -rf /run/lock/benchmark-cycle-*")
    return lab


DOUBLE = {
    "bc_engine": "sglang", "bc_unit": "sglang-double", "bc_port": 30001, "bc_engine_python": "/usr/bin/python3",
    "bc_engine_settings": {"model_path": "/opt/models/Kimi-K2.6", "served_model_name": "kimi-k2.6", "tp_size": 8,
                           "host": "127.0.0.1", "enable_metrics": True, "watchdog_timeout": 900},
    "bc_engine_env": {"PYTHONPATH": "/opt/sglang-double", "BC_DOUBLE_LOAD_S": "3", "BC_DOUBLE_WARMUP_S": "2",
                      "SGLANG_CACHE_DIR": "/var/cache/sglang"},
}
