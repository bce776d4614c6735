# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The dead-man switch of an inference server's unit: a transient systemd timer and service, bc-deadman-<unit>, that
runs the switch's script (roles/service_drain/files/deadman.sh, which says what it does) on the host.

arm      the script written where it is missing, the timer (re-)armed for the start of the unit that runs now: if the
         cycle does not disarm it in time (the controller died, the host was unreachable), it ends this cycle's
         sweep and starts (or restarts) the unit
disarm   the timer stopped; a switch firing right now is let finish, never cut halfway

The script is written once per content (deadman-<sha256>.sh, root's, 0755) and never changed in place. The host side
of `library/inference_switch.py`; the unit's start disarms it too (library/inference_unit.py).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import (
    ACTIVE_STATES,
    END_WAIT_S,
    Unit,
    UnitError,
)

# where the switch's script is written on the host (inference_switch state=armed), one file per content: an armed
# switch reads its file at every run, so no later arm (another unit's cycle, another release of the collection) ever
# changes it under a switch that is armed
SWITCH_DIR = "/usr/local/libexec/benchmark-cycle"


def script_path(text: str) -> str:
    """The file on the host that holds exactly `text`: deadman-<the first 12 hex digits of its SHA-256>.sh."""
    return os.path.join(SWITCH_DIR, "deadman-%s.sh" % hashlib.sha256(text.encode("utf-8")).hexdigest()[:12])


