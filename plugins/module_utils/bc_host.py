# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host probes every module shares, in one place: commands with a deadline (`run`), the GPUs
(`gpu_query`, `parse_gpus`, `gpus`), the process table (`processes`), `systemctl show` (`unit_show`, `parse_show`),
the kernel's counters (`vmstat`, `meminfo_mib`), atomic writes (`write_atomic`), and secrets kept
out of text (`redact`). Standard library only: the sweep's worker (staged on the host for the
SGLang venv, which has no ansible) imports it too.

Every command the modules run goes through `run`: a hung `nvidia-smi` (it hangs on a wedged GPU)
or `systemctl` ends at its timeout with an error that names the command, never a hung task.
Every text that leaves a module or the cycle (journal tails, process listings, failure messages,
the event log) goes through `redact`.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

REDACTED = "<redacted>"
# `api_key='x'` (SGLang's ServerArgs repr), `--api-key x`, `API_KEY=x`, `Authorization: Bearer x`,
# `token: x`: the value after any secret-looking key, whatever the quoting
SECRET_FIELD = re.compile(
    r"""(?ix)
    (?P<key>\b[A-Za-z_-]*(?:api[_-]?key|token|secret|password|passwd|authorization)['"]?)
    (?P<sep>\s*[=:]\s*(?:bearer\s+)?['"]?)
    (?P<value>(?!None\b|null\b|<redacted>)[^\s'",)}\]]+)
    """)
# a command-line flag and its value: `--api-key x`, `--admin-api-key x`
SECRET_FLAG = re.compile(r"(?i)(--[a-z-]*(?:api-key|token|secret|password)(?:\s+|=))(?!<redacted>)([^\s'\",)}\]]+)")
BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s'\",)}\]]+")
# values too short to be secrets would redact half the text: an API key is longer
MIN_SECRET_LEN = 4


class CommandError(Exception):
    """A command failed to run or ran past its deadline; the message names it."""


class CommandTimeout(CommandError):
    """A command ran past its deadline and was killed (a hung one), not one that could not start."""


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every given secret value and every secret-looking field's value replaced."""
    out = str(text)
    for secret in sorted({s for s in secrets if s and len(str(s)) >= MIN_SECRET_LEN}, key=len, reverse=True):
        out = out.replace(str(secret), REDACTED)
    out = SECRET_FLAG.sub(lambda m: m.group(1) + REDACTED, out)
    out = SECRET_FIELD.sub(lambda m: m.group("key") + m.group("sep") + REDACTED, out)
    return BEARER.sub(lambda m: m.group(1) + REDACTED, out)


def check_timeout(value: float, field: str, maximum: float = 7 * 86400) -> float:
    """A finite number of seconds in (0, maximum], or a ValueError naming `field`."""
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value) or value <= 0 or value > maximum:
        raise ValueError("%s must be > 0 and at most %d seconds (a finite number), got %r" % (field, maximum, value))
    return float(value)


