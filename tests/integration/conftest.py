"""The lab for integration tests: real podman containers with systemd as PID 1, the real
llama-server under systemd, the real ansible-playbook over ssh. Started once per session, or
provided by molecule (BC_LAB_PROVIDED=1: molecule's create/converge made it; the default and faults
scenarios run these tests as their verify step)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from bc_shared_ansiballz import settings as shared_payloads

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import processes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Fault cases run in parallel (pytest-xdist, `-n N`): worker gwK owns lab host lab<K+1> (container bc-lab-<K+1>) and
# nothing else: its own inventory with that host alone, so its unit, ports, lock and results are its own.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
HOST = f"lab{int(WORKER.removeprefix('gw')) + 1}"
CONTAINER = f"bc-lab-{int(WORKER.removeprefix('gw')) + 1}"
INVENTORY = "inventory/lab" if WORKERS == 1 else f".lab/inventory-{HOST}"
# a developer's own lab host, provisioned by hand beside a running suite (BC_LAB_INVENTORY: an inventory with that one
# host, its lab_container named; BC_LAB_PROVIDED=1): the cases run against it alone
if os.environ.get("BC_LAB_INVENTORY"):
    INVENTORY = os.environ["BC_LAB_INVENTORY"]
    _own = yaml.safe_load((Path(INVENTORY) / "hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]
    (HOST, _vars), = _own.items()
    CONTAINER = _vars["lab_container"]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C (SIGINT) ends a run with its fixtures' teardown (servers stopped, lab hosts removed), also where the run
    was started with SIGINT ignored (a background job of a non-interactive shell: ./tasks test's side stage, which
    `end_side_stage` interrupts when the stage beside it failed)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
    ANSIBLE_* variables when these tests are its verify step) do not leak into the runs. The test harness's callback
    shares ansible-core's module payloads between the runs (bc_shared_ansiballz: built once for the suite)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    return {**base, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
            **shared_payloads(ROOT), "PATH": f"{BIN}:{os.environ['PATH']}", **extra}


def playbook_cmd(path: str, *extra: str, extra_vars: dict | None = None, inventory: str | None = None) -> list[str]:
    cmd = [str(BIN / "ansible-playbook"), path, "-i", inventory or INVENTORY, *extra]
    return [*cmd, "-e", json.dumps(extra_vars)] if extra_vars else cmd


def read_events(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def playbook(path: str, *extra: str, extra_vars: dict | None = None, timeout: int = 600, inventory: str | None = None) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "events.jsonl"
        start, started = time.monotonic(), time.time()
        proc = subprocess.run(playbook_cmd(path, *extra, extra_vars=extra_vars, inventory=inventory), cwd=ROOT,
                              env=env(BC_CYCLE_EVENT_LOG=str(log)), capture_output=True, text=True, timeout=timeout, check=False)
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


def built() -> dict[str, str]:
    """The venv and model ./tasks set up (BC_VLLM_*), else built here (cached per version and recipe)."""
    if os.environ.get("BC_VLLM_PYTHON"):
        return {"vllm_python": os.environ["BC_VLLM_PYTHON"], "vllm_model": os.environ["BC_VLLM_MODEL"],
                "vllm_version": os.environ.get("BC_VLLM_VERSION", "0.32.0")}
    out = subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "vllm"], capture_output=True, text=True,
                         timeout=3600, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def lab_hosts() -> dict[str, dict[str, Any]]:
    return yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]


def provided(count: int) -> bool:
    """molecule made the lab (create + converge): use it as it is."""
    if os.environ.get("BC_LAB_PROVIDED") != "1":
        return False
    if os.environ.get("BC_LAB_INVENTORY"):
        return True
    if len(lab_hosts()) != count:
        raise pytest.UsageError(f"BC_LAB_PROVIDED=1 but inventory/lab/hosts.yml has {len(lab_hosts())} host(s), not {count}")
    return True


def lab_up(count: int) -> None:
    if not provided(count):
        if WORKERS > 1:
            raise pytest.UsageError(f"{WORKERS} workers need {WORKERS} lab hosts made beforehand: run them as molecule's verify "
                                    f"(./tasks molecule faults), or ./tasks lab-up {WORKERS} && ./tasks provision, then BC_LAB_PROVIDED=1")
        subprocess.run([sys.executable, str(ROOT / "lab/lab.py"), "up", str(count)], check=True, cwd=ROOT, env=env())
        run = playbook("playbooks/lab_provision.yml", extra_vars=artifacts())
        assert run.rc == 0, run.out[-3000:]


def one_host_inventory(inventory: Path, host: str, hostvars: dict[str, Any], key_file: str) -> None:
    """An inventory of one lab host (`hostvars`: what lab/lab.py start_host returns), with the lab's group_vars."""
    # the sweep cut to two points of one routing and no plot, as the fleet's (bench/fleet_scale.py): a fault case tests
    # the cycle's path, and test_cycle, on inventory/lab, sweeps and plots in full. Measured on a lab cycle: 2.2 s of
    # the host's CPU (the sweep) and 2.0 s of the controller's (the plot) less. Host vars: the lab's group_vars set both
    small = {"bc_sweep_batch_sizes": [1, 8], "bc_sweep_routing": [{"kind": "uniform"}], "gpu_benchmark_plot": False}
    hosts = {"all": {"children": {"inference": {"hosts": {host: dict(small, **hostvars)}}},
                     "vars": {"ansible_ssh_private_key_file": key_file}}}
    inventory.mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    if not (inventory / "group_vars").exists():
        (inventory / "group_vars").symlink_to(ROOT / "inventory/lab/group_vars")


