"""The lab for integration tests: real podman containers with systemd as PID 1, the real
llama-server under systemd, the real ansible-playbook over ssh. Started once per session, or
provided by molecule (BC_LAB_PROVIDED=1: molecule's create/converge made it; the faults and fleet
scenarios run these tests as their verify step)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    started: float = 0.0  # epoch
    events: list[dict[str, Any]] = field(default_factory=list)  # the callback's timeline (BC_CYCLE_EVENT_LOG)

    def at(self, task: str, event: str = "ok") -> float:
        """Epoch time of the first `event` of the task whose name contains `task`."""
        for e in self.events:
            if e["event"] == event and task in (e.get("task") or ""):
                return e["t"]
        raise AssertionError(f"no {event} event for a task named like {task!r}: {[e['task'] for e in self.events][-20:]}")


def env(**extra: str) -> dict[str, str]:
    """The project's ansible.cfg and nothing else: settings inherited from a caller (molecule's
    ANSIBLE_* variables when these tests are its verify step) do not leak into the runs."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    return dict(base, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
                PATH=f"{BIN}:{os.environ['PATH']}", **extra)


def playbook_cmd(path: str, *extra: str, extra_vars: dict | None = None) -> list[str]:
    cmd = [str(BIN / "ansible-playbook"), path, "-i", "inventory/lab", *extra]
    return [*cmd, "-e", json.dumps(extra_vars)] if extra_vars else cmd


def read_events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def playbook(path: str, *extra: str, extra_vars: dict | None = None, timeout: int = 600) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "events.jsonl"
        start, started = time.monotonic(), time.time()
        proc = subprocess.run(playbook_cmd(path, *extra, extra_vars=extra_vars), cwd=ROOT, env=env(BC_CYCLE_EVENT_LOG=str(log)),
                              capture_output=True, text=True, timeout=timeout, check=False)
        return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start, started, read_events(log))


def sh(cmd: str, check: bool = True, container: str = CONTAINER) -> str:
    """Run a shell command inside the lab host (podman exec: test assertions, not the product)."""
    proc = subprocess.run(["podman", "exec", container, "sh", "-c", cmd], capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab command failed ({proc.returncode}): {cmd}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def artifacts() -> dict[str, str]:
    out = subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "artifacts"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def lab_hosts() -> dict[str, dict[str, Any]]:
    import yaml

    return yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]


def provided(count: int) -> bool:
    """molecule made the lab (create + converge): use it as it is."""
    if os.environ.get("BC_LAB_PROVIDED") != "1":
        return False
    if len(lab_hosts()) != count:
        raise pytest.UsageError(f"BC_LAB_PROVIDED=1 but inventory/lab/hosts.yml has {len(lab_hosts())} host(s), not {count}")
    return True


def lab_up(count: int) -> None:
    if not provided(count):
        subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "up", str(count)], check=True, cwd=ROOT, env=env())
        run = playbook("playbooks/lab_provision.yml", extra_vars=artifacts())
        assert run.rc == 0, run.out[-3000:]


LAB_UNIT: dict[str, str] = {}


def unit_sum() -> str:
    return sh("sha256sum /etc/systemd/system/llama-lab.service /etc/benchmark-cycle/llama-lab.env", check=False)


@pytest.fixture(scope="session")
def lab() -> str:
    lab_up(1)
    # the SGLang test double, for SGLang-only behaviour under a real systemd
    sh("mkdir -p /opt/sglang-double")
    subprocess.run(["podman", "cp", str(ROOT / "tests/doubles/sglang"), f"{CONTAINER}:/opt/sglang-double/sglang"], check=True)
    LAB_UNIT["sum"] = unit_sum()
    return HOST


@pytest.fixture
def llama(lab: str) -> str:
    """The lab's llama-server as provisioned, serving (re-provisioned if a test left it otherwise)."""
    if sh("systemctl is-active llama-lab", check=False).strip() != "active" or unit_sum() != LAB_UNIT["sum"]:
        run = playbook("playbooks/lab_provision.yml", extra_vars=artifacts())
        assert run.rc == 0, run.out[-3000:]
    sh("rm -rf /run/lock/benchmark-cycle-*")
    return lab