def run(argv: list[str], timeout: float, stdin: str | None = None, env: dict[str, str] | None = None,
        cwd: str | None = None) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of an argument list (no shell), or a CommandTimeout once it ran past
    `timeout` seconds (the process is killed), a CommandError if it could not be started."""
    try:
        # not AnsibleModule.run_command: it takes no timeout, and every command here has one (and runs without a module)
        # pylint: disable-next=ansible-bad-function
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False,
                              errors="replace", env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise CommandTimeout("%s did not finish within %g s and was killed (a hung %s: see the host)"
                             % (" ".join(argv[:3]), timeout, argv[0])) from None
    except OSError as err:
        raise CommandError("cannot run %s: %s" % (argv[0], err)) from None
    return proc.returncode, proc.stdout, proc.stderr


GPU_QUERY = ("index", "name", "memory.free", "memory.total", "memory.used", "driver_version")


def gpu_query(nvidia_smi: str) -> list[str]:
    """The one `nvidia-smi --query-gpu` call every GPU reading of this project makes (GPU_QUERY's fields)."""
    return [nvidia_smi, "--query-gpu=" + ",".join(GPU_QUERY), "--format=csv,noheader,nounits"]


def parse_gpus(csv: str) -> list[dict[str, Any]]:
    """gpu_query's output -> each GPU's index, name, free/total/used MiB and driver. A number nvidia-smi does not give
    ([N/A]: a MIG parent, a GPU in a bad state) is None: the GPU is listed with no reading, never dropped."""
    found = []
    for line in csv.splitlines():
        parts = [x.strip() for x in line.split(",")]
        # read from both ends: a name may hold a comma
        if len(parts) >= len(GPU_QUERY) and parts[0].isdigit():
            free, total, used = (int(p) if p.isdigit() else None for p in parts[-4:-1])
            found.append({"index": int(parts[0]), "name": ", ".join(parts[1:-4]), "free_mib": free, "total_mib": total,
                          "used_mib": used, "driver": parts[-1]})
    return found


def gpus(nvidia_smi: str, timeout: float) -> list[dict[str, Any]]:
    """Each GPU with all its readings (parse_gpus) from one gpu_query call ([] when it fails: a host without a
    driver); a hung nvidia-smi is a CommandError at `timeout`. A GPU without a reading is left out here: sizing
    a sweep needs its numbers."""
    rc, out, _err = run(gpu_query(nvidia_smi), timeout)
    return [g for g in parse_gpus(out if rc == 0 else "") if None not in g.values()]


class CommandFailed(CommandError):
    """A command that ran and exited non-zero (its words in the message)."""


def unit_show(unit: str, props: list[str] | tuple[str, ...], timeout: float,
              runner: Callable[..., tuple[int, str, str]] = run, numbers: bool = False) -> dict[str, Any]:
    """The one `systemctl show` of the project: `props` of `unit` (parse_show; `numbers`: digit-only values as ints),
    the unit's name after "--" (never read as an option). An exit other than 0 is CommandFailed; a hung systemctl a
    CommandError at `timeout`. `runner` is `run` or a caller's own (a module's, a test's)."""
    rc, out, err = runner(["systemctl", "--property=" + ",".join(props), "--", "show", unit], timeout=timeout)
    if rc != 0:
        raise CommandFailed("systemctl show %s failed (exit %d): %s" % (unit, rc, (err or out).strip()))
    return parse_show(out, numbers)


def parse_show(text: str, numbers: bool = False) -> dict[str, Any]:
    """`systemctl show -p A -p B` output (KEY=VALUE lines) -> {A: value, B: value}; with `numbers`,
    digit-only values as ints."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = int(value) if numbers and value.isdigit() else value
    return out


def main_process(unit: str, timeout: float = 15, proc_root: str = "/proc") -> dict[str, Any] | None:
    """The unit's running main process as the kernel shows it: pid, argv (its command line) and environ (a
    dict; None when it cannot be read), or None when there is no such process or its command line cannot be read
    (no unit, not running, gone meanwhile): what a server really runs with, whatever its unit file says today."""
    try:
        pid = unit_show(unit, ("MainPID",), timeout, numbers=True).get("MainPID")
        if not isinstance(pid, int) or pid <= 0:
            return None
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as fh:
            raw_argv = fh.read()
    except (CommandError, OSError):
        return None
    environ: dict[str, str] | None
    try:
        with open(os.path.join(proc_root, str(pid), "environ"), "rb") as fh:
            environ = dict(e.decode("utf-8", "replace").partition("=")[::2] for e in fh.read().split(b"\0") if b"=" in e)
    except OSError:
        environ = None  # another user's process without the right to read it: unknown, not empty
    argv = [a.decode("utf-8", "replace") for a in raw_argv.rstrip(b"\0").split(b"\0")] if raw_argv.strip(b"\0") else []
    return {"pid": pid, "argv": argv, "environ": environ} if argv else None


def _flag_name(arg: str) -> str:
    """The option name of an argv token as argparse-based servers read it (vLLM's parser turns `_` into `-`:
    utils/argparse_utils.py of 0.32), without its `=value`; "" for a token that is not a long option."""
    return arg.split("=", 1)[0].replace("_", "-") if arg.startswith("--") and len(arg) > 2 else ""


def _abbreviates(name: str, *flags: str) -> bool:
    """`name` is a strict prefix of one of `flags`: argparse (allow_abbrev) would read it as that flag."""
    return any(flag.startswith(name) and name != flag for flag in flags)


def flag_on(argv: list[str], flag: str) -> bool | None:
    """Whether a boolean `flag` is on in `argv`: the last of `--flag` and `--no-flag` given wins (argparse's
    BooleanOptionalAction; `_` read as `-`); None (unknown) when a token abbreviates either, which argparse would
    take as it; `--flag=...` or absent is not on."""
    negated = "--no-" + flag[2:]
    state: bool | None = False
    for arg in argv:
        name = _flag_name(arg)
        if not name:
            continue
        if name == flag and "=" not in arg:
            state = True
        elif name == negated and "=" not in arg:
            state = False
        elif _abbreviates(name, flag, negated):
            return None
    return state


def flag_value(argv: list[str], flag: str) -> str | None:
    """The value of `flag` in `argv` (`--flag V` or `--flag=V`, the last given; `_` read as `-`), or None when absent
    or unknown (a flag that follows it is not its value; a token that abbreviates it makes the value unknown)."""
    value = None
    for i, arg in enumerate(argv):
        name = _flag_name(arg)
        if not name:
            continue
        if name == flag:
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value = argv[i + 1]
        elif _abbreviates(name, flag):
            return None
    return value


def _short_name(arg: str) -> str:
    """The option name of a short (single-dash) argv token, without its `=value`; "" for any other token."""
    return arg.split("=", 1)[0] if len(arg) > 1 and arg[0] == "-" and arg[1] != "-" else ""


def option_values(argv: list[str], spellings: list[str], others: tuple[str, ...] = ()) -> list[str | None] | None:
    """Every value `argv` gives one option spelt any of `spellings` (long `--name` with `_` read as `-`, short `-n`;
    `NAME V` or `NAME=V`), in order, None where a spelling is given with no value (a flag follows, or the end); None
    (unknown) when a token abbreviates a spelling, which argparse (allow_abbrev, long and short) would read as it,
    unless it is one of `others`, options of their own (`-dp` beside `-dpl`: argparse takes an exact name first)."""
    values: list[str | None] = []
    for i, arg in enumerate(argv):
        name = _flag_name(arg) or _short_name(arg)
        if not name:
            continue
        if name in spellings:
            if "=" in arg:
                values.append(arg.split("=", 1)[1])
            else:
                values.append(argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None)
        elif name not in others and _abbreviates(name, *spellings):
            return None
    return values


def loopback(host: str | None) -> bool:
    """Whether a server told to listen on `host` is reachable from this machine only (127.0.0.0/8, ::1,
    localhost); None (the server's default: every interface), "", 0.0.0.0 and any other address are not."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


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


def processes(proc_root: str = "/proc") -> list[dict[str, Any]]:
    """Every process but this module's interpreter and its parents, kernel threads and zombies:
    pid, ppid, start (clock ticks since boot: with the pid, a process's identity), argv, cmd and
    service (None outside one)."""
    skip = {os.getpid(), os.getppid()}
    out = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit() or int(entry) in skip:
            continue
        base = os.path.join(proc_root, entry)
        try:
            with open(os.path.join(base, "cmdline"), "rb") as fh:
                raw = fh.read()
            with open(os.path.join(base, "cgroup"), encoding="utf-8") as fh:
                cgroup = fh.read()
            with open(os.path.join(base, "stat"), encoding="utf-8", errors="replace") as fh:
                stat = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        argv = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0")] if raw.strip(b"\0") else []
        if argv:
            out.append({"pid": int(entry), "ppid": int(stat[1]), "start": int(stat[19]), "argv": argv,
                        "cmd": " ".join(argv).strip(), "service": owning_service(cgroup)})
    return out


def vmstat(name: str, text: str | None = None) -> int | None:
    """A counter of /proc/vmstat (e.g. oom_kill, Linux >= 4.13), from `text` (a slurped copy) or
    the file itself; None when the kernel has no such counter or it cannot be read."""
    try:
        if text is None:
            with open("/proc/vmstat", encoding="ascii") as fh:
                text = fh.read()
        for line in text.splitlines():
            key, _sep, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def meminfo_mib(field: str = "MemTotal") -> int | None:
    """A field of /proc/meminfo in MiB, None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_text(path: str) -> str | None:
    """A file's text, None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write beside the target with the final mode, flush it to disk, then rename over it: never
    half a file, and a secret's file is never readable by others, not even for a moment."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".bc-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# -- the lock's guard ------------------------------------------------------------------------------
class LockError(Exception):
    """The lock could not be read or changed safely; the message says which file and why."""


def guard_file(path: str) -> str:
    """The guard of the lock at `path`: `.<name>.guard` in the same directory."""
    head, name = os.path.split(path.rstrip("/"))
    return os.path.join(head, "." + name + ".guard")


class Guard:
    """An exclusive flock of `.<name>.guard` beside the lock (hidden, empty, kept: a listing shows only locks),
    the one place every change of a held lock goes through (a take-over, the holder's renewal and record, its
    release): a holder's write never lands on a lock another cycle took over meanwhile. Bounded (`wait_s`),
    never through a symlink; the kernel drops it if the process dies."""

    def __init__(self, path: str, wait_s: float = 30) -> None:
        self.file, self.wait_s, self.fd = guard_file(path), wait_s, -1

    def __enter__(self) -> Guard:
        try:
            self.fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise LockError("cannot open the lock's guard %s: %s" % (self.file, exc.strerror)) from None
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(self.fd)
                    raise LockError("the lock's guard %s stayed held for %d s (another cycle in the middle of a take-over "
                                    "that does not end?)" % (self.file, self.wait_s)) from None
                time.sleep(0.05)

    def __exit__(self, *_exc: object) -> None:
        os.close(self.fd)


# -- the controller's heartbeat -----------------------------------------------------------------
# Each contact of a cycle's controller with the host (a readiness probe, a sweep poll, a stop, a start)
# writes when the controller promises to be back at the latest: `until`, whole epoch seconds, in one
# file in the cycle's lock directory. The host's dead-man switch and a second controller read it: past
# `until`, the controller is dead (killed, cancelled, cut off) whatever its pid or host name says.
HEARTBEAT_OPTION: dict[str, Any] = {
    "type": "dict",
    "options": {"path": {"type": "path", "required": True}, "for_s": {"type": "int", "required": True},
                "token": {"type": "str", "no_log": False}},
}


def beat(heartbeat: dict[str, Any] | None, now: float, own_s: float = 0) -> dict[str, Any] | None:
    """Write the heartbeat into its directory, which must exist (the cycle's lock: a lock removed meanwhile is
    not re-created by a heartbeat): the controller is back by now + `own_s` (this call's own worst case, which
    the module knows from its parameters) + `for_s` (the silence the controller keeps after it: the delay to its
    next call and a grace). Returns what was written, or why not (the switch then reads the controller as dead:
    the safe side); None without a heartbeat."""
    if not heartbeat:
        return None
    path, for_s = heartbeat["path"], heartbeat["for_s"]
    if not isinstance(for_s, int) or for_s < 1:
        return {"path": path, "written": False, "why": "for_s must be a whole number of seconds >= 1, got %r" % (for_s,)}
    until = math.ceil(now + own_s) + for_s
    if heartbeat.get("token") and not os.path.isdir(os.path.dirname(path)):
        return {"path": path, "written": False, "lost": True, "why": "its lock %s is gone" % os.path.dirname(path)}
    if not os.path.isdir(os.path.dirname(path)) or os.path.islink(path):
        return {"path": path, "written": False, "why": "%s is not a directory, or the heartbeat is a link" % os.path.dirname(path)}
    try:
        # under the lock's guard: a take-over (host_lock.claim) never lands between the holder's read and this write
        with Guard(os.path.dirname(path)):
            holder = lock_holder(path)
            if heartbeat.get("token") and holder != heartbeat["token"]:
                # only the lock's holder beats: a dead cycle's orphaned poll never keeps another's switch quiet
                return {"path": path, "written": False, "lost": True,
                        "why": "the lock %s is held by cycle %s" % (os.path.dirname(path), holder)}
            write_atomic(path, "%d\n" % until, 0o600)
    except (OSError, LockError) as exc:
        return {"path": path, "written": False, "why": str(getattr(exc, "strerror", None) or exc)}
    return {"path": path, "written": True, "until": until}


def lock_holder(heartbeat_path: str) -> str | None:
    """The token of the lock the heartbeat is in (its owner.json beside it); None if it cannot be read."""
    try:
        return json.loads(read_text(os.path.join(os.path.dirname(heartbeat_path), "owner.json")) or "{}").get("token")
    except (OSError, ValueError, AttributeError):
        return None


def end_beat(heartbeat: dict[str, Any] | None) -> dict[str, Any] | None:
    """The switch is disarmed (the service was started or resumed): a promise means nothing any more, and a stale one
    would make a live holder look dead to the next cycle while it waits for readiness. Removed, if the lock is still
    this cycle's; the lock's liveness is its lease again."""
    if not heartbeat or not os.path.exists(heartbeat["path"]):
        return None
    path = heartbeat["path"]
    try:
        with Guard(os.path.dirname(path)):
            if heartbeat.get("token") and lock_holder(path) != heartbeat["token"]:
                return {"path": path, "removed": False, "why": "the lock is another cycle's"}
            os.unlink(path)
    except FileNotFoundError:
        pass
    except (OSError, LockError) as exc:
        return {"path": path, "removed": False, "why": str(getattr(exc, "strerror", None) or exc)}
    return {"path": path, "removed": True}


def beat_until(path: str) -> int | None:
    """The heartbeat's `until`; None if there is none or it is not a whole number (unknown: not alive)."""
    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError):
        return None
    return int(text.strip()) if text is not None and re.fullmatch(r"\s*\d{1,12}\s*", text) else None


