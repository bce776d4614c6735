# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The life of an inference server's systemd unit, each step one round trip to the host.

install  verify the new unit with systemd-analyze, keep the installed unit and environment file
         for rollback, install both atomically, daemon-reload, enable
stop     stop the unit, find the server processes it left behind (by the engine profile's
         process names), kill them, wait until the GPU memory is really free
start    reset-failed (a deliberate start must not count against StartLimitBurst), start without
         waiting for the start job (readiness is the cycle's probe, not systemd's)
rollback put the kept unit and environment file back, reset-failed, restart

The host side of `library/inference_unit.py`. Commands are argv lists (no shell); everything that
needs no host is a pure function with unit tests.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

# (rc, stdout, stderr) of an argv list
Runner = Callable[[list[str]], tuple[int, str, str]]

UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")
ACTIVE_STATES = ("active", "activating", "reloading", "deactivating")
VERIFY_PROBLEM = r"\.service:.*(error|invalid|not executable|no such|unknown|failed|bad)"


class UnitError(Exception):
    """A step failed; the message names the unit, the step and what to do."""


def check_name(name: str, field: str = "name") -> str:
    """The unit name without .service, or a UnitError naming `field` (the option or inventory variable)."""
    if name.endswith(".service"):
        name = name[: -len(".service")]
    if not name or not UNIT_NAME.match(name):
        raise UnitError("%s=%s is not a systemd unit name (letters, digits and :_.\\@- only, without .service)" % (field, name))
    return name