@pytest.fixture(autouse=True)
def keyless_double():
    """After each test, the SGLang double's API key taken away by hand, as an operator would (the cycle
    itself never restarts a unit that has a key without one, and the lab runs without a key unless a
    test gives one): the unit stopped, its secrets file removed. The llama-server unit is re-provisioned
    by `llama` when its files differ from the lab's."""
    yield
    subprocess.run(["podman", "exec", CONTAINER, "sh", "-c",
                    "f=/etc/benchmark-cycle/sglang-double.secrets.yaml; [ -e $f ] || exit 0; "
                    "systemctl stop sglang-double; rm -f $f"], capture_output=True, timeout=120, check=False)


H200_REPORT = ROOT / "tests/unit/fixtures/h200/nvidia-smi-q.xml"


def serve_gpu_report(text: str) -> None:
    """What the nvidia-smi double answers to -q -x on the lab host (the real H200's, or a fault made from it)."""
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as fh:
        fh.write(text)
    sh("mkdir -p /etc/bc-double")
    subprocess.run(["podman", "cp", fh.name, f"{CONTAINER}:/etc/bc-double/nvidia-smi-q.xml"], check=True)
    Path(fh.name).unlink()


def install_gpu_double() -> None:
    """The nvidia-smi double as the lab host's nvidia-smi, serving the real H200's report (healthy)."""
    subprocess.run(["podman", "cp", str(ROOT / "tests/doubles/nvidia_smi.py"), f"{CONTAINER}:/usr/local/bin/nvidia-smi"], check=True)
    sh("chmod 755 /usr/local/bin/nvidia-smi")
    serve_gpu_report(H200_REPORT.read_text())


def remove_gpu_double() -> None:
    sh("rm -f /usr/local/bin/nvidia-smi; rm -rf /etc/bc-double /run/bc-double")


def serving(port: int = 8080, container: str = CONTAINER) -> str:
    """What the service does now, measured: the unit's state and the answer to 2+2=."""
    state = sh("systemctl is-active llama-lab", check=False, container=container).strip()
    body = sh("curl -s -m 5 -H 'Content-Type: application/json' -d '{\"prompt\":\"2+2=\",\"max_tokens\":4,\"temperature\":0}' "
              f"http://127.0.0.1:{port}/v1/completions", check=False, container=container)
    try:
        answer = json.loads(body)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError):
        answer = None
    return f"{state}, answers 2+2={answer}" if answer is not None else f"{state}, no answer"


# -- the reliability table (docs/reliability.md): one row per fault test, every cell measured -----
# The faults and the fleet scenarios are separate pytest sessions: each one replaces the rows of the
# tests it ran (a test that failed loses its row) in <doc>.json and renders the whole table again.
ROWS: list[dict[str, Any]] = []
RAN: set[str] = set()


def test_id(item: pytest.Item) -> str:
    return f"{Path(str(item.fspath)).name}::{item.name}"


@pytest.fixture
def reliability(request: pytest.FixtureRequest):
    def record(**row: Any) -> None:
        ROWS.append(dict(row, test=test_id(request.node)))
    return record


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    RAN.add(f"{Path(location[0]).name}::{location[2].split('.')[-1]}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not ROWS:
        return
    from reliability import merge, render

    doc = Path(os.environ.get("BC_RELIABILITY_DOC", ROOT / "results" / "reliability.md"))
    data = doc.with_suffix(".json")
    kept = json.loads(data.read_text()) if data.exists() else []
    rows = merge(kept, ROWS, RAN, ROOT / "tests" / "integration")
    doc.parent.mkdir(parents=True, exist_ok=True)
    data.write_text(json.dumps(rows, indent=1) + "\n")
    doc.write_text(render(rows, complete=exitstatus == 0))


DOUBLE = {
    "bc_engine": "sglang", "bc_unit": "sglang-double", "bc_port": 30001, "bc_engine_python": "/usr/bin/python3",
    "bc_engine_settings": {"model_path": "/opt/models/Kimi-K2.6", "served_model_name": "kimi-k2.6", "tp_size": 8,
                           "host": "127.0.0.1", "enable_metrics": True, "watchdog_timeout": 900},
    "bc_engine_env": {"PYTHONPATH": "/opt/sglang-double", "BC_DOUBLE_LOAD_S": "3", "BC_DOUBLE_WARMUP_S": "2",
                      "SGLANG_CACHE_DIR": "/var/cache/sglang"},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The fleet test re-creates the lab with 3 hosts: it runs after every 1-host test."""
    items.sort(key=lambda item: Path(str(item.fspath)).name == "test_fleet.py")