def lab_setting(name: str) -> Any:
    """A setting as this case's inventory gives it: its host's vars (one_host_inventory), else the lab's group_vars."""
    hosts = yaml.safe_load((ROOT / INVENTORY / "hosts.yml").read_text())["all"]["children"]["inference"]["hosts"]
    given = hosts.get(HOST) or {}
    return given[name] if name in given else yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())[name]


def own_inventory() -> None:
    """A parallel worker's inventory: the lab's, with this worker's host alone (the group_vars are the lab's)."""
    if WORKERS == 1 or os.environ.get("BC_LAB_INVENTORY"):
        return
    lab = yaml.safe_load((ROOT / "inventory/lab/hosts.yml").read_text())["all"]
    one_host_inventory(ROOT / INVENTORY, HOST, lab["children"]["inference"]["hosts"][HOST], lab["vars"]["ansible_ssh_private_key_file"])


LAB_UNIT: dict[str, str] = {}


def unit_sum() -> str:
    return sh("sha256sum /etc/systemd/system/llama-lab.service /etc/benchmark-cycle/llama-lab.env", check=False)


@pytest.fixture(scope="session")
def lab() -> str:
    lab_up(WORKERS)
    own_inventory()
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
def keyless_double(request: pytest.FixtureRequest):
    """After each test, the SGLang double's API key taken away by hand, as an operator would (the cycle
    itself never restarts a unit that has a key without one, and the lab runs without a key unless a
    test gives one): the unit stopped, its secrets file removed. The llama-server unit is re-provisioned
    by `llama` when its files differ from the lab's. And a sweep still held at the gate (gated_sweep_python) ended:
    a case that failed before its re-run or its switch ended it would leave it for its budget, and the next case on
    this host would find a sweep running. Only after a case on the lab host: a case that is not (the vllm stage, which
    runs beside the lab cases) must not touch it."""
    yield
    if "lab" not in request.fixturenames:
        return
    subprocess.run(["podman", "exec", CONTAINER, "sh", "-c",
                    "pkill -KILL -f '[b]c-gated-python'; f=/etc/benchmark-cycle/sglang-double.secrets.yaml; [ -e $f ] || exit 0; "
                    "systemctl stop sglang-double; rm -f $f"], capture_output=True, timeout=120, check=False)


