# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The life of an inference server's systemd unit, each step one round trip to the host.

install  verify the new unit with systemd-analyze, keep the installed unit and environment file
         for rollback, install both atomically, daemon-reload, enable
stop     record the unit's processes (its cgroup and the descendants of its main PID), stop it,
         kill those of them still alive whose title or executable is the engine's, wait until the
         GPU memory is really free
start    end this cycle's sweep if it still runs, reset-failed (a deliberate start must not count
         against StartLimitBurst), start without waiting for the start job (readiness is the
         cycle's probe, not systemd's); a restart (a server whose state is not
         known) first ends it by a stop job and SIGKILL to all its processes: bounded, whatever its
         front end holds
rollback put back what this cycle's install replaced (kept under its token), end the running server as a
         restart does, reset-failed, start

The host side of `library/inference_unit.py`; the unit's dead-man switch is bc_switch. Commands are argv lists (no shell); everything that
needs no host is a pure function with unit tests.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from typing import Any

# the host probes live in bc_host
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    CommandFailed,
    gpu_query,
    parse_gpus,
    processes,
    read_text,
    run,
    unit_show,
)

# (rc, stdout, stderr) of an argv list, killed after `timeout` seconds
Runner = Callable[..., tuple[int, str, str]]

# no leading "-": a unit name must never reach systemctl as an option
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@][A-Za-z0-9:_.\\@-]*\Z")
TOKEN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}\Z")
ACTIVE_STATES = ("active", "activating", "reloading", "deactivating")
# how long a unit sent SIGKILL may take to be down (its processes reaped, its ExecStopPost run) before it is started
# anyway; a start asked for while it is still going down waits behind the stop, and systemd tests that start against
# StartLimitBurst at every state change of the stop (systemd#39247, 252 here): one restart would spend the burst
END_WAIT_S = 30
# the sweep's worker, as marlin_sweep runs it: `python -m <this package>.bc_marlin --tag T`
SWEEP_MODULE = __name__.rpartition(".")[0] + ".bc_marlin"
# a sweep started by either package is one: this one, and ansible.module_utils, where releases before the repository
# became the collection (0.9.x) ran it from, so that a host upgraded mid-sweep still finds and ends its sweep
SWEEP_PACKAGES = ("ansible.module_utils", "ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils")
SWEEP_MODULES = frozenset(package + ".bc_marlin" for package in SWEEP_PACKAGES)
VERIFY_PROBLEM = r"\.service:.*(error|invalid|not executable|no such|unknown|failed|bad)"


class UnitError(Exception):
    """A step failed; the message names the unit, the step and what to do."""


def check_name(name: str, field: str = "name") -> str:
    """The unit name without .service, or a UnitError naming `field` (the option or inventory variable)."""
    if name.endswith(".service"):
        name = name[: -len(".service")]
    if not name or not UNIT_NAME.match(name):
        raise UnitError("%s=%s is not a systemd unit name (letters, digits and :_.\\@- only, not starting with -, "
                        "without .service)" % (field, name))
    return name


def check_token(token: str, field: str = "token") -> str:
    if not TOKEN.match(token or ""):
        raise UnitError("%s=%r is not a cycle token (1-128 of letters, digits and _.:-)" % (field, token))
    return token


def verify_problems(name: str, rc: int, stderr: str) -> list[str]:
    """The lines of `systemd-analyze verify` output that make the unit unusable. systemd-analyze
    also reports other units' problems (the host's own), which are not this unit's business."""
    own = [line for line in stderr.splitlines() if re.search(re.escape(name) + VERIFY_PROBLEM, line, re.IGNORECASE)]
    if rc != 0 and not own:
        own = [line for line in stderr.splitlines() if line.strip()][-5:] or ["systemd-analyze verify exited %d" % rc]
    return own