def root_only(st: os.stat_result) -> bool:
    """Owned by root and writable by nobody else: a file the switch may run as root, or the folder it lies in."""
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class Switch:
    """The dead-man switch of `unit` (its commands run through the unit's: same runner, timeout and check mode)."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        self.name = unit.switch

    def command(self, script: str, sweep_tag: str | None, action: str = "start", invocation: str = "",
                heartbeat: str | None = None, outer_at: int = 0) -> list[str]:
        """What the switch runs when it fires: its `script` (the file on the host), every value one argument of its
        own (no shell reads them; systemd would expand a `$`, so a value with one is refused). `start` (the cycle
        stops the unit) or `restart` (the cycle released the server's memory in place: only the start it was armed
        for, its `invocation`, is restarted). With a `heartbeat` (the controller's promise of its next contact,
        bc_host.beat) it checks every few seconds and acts once the promise is broken or `outer_at` (epoch) passed;
        without one it fires once."""
        unit = self.unit.name
        if action not in ("start", "restart"):
            raise UnitError("the dead-man switch of %s can start or restart it, not %r" % (unit, action))
        if action == "restart" and not re.match(r"^[0-9a-f]{32}\Z", invocation or ""):
            raise UnitError("the dead-man switch of %s restarts only the start of it that it was armed for: its "
                            "InvocationID is %r, not one (the unit is not running?)" % (unit, invocation))
        argv = ["/bin/sh", script, "--unit", unit + ".service", "--action", action, "--end-wait", str(END_WAIT_S)]
        if action == "restart":
            argv += ["--invocation", invocation]
        if sweep_tag:
            argv += ["--sweep", sweep_tag]
        if heartbeat:
            argv += ["--heartbeat", heartbeat, "--outer-at", str(int(outer_at)), "--timer", self.name + ".timer"]
        odd = [word for word in argv if "$" in word or not word]
        if odd:
            raise UnitError("the dead-man switch of %s cannot be given %r: systemd would expand a $ in it, and an empty "
                            "argument is none" % (unit, odd[0]))
        return argv

    def text(self, script: str) -> str:
        """The script as it is written to the host; one that is empty or not a /bin/sh script is refused (a switch
        that cannot run would leave the service down)."""
        if not script.startswith("#!/bin/sh\n"):
            raise UnitError("the dead-man switch of %s needs its script (roles/service_drain/files/deadman.sh), got %s: "
                            "the cycle would not be safe without its controller, so it stops here"
                            % (self.unit.name, "nothing" if not script.strip() else "no /bin/sh script"))
        return script if script.endswith("\n") else script + "\n"

    def install(self, script: str) -> tuple[str, bool]:
        """The script on the host (script_path: one file per content, root's, 0755), written where it is missing or
        not root's alone (never changed in place: a switch firing or armed now keeps the file it was armed with).
        Returns the file and whether it was written; a folder others may write is refused (they could swap the file
        the switch runs as root)."""
        text = self.text(script)
        path = script_path(text)
        try:
            os.makedirs(SWITCH_DIR, mode=0o755, exist_ok=True)
            folder = os.lstat(SWITCH_DIR)
            if not root_only(folder) and os.geteuid() == 0:
                raise UnitError("the dead-man switch's folder %s is not root's alone (owner uid %d, mode %o): its script "
                                "runs as root. Make it root's, 0755, and run the cycle again"
                                % (SWITCH_DIR, folder.st_uid, stat.S_IMODE(folder.st_mode)))
            try:
                st = os.lstat(path)
                with open(path, encoding="utf-8") as fh:
                    if stat.S_ISREG(st.st_mode) and (root_only(st) or os.geteuid() != 0) and fh.read() == text:
                        return path, False
            except (OSError, UnicodeDecodeError):
                pass
            self.unit.write(path, text, 0o755)
        except OSError as err:
            raise UnitError("could not write the dead-man switch's script %s for %s (%s): the cycle would not be safe "
                            "without its controller, so it stops here" % (path, self.unit.name, err)) from None
        return path, True

    def arm(self, after_s: int, sweep_tag: str | None, action: str = "start", heartbeat: str | None = None,
            beat_for_s: int = 0, now: float | None = None, script: str = "") -> dict[str, Any]:
        """(Re-)arm the switch to fire `after_s` seconds from now at the latest, for the start of the unit that runs
        now (its InvocationID, read here), its `script` written first (install). With a `heartbeat` file (written just before,
        promising the next contact within `beat_for_s`), the timer fires every check_s (a quarter of that, 2-15 s)
        and the switch acts once the promise is broken: a dead controller costs the grace, not the worst case."""
        unit = self.unit
        if after_s < 1:
            raise UnitError("the dead-man switch of %s needs a deadline of at least 1 s, got %s" % (unit.name, after_s))
        check_s = max(2, min(15, beat_for_s // 4)) if heartbeat else 0
        self.text(script)
        if unit.check_mode:
            return {"changed": True, "switch": self.name, "fires_in_s": after_s, "check_s": check_s}
        path, written = self.install(script)
        invocation = unit.show("InvocationID").get("InvocationID", "") if action == "restart" else ""
        outer_at = math.ceil(time.time() if now is None else now) + after_s
        command = self.command(path, sweep_tag, action, invocation, heartbeat, outer_at)
        self.disarm()
        timing = (["--on-active=%ds" % check_s, "--on-unit-active=%ds" % check_s] if heartbeat else ["--on-active=%ds" % after_s])
        unit.run(["systemd-run", "--unit=" + self.name, *timing, "--timer-property=AccuracySec=1s",
                  "--description=benchmark-cycle dead-man switch: %ss %s.service" % (action, unit.name), "--",
                  *command], timeout=unit.timeout)
        _rc, out = unit.systemctl("is-active", self.name + ".timer", ok=(0, 3))
        if out.strip() != "active":
            raise UnitError("could not arm the dead-man switch %s.timer for %s (state %s): the cycle would not be safe "
                            "without its controller, so it stops here" % (self.name, unit.name, out.strip()))
        return {"changed": True, "switch": self.name, "fires_in_s": after_s, "fire_action": action,
                "armed_for_invocation": invocation, "check_s": check_s, "script": path, "script_written": written}

    def disarm(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
               wait_s: float = END_WAIT_S + 30) -> dict[str, Any]:
        """Stop the switch's timer. A switch that is firing right now is let finish (it takes seconds), never
        killed halfway: cut between its kill and its start, it would leave the unit down."""
        unit = self.unit
        if unit.check_mode:
            return {"changed": False, "switch": self.name}
        _rc, out = unit.systemctl("is-active", self.name + ".timer", ok=(0, 3, 4))
        was = out.strip() == "active"
        unit.systemctl("stop", self.name + ".timer", ok=(0, 1, 5))
        deadline = clock() + wait_s
        while unit.systemctl("is-active", self.name + ".service", ok=(0, 3, 4))[1].strip() in ACTIVE_STATES:
            if clock() >= deadline:
                raise UnitError("the dead-man switch %s.service of %s is still firing after %d s: see journalctl -u %s.service"
                                % (self.name, unit.name, wait_s, self.name))
            sleep(0.2)
        unit.systemctl("reset-failed", self.name + ".timer", self.name + ".service", ok=(0, 1, 5))
        return {"changed": was, "switch": self.name, "was_armed": was}