def orphaned_controllers(inventory: str = INVENTORY, proc_root: str = "/proc") -> list[int]:
    """This project's ansible-playbook processes for `inventory` whose parent is known and no python (neither a
    live ansible-playbook nor pytest nor ansible-runner): the workers of a controller a case killed. ansible-core
    runs each worker in its own session (executor/process/worker.py), so a SIGKILL of ansible-playbook or of its
    process group (AWX's Cancel through ansible-runner) leaves them, reparented to init and blocked on the dead
    controller's queue. A parent that cannot be read (gone meanwhile, or this pytest process) kills nothing."""
    procs = processes(proc_root)
    argv_of = {p["pid"]: p["argv"] for p in procs}
    playbook = str(BIN / "ansible-playbook")
    return [p["pid"] for p in procs
            if playbook in p["argv"] and any(inventory in w for w in p["argv"])
            and p["ppid"] in argv_of and not any("python" in w for w in argv_of[p["ppid"]])]


@pytest.fixture(autouse=True)
def no_orphaned_controllers(request: pytest.FixtureRequest):
    """After each case on the lab host, the workers of any controller it killed are ended (they would stay for ever,
    and the next case's lab host is the same): the product's side of a lost controller is the host's switch; this is
    the test machine's own cleanup. A case that is not on the lab host leaves the lab's to the stage that runs there
    (the vllm stage runs beside the lab cases; its own host cleans up after itself: test_vllm_unit.py)."""
    yield
    if "lab" in request.fixturenames:
        kill_orphaned_controllers()


def kill_orphaned_controllers(inventory: str = INVENTORY) -> None:
    for pid in orphaned_controllers(inventory):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


SITE_LOG = "/var/log/bc-site.jsonl"
SITE_URLS = ("http://127.0.0.1:8080", "http://127.0.0.1:30001")  # the lab's llama-server and the SGLang double


@pytest.fixture(autouse=True)
def site(request: pytest.FixtureRequest):
    """The site around the server in every lab case (lab/site_sim.py on the lab host): a load balancer's health
    checker (every 2 s), stray clients sending completions straight to the port (every 5 s) and a metrics scraper
    (every 5 s), through the whole case, whatever phase the server is in. A case without it says why
    (@pytest.mark.quiet_site("why")); BC_SITE_SIM=0 turns it off for a local debugging run. What the site saw is
    the case's row in docs/reliability.md, and a case where the site made no health check did not run with it."""
    quiet = request.node.get_closest_marker("quiet_site")
    if quiet or "lab" not in request.fixturenames or os.environ.get("BC_SITE_SIM") == "0":
        yield None
        return
    request.getfixturevalue("lab")
    subprocess.run(["podman", "cp", str(ROOT / "lab/site_sim.py"), f"{CONTAINER}:/usr/local/bin/bc-site-sim"], check=True, timeout=60)
    urls = " ".join(f"--url {u}" for u in SITE_URLS)
    stop = "[ -f /run/bc-site.pid ] && kill -TERM $(cat /run/bc-site.pid); rm -f /run/bc-site.pid"
    sh(f"{stop}; rm -f {SITE_LOG}; nohup python3 /usr/local/bin/bc-site-sim {urls} --request-every 5 --log {SITE_LOG} >/dev/null 2>&1 & "
       "echo $! > /run/bc-site.pid")
    yield SITE_LOG
    sh(stop, check=False)
    seen = json.loads(sh(f"python3 /usr/local/bin/bc-site-sim --summary {SITE_LOG}", check=False) or "{}")
    for row in ROWS:
        if row["test"] == test_id(request.node):
            row["site"] = seen
    assert seen.get("health"), f"the site simulator made no health check during the case: {seen}"


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


def ask_2_plus_2(port: int, container: str, api_key: str) -> str:
    """The curl command that asks the server 2+2= on the host (with `api_key`, if given: handed to curl as a 0600 header
    file written through stdin, never on a command line)."""
    auth = ""
    if api_key:
        subprocess.run(["podman", "exec", "-i", container, "sh", "-c", "umask 077; cat > /run/bc-test-auth"],
                       input=f"Authorization: Bearer {api_key}\n", text=True, check=True, timeout=60)
        auth = "-H @/run/bc-test-auth "
    return ("curl -s -m 5 " + auth + "-H 'Content-Type: application/json' -d '{\"prompt\":\"2+2=\",\"max_tokens\":4,\"temperature\":0}' "
            f"http://127.0.0.1:{port}/v1/completions")