def lost_lock(heartbeat: dict[str, Any] | None) -> str:
    """Why the cycle named by the heartbeat's token no longer holds the lock its heartbeat lives in, or "" (it does,
    or there is no heartbeat or token to tell by). A lock that is gone, or whose holder cannot be read, is not held."""
    if not heartbeat or not heartbeat.get("token"):
        return ""
    lock = os.path.dirname(heartbeat["path"])
    if not os.path.isdir(lock):
        return "its lock %s is gone" % lock
    holder = lock_holder(heartbeat["path"])
    return "" if holder == heartbeat["token"] else "the lock %s is held by cycle %s" % (lock, holder)


def controller_gone(heartbeat: dict[str, Any] | None, now: float, seen: bool) -> str:
    """Why a process the controller left running on the host (the sweep) should end itself, or "" to go on: the lock is
    gone or another cycle's (lost_lock), or the controller broke its promise of a next contact (the heartbeat's `until`
    is past: the rule the dead-man switch applies), or a promise read before (`seen`) cannot be read any more. A
    promise never read yet is not a broken one: the first poll writes it."""
    lost = lost_lock(heartbeat)
    if lost or not heartbeat:
        return lost
    until = beat_until(heartbeat["path"])
    if until is None:
        return "its heartbeat %s cannot be read any more" % heartbeat["path"] if seen else ""
    if now >= until:
        return "its controller promised its next contact by %d and it is %d (a controller killed, paused or cut off)" % (until, now)
    return ""