def engine_process(argv: list[str], spec: dict[str, list[str]]) -> bool:
    """Whether a process is one of the engine's own, by exact names only (never a substring of the
    command line: a compiler building llama-server.cpp is not llama-server): its title (argv[0] after
    setproctitle) starts with one of spec['titles'], its executable's basename is one of
    spec['executables'] (also as a console script run by python), or it is `<python> -m <module>` for one of
    spec['modules']."""
    if not argv:
        return False
    if any(argv[0] == t or argv[0].startswith(t + "_") or argv[0].startswith(t + " ") for t in spec.get("titles", [])):
        return True
    if os.path.basename(argv[0]) in spec.get("executables", []):
        return True
    # a console script (`vllm serve`): the kernel runs its shebang, so argv is [<python>, <path>/vllm, serve, ...]
    # (seen on vLLM 0.32's real API server, tests/integration/test_vllm.py)
    if (len(argv) > 1 and re.fullmatch(r"python[0-9.]*", os.path.basename(argv[0]))
            and os.path.basename(argv[1]) in spec.get("executables", [])):
        return True
    return any(argv[i] == "-m" and argv[i + 1] in spec.get("modules", []) for i in range(1, min(len(argv) - 1, 4)))


def sweep_tags(procs: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(pid, tag) of the sweeps among `procs`: `python -m <package>.bc_marlin --tag <unit>/<token>` ("" for an
    untagged one), the package of either layout (SWEEP_PACKAGES)."""
    out = []
    for p in procs:
        argv = p["argv"]
        if any(argv[i] == "-m" and argv[i + 1] in SWEEP_MODULES for i in range(1, min(len(argv) - 1, 4))):
            out.append((p["pid"], argv[argv.index("--tag") + 1] if "--tag" in argv[:-1] else ""))
    return out


def unit_members(procs: list[dict[str, Any]], service: str, main_pid: int) -> list[dict[str, Any]]:
    """The processes that belong to the unit: in its cgroup, or descendants of its main PID."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p["ppid"], []).append(p["pid"])
    tree, todo = set(), [main_pid] if main_pid > 0 else []
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, []))
    return [p for p in procs if p["service"] == service or p["pid"] in tree]