def serving(port: int = 8080, container: str = CONTAINER, api_key: str = "") -> str:
    """What the service does now, measured: the unit's state and the answer to 2+2= (ask_2_plus_2)."""
    state = sh("systemctl is-active llama-lab", check=False, container=container).strip()
    body = sh(ask_2_plus_2(port, container, api_key), check=False, container=container)
    try:
        answer = json.loads(body)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError):
        answer = None
    return f"{state}, answers 2+2={answer}" if answer is not None else f"{state}, no answer"


def wait_for(what: str, check: Any, within_s: float) -> None:
    """Poll `check` until it holds, `within_s` at most (a hang guard sized for a loaded machine, not a timing
    assertion); fails naming `what` if it never held."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and not check():
        time.sleep(0.3)
    assert check(), f"{what} did not happen within {within_s:.0f} s"


def wait_in_host(condition: str, within_s: float, container: str = CONTAINER, stop: Callable[[], bool] | None = None,
                 what: str = "") -> None:
    """Until the shell `condition` holds on the lab host, checked there every 0.1 s, in one `podman exec` (from the
    controller each look is a podman exec, about 60 ms of CPU: a look every 0.3 s through a switch's minutes-long window
    cost a fifth of a core per waiting case; and a short-lived state slips between two looks). With `stop` (the
    playbook's end, say), the wait is looks of 10 s at most, and `stop()` between them ends it early: the caller then
    says what ended first. Fails naming `what` (or the condition) if it did not hold within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        look = deadline - time.monotonic() if stop is None else min(10.0, deadline - time.monotonic())
        proc = subprocess.run(["podman", "exec", container, "timeout", str(max(1, math.ceil(look))), "sh", "-c",
                               f"until {condition}; do sleep 0.1; done"], capture_output=True, text=True,
                              timeout=look + 60, check=False)
        if proc.returncode == 0 or (stop is not None and stop()):
            return
        if proc.returncode != 124:  # not the look's end: podman, timeout or the shell failed (said at once, never retried)
            raise AssertionError(f"waiting for {what or repr(condition)} on {container} failed (rc {proc.returncode}): "
                                 f"{proc.stderr.strip()[-1000:]}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what or repr(condition)} did not happen on {container} within {within_s:.0f} s")


# a cycle's sweep process on the lab host (the real one, or the gate that holds it: both run `-m ...bc_marlin`); the
# brackets keep the pattern from matching the shell that looks for it
SWEEP_RUNNING = "pgrep -f 'module_utils[.]bc_marlin' >/dev/null"  # the worker, as marlin_sweep runs it (bc_unit.SWEEP_MODULE)


def wait_for_sweep(proc: subprocess.Popen | None = None, within_s: float = 900, container: str = CONTAINER) -> None:
    """Until a cycle's sweep runs on the lab host: a loaded machine (3 workers on 2 cores) takes minutes to get from
    a playbook's start to its sweep, so a case that acts "mid-sweep" waits for it, and fails if it never came or
    the playbook (`proc`) ended first - never acts early by a timer."""
    def gone() -> bool:
        return proc is not None and proc.poll() is not None
    wait_in_host(SWEEP_RUNNING, within_s, container, stop=gone, what="the sweep")
    assert not gone(), f"the playbook ended (rc {proc and proc.returncode}) before its sweep ran"


def wait_serving(within_s: float, api_key: str = "", container: str = CONTAINER, what: str = "the service's return") -> str:
    """Until the service is what serving() calls serving (llama-lab active, answering 2+2= with 4), looked at on the
    host every 0.1 s; then serving()'s own reading, which must say so (a look that passed on the host is read again)."""
    wait_in_host(f"systemctl is-active -q llama-lab && {ask_2_plus_2(8080, container, api_key)} | grep -q '\"text\": *\"4\"'",
                 within_s, container, what=what)
    after = serving(container=container, api_key=api_key)
    assert after == "active, answers 2+2=4", f"{what}: the host saw it, then serving() read {after!r}"
    return after


def stop_now(unit: str) -> None:
    """Stop `unit` at once, whatever it holds: a stop job queued (so Restart= never applies), then SIGKILL to all of
    it (a server still holding a case's long request would drain it until TimeoutStopSec)."""
    sh(f"systemctl stop --no-block {unit}; systemctl kill --kill-who=all --signal=SIGKILL {unit} 2>/dev/null; "
       f"for i in $(seq 100); do systemctl is-active -q {unit} || break; sleep 0.1; done; systemctl reset-failed {unit} 2>/dev/null; "
       f"! systemctl is-active -q {unit}")


GATE = "/run/bc-sweep-gate"
# the lab's own sweep interpreter (its group_vars), which the gated one runs once the gate opens
LAB_SWEEP_PYTHON = yaml.safe_load((ROOT / "inventory/lab/group_vars/all.yml").read_text())["bc_sweep_python"]


def gated_sweep_python(container: str = CONTAINER) -> str:
    """The lab's sweep interpreter behind a gate: the sweep (the run with --tag; not the preflight's import check)
    waits until GATE exists, so a case holds a cycle in its sweep for as long as it needs without burning CPU in a
    long CPU sweep (that made a case 23 minutes long on a busy machine). Returns the interpreter to give as
    bc_sweep_python; the gate starts closed."""
    sh(f"rm -f {GATE}; printf '%s\\n' '#!/bin/sh' "
       f"'case \" $* \" in *\" --tag \"*) while [ ! -e {GATE} ]; do sleep 0.2; done;; esac' "
       f"'exec {LAB_SWEEP_PYTHON} \"$@\"' > /usr/local/bin/bc-gated-python; chmod 755 /usr/local/bin/bc-gated-python",
       container=container)
    return "/usr/local/bin/bc-gated-python"


def open_sweep_gate(container: str = CONTAINER) -> None:
    sh(f"touch {GATE}", container=container)


def in_flight_at_deadline(out: str) -> float:
    """The in-flight count a drain that gave up at its deadline reported (0 if it did not): a case's held
    request, plus whatever the site's stray clients had in flight at that moment."""
    found = re.search(r"drain deadline passed: (\d+(?:\.\d+)?) request\(s\) still in flight", out)
    return float(found.group(1)) if found else 0.0


# -- the reliability table (docs/reliability.md): one row per fault test, every cell measured -----
# The pytest sessions of a run (molecule's faults, the fleet stage) are separate: each one replaces the rows of the
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


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, on the controlling process: a worker's rows and the cases it ran join this session's."""
    output = getattr(node, "workeroutput", {})
    ROWS.extend(json.loads(output.get("bc_rows", "[]")))
    RAN.update(json.loads(output.get("bc_ran", "[]")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:  # a pytest-xdist worker: the controlling process writes the table
        worker_output["bc_rows"], worker_output["bc_ran"] = json.dumps(ROWS), json.dumps(sorted(RAN))
        return
    if not ROWS:
        return
    from reliability import merge, render

    doc = Path(os.environ.get("BC_RELIABILITY_DOC", ROOT / "results" / "reliability.md"))
    data = doc.with_suffix(".json")
    doc.parent.mkdir(parents=True, exist_ok=True)
    # two sessions may end at once (./tasks test runs the fleet and vllm stages beside the lab cases): each one's rows are
    # merged into what the other wrote, under a lock on the data file, never over it
    with open(data, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        text = fh.read()
        rows = merge(json.loads(text) if text.strip() else [], ROWS, RAN, ROOT / "tests" / "integration")
        data.write_text(json.dumps(rows, indent=1) + "\n")
        doc.write_text(render(rows, complete=exitstatus == 0))


# the SGLang double as a unit under the lab's systemd (one file, shared with bench/fleet_scale.py)
DOUBLE = yaml.safe_load((ROOT / "tests/doubles/sglang-unit.yml").read_text())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In a parallel run the cases start longest first (schedule.py: the last green run's times), so that no long case
    is left to run alone at the end; a serial run keeps the files' order."""
    if WORKERS > 1:
        from schedule import load_times, longest_first

        groups = {i: "_".join(str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks)
                  for i, item in enumerate(items) if (marks := list(item.iter_markers("xdist_group")))}
        order = longest_first([test_id(item) for item in items], load_times(), groups)
        items[:] = [items[i] for i in order]