def verify_problems(name: str, rc: int, stderr: str) -> list[str]:
    """The lines of `systemd-analyze verify` output that make the unit unusable. systemd-analyze
    also reports other units' problems (the host's own), which are not this unit's business."""
    own = [line for line in stderr.splitlines() if re.search(re.escape(name) + VERIFY_PROBLEM, line, re.IGNORECASE)]
    if rc != 0 and not own:
        own = [line for line in stderr.splitlines() if line.strip()][-5:] or ["systemd-analyze verify exited %d" % rc]
    return own


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show -p A -p B` output -> {A: value, B: value}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def match_processes(procs: list[tuple[int, str]], patterns: list[str]) -> list[tuple[int, str]]:
    """Processes whose command line contains one of the patterns (plain substrings, as the
    engine profile's process names are: SGLang's children rename themselves sglang::scheduler_TP0)."""
    return [(pid, cmd) for pid, cmd in procs if any(p in cmd for p in patterns)]


def owning_service(cgroup: str) -> str | None:
    """The systemd service a process belongs to, from /proc/PID/cgroup (v2 "0::" line or the v1
    "name=systemd" one): the last path component ending in .service, or None (a login session,
    a scope, the root)."""
    for line in cgroup.splitlines():
        _hid, _sep, rest = line.partition(":")
        controllers, _sep, path = rest.partition(":")
        if controllers in ("", "name=systemd"):
            services = [part for part in path.split("/") if part.endswith(".service")]
            if services:
                return services[-1]
    return None


def list_processes(proc_root: str = "/proc") -> list[tuple[int, str, str | None]]:
    """Every process's pid, command line and systemd service (None outside one), except this
    module's own interpreter and its parents, kernel threads and zombies."""
    skip = {os.getpid(), os.getppid()}
    procs = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit() or int(entry) in skip:
            continue
        try:
            with open(os.path.join(proc_root, entry, "cmdline"), "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            with open(os.path.join(proc_root, entry, "cgroup"), encoding="utf-8") as fh:
                service = owning_service(fh.read())
        except OSError:
            continue  # gone meanwhile
        if cmd:
            procs.append((int(entry), cmd, service))
    return procs


def parse_gpu_memory(csv: str) -> dict[int, int]:
    """nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -> {index: MiB}."""
    used = {}
    for line in csv.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            used[int(parts[0])] = int(parts[1])
    return used


def busy_gpus(used: dict[int, int], free_mib: int, indices: list[int] | None = None) -> dict[int, int]:
    """The GPUs (of `indices`, or all) still holding more than free_mib MiB."""
    return {i: mib for i, mib in used.items() if (not indices or i in indices) and mib > free_mib}


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


class Unit:
    """One systemd service unit on this host. `run` executes argv lists; `write` writes a file
    atomically with a mode (the module's atomic_move); check mode changes nothing."""

    def __init__(self, name: str, run: Runner, write: Callable[[str, str, int], None], *, systemd_dir: str,
                 state_dir: str, env_file: str | None = None, check_mode: bool = False) -> None:
        self.name = check_name(name)
        self.run, self.write, self.check_mode = run, write, check_mode
        self.file = os.path.join(systemd_dir, self.name + ".service")
        self.env_file = env_file
        self.rollback_dir = os.path.join(state_dir, "rollback")
        self.rollback_file = os.path.join(self.rollback_dir, self.name + ".service")
        self.rollback_env = os.path.join(self.rollback_dir, self.name + ".env")

    def systemctl(self, *args: str, ok: tuple[int, ...] = (0,)) -> tuple[int, str]:
        rc, out, err = self.run(["systemctl", *args])
        if rc not in ok:
            raise UnitError("systemctl %s failed (exit %d): %s" % (" ".join(args), rc, (err or out).strip()))
        return rc, out

    def show(self, *props: str) -> dict[str, str]:
        args = ["show", self.name + ".service"]
        for p in props:
            args += ["-p", p]
        return parse_show(self.systemctl(*args)[1])

    # -- install -------------------------------------------------------------------------------
    def verify(self, content: str, scratch: str) -> None:
        staged = os.path.join(scratch, self.name + ".service")
        with open(staged, "w", encoding="utf-8") as fh:
            fh.write(content)
        rc, _out, err = self.run(["systemd-analyze", "verify", staged])
        problems = verify_problems(self.name, rc, err)
        if problems:
            raise UnitError("the new %s.service fails systemd-analyze verify and was not installed: %s"
                            % (self.name, " | ".join(p.strip() for p in problems)))

    def install(self, content: str, env_content: str | None, enabled: bool | None, scratch: str) -> dict[str, Any]:
        self.verify(content, scratch)
        before = read_text(self.file)
        env_before = read_text(self.env_file) if self.env_file and env_content is not None else None
        unit_changed = before != content
        env_changed = self.env_file is not None and env_content is not None and (
            env_before != env_content or (env_before is not None and os.stat(self.env_file).st_mode & 0o777 != 0o600))
        kept = False
        if not self.check_mode:
            if unit_changed or env_changed:
                os.makedirs(self.rollback_dir, mode=0o700, exist_ok=True)
                # the previous configuration, for service_start's rollback: only when it is replaced,
                # so that a re-run with the same unit keeps the last different one
                if before is not None and unit_changed:
                    self.write(self.rollback_file, before, 0o644)
                    kept = True
                if env_before is not None and env_changed:
                    self.write(self.rollback_env, env_before, 0o600)
            if env_changed and self.env_file and env_content is not None:
                os.makedirs(os.path.dirname(self.env_file), mode=0o700, exist_ok=True)
                self.write(self.env_file, env_content, 0o600)
            if unit_changed:
                self.write(self.file, content, 0o644)
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
        return {"changed": unit_changed or env_changed or enable_changed, "unit_changed": unit_changed,
                "env_changed": env_changed, "enable_changed": enable_changed, "daemon_reloaded": reloaded,
                "rollback_kept": kept, "unit_file": self.file, "rollback_file": self.rollback_file,
                "diff": {"before": before or "", "after": content, "before_header": self.file + " (installed)",
                         "after_header": self.file + " (new)"}}

    # -- stop ----------------------------------------------------------------------------------
    def stop(self, patterns: list[str], kill_leftovers: bool, gpu: dict[str, Any] | None, proc_root: str = "/proc",
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
        service = self.name + ".service"

        def scan() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
            """Server processes outside any other service (ours to kill), and those inside another
            service (a second inference service on the host is not ours: left alone, reported)."""
            procs = list_processes(proc_root)
            return (match_processes([(p, c) for p, c, s in procs if s in (None, service)], patterns),
                    match_processes([(p, c) for p, c, s in procs if s not in (None, service)], patterns))

        state = self.show("ActiveState")["ActiveState"]
        was_active = state in ACTIVE_STATES
        t0 = clock()
        if was_active and not self.check_mode:
            self.systemctl("stop", service)  # systemd waits up to TimeoutStopSec, then SIGKILL
        stop_s = round(clock() - t0, 2)
        # check mode stops nothing, so the running server would count as left behind: nothing to report
        leftovers, others = ([], []) if self.check_mode else scan()
        killed: list[tuple[int, str]] = []
        remaining: list[tuple[int, str]] = []
        if leftovers:
            if kill_leftovers:
                for pid, cmd in leftovers:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed.append((pid, cmd))
                    except ProcessLookupError:
                        pass  # it exited by itself meanwhile
                deadline = clock() + 10
                while scan()[0] and clock() < deadline:
                    sleep(0.2)
            remaining = scan()[0]
        if remaining:
            raise UnitError("%s stopped but these server processes remain: %s. %s"
                            % (service, "; ".join("%d %s" % pc for pc in remaining),
                               "They survived SIGKILL for 10 s (uninterruptible, e.g. stuck in the GPU driver)."
                               if kill_leftovers else "Set service_drain_kill_leftovers=true or stop them."))
        report: dict[str, Any] = {"changed": was_active or bool(killed), "was": state, "stop_s": stop_s,
                                  "leftover_processes": ["%d %s" % pc for pc in leftovers], "leftovers_killed": bool(killed),
                                  "other_services_processes": ["%d %s" % pc for pc in others], "gpu_memory_used_mib": {}}
        if gpu is not None and not self.check_mode:
            report["gpu_memory_used_mib"] = self.wait_gpu_free(gpu, clock, sleep)
        return report

    def wait_gpu_free(self, gpu: dict[str, Any], clock: Callable[[], float], sleep: Callable[[float], None]) -> dict[int, int]:
        """Poll nvidia-smi until every GPU (of gpu['indices']) holds at most gpu['free_mib'] MiB."""
        deadline = clock() + gpu["wait_s"]
        while True:
            rc, out, err = self.run([gpu["nvidia_smi"], "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"])
            if rc != 0:
                raise UnitError("nvidia-smi failed (exit %d) while checking that %s freed the GPUs: %s"
                                % (rc, self.name, (err or out).strip()))
            used = parse_gpu_memory(out)
            busy = busy_gpus(used, gpu["free_mib"], gpu.get("indices"))
            if not busy:
                return used
            if clock() >= deadline:
                raise UnitError("%s.service stopped but GPU memory is still in use after %d s: %s (free means <= %d MiB). "
                                "Another process holds the GPU: see nvidia-smi on the host."
                                % (self.name, gpu["wait_s"], ", ".join("GPU %d %d MiB" % kv for kv in sorted(busy.items())),
                                   gpu["free_mib"]))
            sleep(min(2.0, max(0.1, deadline - clock())))

    # -- start and rollback --------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        state = self.show("ActiveState")["ActiveState"]
        if self.check_mode:
            return {"changed": state not in ACTIVE_STATES, "was": state, "n_restarts": 0}
        # systemd counts deliberate starts against StartLimitBurst too; reset-failed also sets
        # NRestarts to 0 (service_reset_failed), the baseline a crash loop is measured from
        self.systemctl("reset-failed", self.name + ".service", ok=(0, 1))
        if state not in ACTIVE_STATES:
            self.systemctl("start", "--no-block", self.name + ".service")
        return {"changed": state not in ACTIVE_STATES, "was": state, "n_restarts": 0}

    def rollback(self) -> dict[str, Any]:
        restored = []
        for kept, live, mode in ((self.rollback_file, self.file, 0o644), (self.rollback_env, self.env_file, 0o600)):
            text = read_text(kept)
            if live and text is not None and read_text(live) != text:
                restored.append(live)
                if not self.check_mode:
                    self.write(live, text, mode)
        if not self.check_mode:
            self.systemctl("daemon-reload")
            self.systemctl("reset-failed", self.name + ".service", ok=(0, 1))
            self.systemctl("restart", "--no-block", self.name + ".service")
        return {"changed": True, "rolled_back": bool(restored), "restored": restored, "n_restarts": 0,
                "rollback_file": self.rollback_file}