def fence(module: Any) -> None:
    """The fencing token: a step that changes the host acts only while its cycle holds the lock. A controller that was
    silent past its heartbeat's promise (a paused VM or pod, a stopped job) may wake after the host's switch brought
    the service back and another cycle took the lock over: then it fails here, before it acts, and touches nothing of
    the cycle that owns the host now (its sweep, its switch, its router)."""
    if module.check_mode:
        return
    fenced(module, lost_lock(module.params.get("heartbeat")))


def fenced(module: Any, why: str) -> None:
    """Fail the module, fenced, where `why` says its cycle no longer holds the lock ("" : it does)."""
    if why:
        module.fail_json(msg="this cycle (%s) no longer owns the host: %s. Its controller was silent past its promise of a "
                         "next contact (paused or cut off) and another cycle took over: it changes nothing more here"
                         % (module.params["heartbeat"]["token"], why), fenced=True)


def beat_done(module: Any, beaten: dict[str, Any] | None) -> dict[str, Any] | None:
    """The step's work is done: its promise shrinks from the step's worst case to the silence after it (now + for_s),
    so a controller lost right after a long step (a stop, a release) costs the switch's grace, not what was left of
    that step's worst case. Only where this call's first beat was written (a fenced or unwritten one stays as it was);
    returns the heartbeat as it stands."""
    if module.check_mode or not beaten or not beaten.get("written"):
        return beaten
    again = beat(module.params.get("heartbeat"), time.time())
    return again if again and again.get("written") else beaten


def beat_for(module: Any, own_s: float, now: float) -> dict[str, Any] | None:
    """A module's heartbeat (its `heartbeat` parameter) before it does anything else; none in check mode. A cycle that
    no longer holds the lock fails (fence); a heartbeat that cannot be written is a warning: the switch reads the
    controller as dead and brings the service back."""
    if module.check_mode:
        return None
    beaten = beat(module.params.get("heartbeat"), now, own_s)
    # the holder read under the lock's guard, once: a take-over never lands between this check and the step
    fenced(module, beaten["why"] if beaten and beaten.get("lost") else "")
    if beaten and not beaten["written"]:
        module.warn("the cycle's heartbeat %s was not written (%s): the host's dead-man switch reads this controller as "
                    "dead and brings the service back" % (beaten["path"], beaten["why"]))
    return beaten