def leftovers(members: list[dict[str, Any]], now: list[dict[str, Any]], spec: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The unit's former processes (same pid and start time: never a reused pid) still alive after
    the stop whose name is the engine's: what the stop may kill. Nothing else ever is."""
    known = {(p["pid"], p["start"]) for p in members}
    return [p for p in now if (p["pid"], p["start"]) in known and engine_process(p["argv"], spec)]


def busy_gpus(used: dict[int, int | None], free_mib: int, indices: list[int] | None = None) -> dict[int, int | None]:
    """The GPUs not known to hold at most free_mib MiB. With `indices` (the GPUs the stop must free): those above it,
    and those with no reading (None, or an index nvidia-smi did not list): a GPU that says nothing is never free.
    Without: every GPU above it; one with no reading ([N/A]: a MIG parent, a GPU that wants a reset) is not the
    stop's to wait for, and the caller names it (else one unreadable GPU on the host would fail every stop)."""
    if indices:
        busy = {i: mib for i, mib in used.items() if i in indices and (mib is None or mib > free_mib)}
        busy.update({i: None for i in indices if i not in used})
        return busy
    return {i: mib for i, mib in used.items() if mib is not None and mib > free_mib}


def kill_all(pids: list[int], remaining: Callable[[], list[Any]], clock: Callable[[], float],
             sleep: Callable[[float], None], within_s: float = 10.0) -> list[int]:
    """SIGKILL each of `pids`, then wait until `remaining()` finds none of them, within `within_s` of wall clock (the
    caller reads what is left and says so). The pids signalled; one gone meanwhile exited by itself."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = clock() + within_s
    while remaining() and clock() < deadline:
        sleep(0.1)
    return signalled


class Unit:
    """One systemd service unit on this host. `run` executes argv lists; `write` writes a file
    atomically with a mode (the module's atomic_move); check mode changes nothing."""

    def __init__(self, name: str, run: Runner, write: Callable[[str, str, int], None], *, systemd_dir: str,
                 state_dir: str, env_file: str | None = None, check_mode: bool = False, timeout: float = 60,
                 token: str | None = None) -> None:
        self.name = check_name(name)
        self.run, self.write, self.check_mode, self.timeout = run, write, check_mode, timeout
        self.token = check_token(token) if token else None
        self.file = os.path.join(systemd_dir, self.name + ".service")
        self.env_file = env_file
        self.rollback_dir = os.path.join(state_dir, "rollback")
        self.switch = "bc-deadman-" + self.name
        self.extra_files: list[str] = []

    def kept(self, live: str, token: str) -> str:
        """Where this cycle keeps the file it replaced: rollback/<token>/<basename>."""
        return os.path.join(self.rollback_dir, token, os.path.basename(live))

    def prune_rollbacks(self) -> None:
        """Earlier cycles' kept files are nobody's to roll back to: only this cycle's are kept."""
        for entry in os.listdir(self.rollback_dir):
            path = os.path.join(self.rollback_dir, entry)
            if entry != self.token and os.path.isdir(path) and any(f.startswith(self.name + ".") for f in os.listdir(path)):
                shutil.rmtree(path, ignore_errors=True)

    def systemctl(self, *args: str, ok: tuple[int, ...] = (0,), timeout: float | None = None) -> tuple[int, str]:
        # options first, then "--": a unit name is never read as an option
        opts = [a for a in args if a.startswith("-")]
        words = [a for a in args if not a.startswith("-")]
        rc, out, err = self.run(["systemctl", *opts, "--", *words], timeout=timeout or self.timeout)
        if rc not in ok:
            raise UnitError("systemctl %s failed (exit %d): %s" % (" ".join(args), rc, (err or out).strip()))
        return rc, out

    def show(self, *props: str, unit: str | None = None) -> dict[str, str]:
        try:
            return unit_show(unit or self.name + ".service", props, self.timeout, self.run)
        except CommandFailed as err:
            raise UnitError(str(err)) from None

    def found(self) -> dict[str, Any]:
        """The unit and its dead-man switch's timer as they are, read and changed nothing (a recovery's findings)."""
        return {"changed": False, "switch": self.switch,
                "found": {"unit": self.show("ActiveState", "SubState", "InvocationID"),
                          "switch": self.show("ActiveState", "SubState", unit=self.switch + ".timer")}}

    # -- install -------------------------------------------------------------------------------
    def verify(self, content: str, scratch: str) -> None:
        staged = os.path.join(scratch, self.name + ".service")
        with open(staged, "w", encoding="utf-8") as fh:
            fh.write(content)
        rc, _out, err = self.run(["systemd-analyze", "verify", "--", staged], timeout=self.timeout)
        problems = verify_problems(self.name, rc, err)
        if problems:
            raise UnitError("the new %s.service fails systemd-analyze verify and was not installed: %s"
                            % (self.name, " | ".join(p.strip() for p in problems)))

    def install(self, content: str, files: list[tuple[str, str, int]], enabled: bool | None, scratch: str) -> dict[str, Any]:
        """Verify the unit, then install it and `files` [(path, text, mode)] (the environment file,
        a secrets file). What this install replaces is kept under rollback/<token>/, and only that:
        a later cycle that changes nothing has nothing to roll back to."""
        self.verify(content, scratch)
        targets = [(self.file, content, 0o644), *files]
        before = {path: read_text(path) for path, _text, _mode in targets}
        changed = [(path, text, mode) for path, text, mode in targets
                   if before[path] != text or (before[path] is not None and os.stat(path).st_mode & 0o777 != mode)]
        unit_changed = before[self.file] != content
        kept = []
        if not self.check_mode and changed:
            if self.token is None:
                raise UnitError("install of %s needs the cycle's token (where the replaced files are kept)" % self.name)
            os.makedirs(os.path.join(self.rollback_dir, self.token), mode=0o700, exist_ok=True)
            self.prune_rollbacks()
            for path, _text, _mode in changed:
                # what this cycle replaced (a file it created has no earlier version to go back to)
                if before[path] is not None:
                    self.write(self.kept(path, self.token), before[path], 0o600)
                    kept.append(path)
            for path, text, mode in changed:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                self.write(path, text, mode)
        reloaded = False
        if not self.check_mode and (unit_changed or self.show("NeedDaemonReload").get("NeedDaemonReload") == "yes"):
            self.systemctl("daemon-reload")
            reloaded = True
        enable_changed = False
        if enabled is not None:
            _rc, state = self.systemctl("is-enabled", self.name + ".service", ok=(0, 1))
            is_enabled = state.strip() in ("enabled", "enabled-runtime", "alias", "static", "indirect", "generated")
            if is_enabled != enabled:
                enable_changed = True
                if not self.check_mode:
                    self.systemctl("enable" if enabled else "disable", self.name + ".service")
        env_changed = any(path != self.file for path, _t, _m in changed)
        return {"changed": bool(changed) or enable_changed, "unit_changed": unit_changed,
                "env_changed": env_changed, "enable_changed": enable_changed, "daemon_reloaded": reloaded,
                "rollback_kept": kept, "unit_file": self.file,
                "rollback_dir": os.path.join(self.rollback_dir, self.token or "-"),
                "diff": {"before": before[self.file] or "", "after": content, "before_header": self.file + " (installed)",
                         "after_header": self.file + " (new)"}}

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, spec: dict[str, list[str]], kill_leftovers: bool, gpu: dict[str, Any] | None, proc_root: str = "/proc",
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
             stop_timeout: float = 300) -> dict[str, Any]:
        """Stop the unit and prove it: of the processes that belonged to it before the stop (its
        cgroup, the descendants of its main PID), those still alive with the engine's own names
        are killed (never another process: a second server, a compiler, a shell); then the GPUs
        must be free."""
        service = self.name + ".service"
        state = self.show("ActiveState", "MainPID")
        was_active = state.get("ActiveState") in ACTIVE_STATES
        main_pid = int(state.get("MainPID") or 0) if str(state.get("MainPID") or "0").isdigit() else 0
        members = unit_members(processes(proc_root), service, main_pid) if was_active else []
        t0 = clock()
        if was_active and not self.check_mode:
            self.systemctl("stop", service, timeout=stop_timeout)  # systemd waits up to TimeoutStopSec, then SIGKILL
        stop_s = round(clock() - t0, 2)
        after, reset = self.clear_own_kill() if was_active and not self.check_mode else ({}, False)
        # check mode stops nothing, so the running server would count as left behind: nothing to report
        found = [] if self.check_mode else leftovers(members, processes(proc_root), spec)
        killed: list[dict[str, Any]] = []
        remaining: list[dict[str, Any]] = []
        if found:
            if kill_leftovers:
                signalled = kill_all([p["pid"] for p in found], lambda: leftovers(members, processes(proc_root), spec),
                                     clock, sleep)
                killed = [p for p in found if p["pid"] in signalled]
            remaining = leftovers(members, processes(proc_root), spec)
        if remaining:
            raise UnitError("%s stopped but these of its server processes remain: %s. %s"
                            % (service, "; ".join("%d %s" % (p["pid"], p["cmd"][:200]) for p in remaining),
                               "They survived SIGKILL for 10 s (uninterruptible, e.g. stuck in the GPU driver)."
                               if kill_leftovers else "Set service_drain_kill_leftovers=true or stop them."))
        others = [p for p in processes(proc_root) if p["service"] not in (None, service) and engine_process(p["argv"], spec)]
        report: dict[str, Any] = {"changed": was_active or bool(killed), "was": state.get("ActiveState"), "stop_s": stop_s,
                                  "leftover_processes": ["%d %s" % (p["pid"], p["cmd"][:200]) for p in found],
                                  "leftovers_killed": bool(killed),
                                  "other_services_processes": ["%d %s" % (p["pid"], p["service"]) for p in others],
                                  "after_stop": after, "reset_failed": reset,
                                  "gpu_memory_used_mib": {}}
        if gpu is not None and not self.check_mode:
            report["gpu_memory_used_mib"] = self.wait_gpu_free(gpu, clock, sleep)
        return report

    def clear_own_kill(self) -> tuple[dict[str, str], bool]:
        """The unit read back after this stop. SGLang ends its drain by SIGKILLing its own main process
        (kill_process_tree(include_parent=True): utils/common.py 0.5.16:2022-2026), which systemd records
        as failed/Result=signal after every clean stop: that failure, and only that one, is cleared and
        `inactive` read back. A stop that ran into TimeoutStopSec (Result=timeout), an exit code or the OOM
        killer stays as it is."""
        after = self.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
        own_kill = (after.get("ActiveState") == "failed" and after.get("Result") == "signal"
                    and str(after.get("ExecMainStatus")) == str(int(signal.SIGKILL)))
        if not own_kill:
            return after, False
        self.systemctl("reset-failed", self.name + ".service")
        now = self.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
        if now.get("ActiveState") != "inactive":
            raise UnitError("%s.service is still %s after reset-failed (it ended with the engine's own SIGKILL after its "
                            "drain): see systemctl status" % (self.name, now.get("ActiveState")))
        return now, True

    def wait_gpu_free(self, gpu: dict[str, Any], clock: Callable[[], float],
                      sleep: Callable[[float], None]) -> dict[int, int | None]:
        """Poll nvidia-smi until every GPU (of gpu['indices']) holds at most gpu['free_mib'] MiB, within
        gpu['wait_s'] seconds of wall clock: each nvidia-smi call is cut at what is left of it."""
        deadline = clock() + gpu["wait_s"]
        while True:
            left = max(1.0, deadline - clock())
            rc, out, err = self.run(gpu_query(gpu["nvidia_smi"]), timeout=min(left, gpu.get("call_timeout_s", 15)))
            if rc != 0:
                raise UnitError("nvidia-smi failed (exit %d) while checking that %s freed the GPUs: %s"
                                % (rc, self.name, (err or out).strip()))
            used = {g["index"]: g["used_mib"] for g in parse_gpus(out)}
            if all(mib is None for mib in used.values()):
                raise UnitError("nvidia-smi gave no GPU's memory while checking that %s freed the GPUs (its output: %r): "
                                "a GPU that cannot be read is not free" % (self.name, out.strip()[:200]))
            busy = busy_gpus(used, gpu["free_mib"], gpu.get("indices"))
            if not busy:
                return used
            if clock() >= deadline:
                held = ", ".join("GPU %d %s" % (i, "no reading" if mib is None else "%d MiB" % mib) for i, mib in sorted(busy.items()))
                raise UnitError("%s.service stopped but GPU memory is still in use after %d s: %s (free means <= %d MiB). "
                                "Another process holds the GPU: see nvidia-smi on the host."
                                % (self.name, gpu["wait_s"], held, gpu["free_mib"]))
            sleep(min(2.0, max(0.1, deadline - clock())))

    # -- start and rollback --------------------------------------------------------------------
    def end_sweep(self, sweep_tag: str | None, proc_root: str = "/proc", clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> list[str]:
        """A sweep this cycle started that still runs (its poll was lost, it ran past its budget)
        holds the GPU: it is killed, and gone, before the server may start."""
        if not sweep_tag:
            return []

        def alive() -> list[int]:
            return [pid for pid, tag in sweep_tags(processes(proc_root)) if tag == sweep_tag]

        found = alive()
        kill_all(found, alive, clock, sleep)
        if alive():
            raise UnitError("the sweep %s of this cycle survived SIGKILL for 10 s; %s was not started beside it"
                            % (sweep_tag, self.name))
        return ["%d %s" % (pid, sweep_tag) for pid in found]

    def start(self, sweep_tag: str | None = None, restart: bool = False, only_invocation: str | None = None) -> dict[str, Any]:
        """Start the unit (`restart`: also when it runs, for a server whose state is not known).
        With `only_invocation`, a restart happens only while the unit still runs that start of it
        (its InvocationID); another one was started since, and nothing is done."""
        shown = self.show("ActiveState", "InvocationID")
        state, invocation = shown["ActiveState"], shown.get("InvocationID", "")
        if only_invocation is not None and invocation != only_invocation:
            return {"changed": False, "was": state, "n_restarts": 0, "sweeps_ended": [], "invocation_id": invocation}
        changed = restart or state not in ACTIVE_STATES
        if self.check_mode:
            return {"changed": changed, "was": state, "n_restarts": 0, "sweeps_ended": [], "invocation_id": invocation}
        ended = self.end_sweep(sweep_tag)
        killed = self.end_now() if restart and state in ACTIVE_STATES else {}
        # systemd counts deliberate starts against StartLimitBurst too; reset-failed also sets
        # NRestarts to 0 (service_reset_failed), the baseline a crash loop is measured from
        self.systemctl("reset-failed", self.name + ".service", ok=(0, 1))
        if changed:
            self.systemctl("start", "--no-block", self.name + ".service")
        return {"changed": changed, "was": state, "n_restarts": 0, "sweeps_ended": ended, "invocation_id": invocation,
                "ended_by_sigkill": killed}

    def end_now(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                wait_s: float = END_WAIT_S) -> dict[str, str]:
        """End a server whose state is not known (paused, released, a failed resume) within a bound that
        does not depend on what its front end holds, and read back that it ended.

        Why not a SIGTERM: SGLang's SIGTERM handler drains every request the tokenizer manager holds
        (sigterm_watchdog loops while rid_to_state is not empty, "Gracefully exiting... Remaining number of
        requests N" every 5 s), and a paused server holds each new request in its front end until
        continue_generation, so a stop lasts until TimeoutStopSec (105 s measured on the H200). What it
        holds can never be served by this start of it (generation paused, memory released); what ran was
        aborted by the pause. So: a stop job first (systemd never applies Restart= to a unit whose stop
        was requested: the kill below cannot start an automatic restart, and no start is queued that the
        kill could hit), then SIGKILL to every process of the unit, then the unit read back as ended."""
        service = self.name + ".service"
        self.systemctl("stop", "--no-block", service)
        # --kill-who: the spelling systemd before 252 knows, and a prefix 252 takes for --kill-whom. Exit 1
        # when its processes are gone already; any other failure shows in the read-back below, with its words
        rc, out, err = self.run(["systemctl", "--kill-who=all", "--signal=SIGKILL", "--", "kill", service], timeout=self.timeout)
        deadline = clock() + wait_s
        while True:
            now = self.show("ActiveState", "SubState", "Result")
            if now.get("ActiveState") in ("inactive", "failed"):
                return now
            if clock() >= deadline:
                # a start is queued behind the stop all the same: the unit comes back once its processes are gone
                self.systemctl("start", "--no-block", service, ok=(0, 1))
                raise UnitError("%s is still %s/%s %d s after SIGKILL to all its processes%s: a start is queued behind "
                                "the stop; see systemctl status %s and nvidia-smi on the host (a process stuck in the "
                                "GPU driver?)" % (service, now.get("ActiveState"), now.get("SubState"), wait_s,
                                                  " (systemctl kill exited %d: %s)" % (rc, (err or out).strip()) if rc else "",
                                                  service))
            sleep(0.2)

    def rollback(self) -> dict[str, Any]:
        """Put back what this cycle's install replaced, and only that; without such files there is
        nothing to roll back to and nothing is restarted."""
        if self.token is None:
            raise UnitError("rollback of %s needs the cycle's token" % self.name)
        kept_dir = os.path.join(self.rollback_dir, self.token)
        restored = []
        for live in (self.file, self.env_file, *self.extra_files):
            text = read_text(self.kept(live, self.token)) if live else None
            if live and text is not None and read_text(live) != text:
                restored.append(live)
                if not self.check_mode:
                    self.write(live, text, 0o644 if live == self.file else 0o600)
        if not restored:
            return {"changed": False, "rolled_back": False, "restored": [], "n_restarts": 0, "rollback_dir": kept_dir}
        if not self.check_mode:
            self.systemctl("daemon-reload")
            if self.show("ActiveState").get("ActiveState") in ACTIVE_STATES:
                self.end_now()  # a server that failed its readiness: what its front end holds must not hold the stop
            self.systemctl("reset-failed", self.name + ".service", ok=(0, 1))
            self.systemctl("start", "--no-block", self.name + ".service")
        return {"changed": True, "rolled_back": True, "restored": restored, "n_restarts": 0,
                "rollback_dir": kept_dir}


def key_texts(unit: str, files: list[str], rollback_dir: str, timeout: float, runner: Runner = run,
              proc_root: str = "/proc") -> dict[str, Any]:
    """What the preflight reads of a unit, in one round trip: its main PID (0: it runs nothing) and the text of each
    file that may hold its API key, by path - `files` (its environment and secrets files), its main process's
    environment (NUL-separated) and the copies of `files` an install kept under `rollback_dir` (a rotation not yet in
    force). A file that does not exist or cannot be read is left out: it holds no key. A hung systemctl is a
    CommandTimeout at `timeout`, one that fails or gives no MainPID a CommandFailed, one that cannot start a
    CommandError: a PID not known is never 0. Paths are read as given (texts' keys are the caller's strings)."""
    pid = unit_show(unit, ("MainPID",), timeout, runner, numbers=True).get("MainPID")
    if not isinstance(pid, int):
        raise CommandFailed("systemctl show %s gave no MainPID (%r)" % (unit, str(pid)[:40]))
    names = {os.path.basename(f) for f in files if f}
    # what an install kept is a regular file: a symlink, a FIFO or a device of that name is never followed or opened
    kept = []
    for top, _dirs, found in os.walk(rollback_dir):  # "" or a missing directory: nothing
        for path in (os.path.join(top, name) for name in sorted(names.intersection(found))):
            if os.path.isfile(path) and not os.path.islink(path):
                kept.append(path)
    environ = [os.path.join(proc_root, str(pid), "environ")] if pid > 0 else []
    texts = {}
    for path in [f for f in files if f] + environ + kept:
        try:
            with open(path, "rb") as fh:
                texts[path] = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
    return {"main_pid": pid, "texts": texts}
