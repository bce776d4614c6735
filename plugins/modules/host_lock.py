#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: an exclusive per-host lock (a directory made with one atomic mkdir; a dead holder's
lock taken over under a flock, so that exactly one of concurrent take-overs wins)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_lock
short_description: Take or release an exclusive lock on a host, with its owner recorded
description:
  - O(state=present) creates the lock directory with one atomic C(mkdir) and writes C(owner.json)
    (token, controller, user, PID, start time) into it, in a single round trip.
  - A lock held by someone else fails the task with who holds it and since when. A lock older than
    O(stale_after) is broken only when O(break_stale=true); a younger one never is.
  - O(state=absent) removes the lock only when its token is O(token) (another cycle's lock is left alone).
  - O(state=found) reads the lock as it is and changes nothing - its holder, its age and the holder's heartbeat's
    promise (RV(found)) - for a recovery that says what a dead cycle left before it acts.
  - "A lock, its C(owner.json) or its C(heartbeat) that is not a plain directory or file of the user the module runs as,
    writable by no one else, is never read or acted on - the task fails naming it. C(/run/lock) is writable by every
    local user, who could otherwise forge a dead cycle's record, and the next cycle would act on it. O(state=absent)
    leaves such a lock alone (this module never took it) and says so (C(untrusted))."
  - The holder records its progress in the lock (O(record), e.g. that it stopped the service or took
    the host out of the router) with a heartbeat and a lease (O(expires_in)). A lock whose lease ran
    out belongs to a dead cycle, whatever controller ran it (under AWX each job runs in a new
    container). It is taken over, and its record returned and carried over as the new holder's record, so that the
    new cycle finishes the dead one's work (start the service, put it back in the router) and what stays undone is
    still owed if the new cycle dies too. The record is the cycle's journal, and its bring-back decides from it
    (C(module_utils/bc_bringback.py)).
  - So does a lock whose controller broke its heartbeat's promise of a next contact (the file C(heartbeat) in the
    lock, written by every contact of the cycle from the arm of its dead-man switch to the start - see the
    C(heartbeat) option of M(inference_ops.benchmark_cycle.inference_unit)). A heartbeat that cannot be read proves nothing; the lease decides.
  - A take-over is atomic - under an exclusive C(flock) of the guard file C(.<name>.guard) beside the lock (hidden,
    empty and kept, so that a listing shows only locks) the holder is read again and replaced in place only if it is
    still the one judged dead (same token, no heartbeat since); the lock directory is never removed meanwhile. Of
    any number of concurrent take-overs exactly one wins and inherits the record. The holder's renewals, records and
    release go through the same guard.
version_added: "1.0.0"
options:
  path: {description: Lock directory., type: path, required: true}
  state:
    description:
      - Take (present) or release (absent) the lock, or read it as it is (found).
      - V(recorded) merges O(record) into the lock this cycle holds (its progress, before the step it records) and
        renews its heartbeat and lease; it never takes a lock. A cycle that no longer holds it (taken over, or gone) fails
        with RV(fenced), and writes nothing.
    type: str
    choices: [present, recorded, absent, found]
    default: present
  token:
    description: This cycle's identity; only the holder of the token releases the lock. Required unless O(state=found).
    type: str
  owner: {description: "Extra owner facts to record (controller, user, pid, playbook).", type: dict, default: {}}
  stale_after: {description: Seconds after which a held lock may be broken (with O(break_stale))., type: int, default: 7200}
  record: {description: Facts of the holder's progress merged into the lock (only by the holder)., type: dict, default: {}}
  expires_in:
    description:
      - Seconds the holder's lease lasts from now; renewed on every call by the holder. 0 keeps the lease as it is.
    type: int
    default: 0
  take_expired: {description: Take over a lock whose lease has run out (its holder is dead)., type: bool, default: true}
  break_stale: {description: Break a lock older than O(stale_after)., type: bool, default: false}
  break_token:
    description:
      - Break the lock if, and only if, its holder's token is this one (the caller proved that holder dead,
        e.g. a playbook on the same controller whose process is gone).
    type: str
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode: {support: full, description: "Reports whether the lock could be taken; takes nothing (O(state=found) reads it)."}
  diff_mode: {support: none, description: Nothing to show as a diff.}
seealso:
  - module: inference_ops.benchmark_cycle.inference_unit
    description: >-
      Stops and starts the service under this lock; the holder records that it stopped it (O(record)), and its
      dead-man switch (M(inference_ops.benchmark_cycle.inference_switch)) brings the service back when the holder dies.
  - module: inference_ops.benchmark_cycle.inference_memory
    description: >-
      Releases the server's memory in place under this lock; the holder records the release, so a cycle that
      takes over a dead holder's lock knows to resume or restart it.
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: >-
      Its C(tag) is C(<unit>/<lock token>); holding this lock is what proves a sweep tagged with another token an
      orphan to kill.
"""

EXAMPLES = r"""
- name: Lock the host
  inference_ops.benchmark_cycle.host_lock:
    path: /run/lock/benchmark-cycle-sglang-k26-ddtree.lock
    token: "{{ cycle_token }}"
    owner: {controller: awx-1, user: alice, pid: 4242}

- name: Read the lock as it is (a recovery, before it acts)
  inference_ops.benchmark_cycle.host_lock:
    path: /run/lock/benchmark-cycle-sglang-k26-ddtree.lock
    state: found
  register: lock
"""

RETURN = r"""
fenced:
  description: This cycle no longer holds the lock (O(state=recorded) by a cycle that lost it); nothing was written.
  returned: when O(state=recorded) fails for that reason
  type: bool
  sample: true
heartbeat:
  description: >-
    The file in the lock that holds the controller's promise of its next contact (whole seconds since the epoch),
    written by the holder's contacts and read by the host's dead-man switch and by a take-over. This module names it.
  returned: state=present or state=found
  type: str
  sample: /run/lock/benchmark-cycle-sglang-k26-ddtree.lock/heartbeat
found:
  description:
    - The lock as it is - C(held), C(holder) (its C(owner.json) with its record; a token saying so when it cannot be
      read), C(age_s) (seconds since the lock last changed; null without a lock) and C(promised_in_s) (seconds until
      the holder's controller's promise of a next contact runs out, negative once broken; null without a readable one).
  returned: state=found
  type: dict
  sample:
    held: true
    holder: {token: 20261201T083500Z-731942018, user: alice, controller: awx-1, record: {released: true, lb_removed: true}}
    age_s: 58
    promised_in_s: -36
holder:
  description:
    - Owner facts of the lock - O(owner) merged with token, started, heartbeat, expires (0 without a lease) and record.
    - After a take or a renewal, this cycle's; when held by another (the task fails), the other cycle's; with
      O(state=absent), the lock found (empty when there is none). In check mode, the lock found or the one that would be written.
  returned: always
  type: dict
  sample:
    controller: awx-1
    user: alice
    pid: "4242"
    playbook: Cycle - one host at a time, the service always comes back
    token: 20261201T083500Z-731942018
    started: "2026-12-01T08:35:00+00:00"
    heartbeat: 1796113300.52
    expires: 1796120500.52
    record: {stopped: true, lb_removed: true}
released:
  description: The lock was this cycle's (its token is O(token)) and was removed (in check mode, would be).
  returned: state=absent
  type: bool
  sample: true
broken:
  description: Another cycle's lock was broken (an expired lease, O(break_token) or O(break_stale)) to take this one.
  returned: state=present, when the lock was taken or renewed (not in check mode)
  type: bool
  sample: false
broken_holder:
  description: The owner facts and record of the lock that was broken (what the dead cycle left undone).
  returned: when broken
  type: dict
  sample:
    controller: awx-1
    user: alice
    pid: "3977"
    playbook: Cycle - one host at a time, the service always comes back
    token: 20261201T061500Z-118204377
    started: "2026-12-01T06:15:00+00:00"
    heartbeat: 1796106420.08
    expires: 1796112900.08
    record: {stopped: true, lb_removed: true}
age_s:
  description: Seconds since the lock directory was last changed (a holder's renewal touches it).
  returned: when the lock was held by another cycle (broken, or the task fails)
  type: int
  sample: 6880
expired:
  description: >-
    The lock was taken over because its holder was dead - its lease, or its heartbeat's promise, had run out
    (always true when returned).
  returned: when an expired lock was taken over
  type: bool
  sample: true
heartbeat_ran_out:
  description: The holder's controller broke its heartbeat's promise of a next contact (else its lease had run out).
  returned: when an expired lock was taken over
  type: bool
  sample: true
"""

import contextlib
import json
import os
import shutil
import stat
import time
from datetime import datetime, timezone
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import Guard, LockError, beat_until, write_atomic


def read_owner(path: str) -> dict[str, Any]:
    try:
        with open(os.path.join(path, "owner.json"), encoding="utf-8") as fh:
            owner = json.load(fh)
    except (OSError, ValueError):
        owner = None
    return owner if isinstance(owner, dict) else {"token": "unknown (no readable owner.json)"}


def write_owner(path: str, owner: dict[str, Any]) -> None:
    write_atomic(os.path.join(path, "owner.json"), json.dumps(owner, indent=1, sort_keys=True), 0o600)


def take(path: str, owner: dict[str, Any]) -> bool:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        return False
    write_owner(path, owner)
    return True


def expired(holder: dict[str, Any], now: float, promised: int | None = None) -> bool:
    """The holder is dead: its heartbeat's promise of a next contact ran out (`promised`, the heartbeat file its
    contacts write), or its lease did (it renews both while it lives). A heartbeat that cannot be read proves
    nothing: the lease decides then (a live holder's lock is never taken on an unknown)."""
    if promised is not None and now > promised:
        return True
    expires = holder.get("expires")
    return isinstance(expires, (int, float)) and expires > 0 and now > expires


def heartbeat_file(path: str) -> str:
    """The controller's heartbeat in the lock (bc_host.beat writes it; the host's dead-man switch reads it)."""
    return os.path.join(path, "heartbeat")


def found(path: str, now: float) -> dict[str, Any]:
    """The lock as it is, read and changed nothing (RETURN found)."""
    try:
        mtime: float | None = os.stat(path).st_mtime if os.path.isdir(path) else None
    except FileNotFoundError:
        mtime = None
    promised = beat_until(heartbeat_file(path)) if mtime is not None else None
    return {"held": mtime is not None, "holder": read_owner(path) if mtime is not None else {},
            "age_s": int(now - mtime) if mtime is not None else None,
            "promised_in_s": promised - int(now) if promised is not None else None}


def untrusted(path: str, euid: int | None = None) -> str:
    """Why the lock at `path` cannot be believed, or "" (no lock, or one this module's user made). The lock lives
    where every local user may write (/run/lock is 1777): a lock, a record or a heartbeat that someone else made could
    say that a dead cycle stopped the live server (the next cycle would restart it and call the router's hooks), or
    keep the lock for ever. Each must be a plain directory or file of the user the cycle runs as, writable by no one
    else (the lock is made 0700, its files 0600)."""
    euid = os.geteuid() if euid is None else euid
    for name, is_dir in ((path, True), (os.path.join(path, "owner.json"), False), (heartbeat_file(path), False)):
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            if is_dir:
                return ""
            continue
        if not (stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)):
            return "%s is not a plain %s (a link?)" % (name, "directory" if is_dir else "file")
        if st.st_uid != euid:
            return "%s belongs to uid %d, not to uid %d that the cycle runs as" % (name, st.st_uid, euid)
        if st.st_mode & 0o022:
            return "%s is writable by its group or by others (mode %04o)" % (name, stat.S_IMODE(st.st_mode))
    return ""


SPEC: dict[str, Any] = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "choices": ["present", "recorded", "absent", "found"], "default": "present"},
    "token": {"type": "str", "no_log": False},  # the cycle's name for its lock, printed in every refusal
    "owner": {"type": "dict", "default": {}},
    "stale_after": {"type": "int", "default": 7200},
    "break_stale": {"type": "bool", "default": False},
    "break_token": {"type": "str", "no_log": False},  # names a lock to take over; grants nothing by itself
    "record": {"type": "dict", "default": {}},
    "expires_in": {"type": "int", "default": 0},
    "take_expired": {"type": "bool", "default": True},
}


def problem(p: dict[str, Any]) -> str:
    """The first parameter the lock cannot take, named with the fix; "" when all are sound."""
    for key in ("stale_after", "expires_in"):
        if p[key] < 0:
            return "%s must be >= 0 seconds, got %d (a negative age would make every lock stale)" % (key, p[key])
    if p["state"] != "found" and not (p["token"] or "").strip():
        return "token must not be empty (state=%s): give this cycle's token" % p["state"]
    if p["state"] != "found" and not os.path.isdir(os.path.dirname(p["path"]) or "/"):
        return "lock directory parent %s does not exist" % os.path.dirname(p["path"])
    return ""


def claim(path: str, owner: dict[str, Any], judged: dict[str, Any], promised: int | None = None,
          new_promise: int | None = None) -> dict[str, Any] | None:
    """Take the lock from the holder `judged` dead, atomically: under an exclusive flock of a file beside
    the lock, the holder is read again and replaced in place only if it is still that one (same token, no
    heartbeat since); the directory is never removed, so a newcomer's mkdir keeps failing meanwhile.
    Exactly one of any number of concurrent take-overs sees the dead holder; the others see the winner,
    alive. Returns the holder taken over, or None. The kernel drops the flock if this process dies."""
    with Guard(path):
        if not os.path.isdir(path):
            return None  # released meanwhile: a plain take decides
        holder = read_owner(path)
        if holder.get("token") != judged.get("token") or holder.get("heartbeat") != judged.get("heartbeat"):
            return None  # taken over by another cycle, or its holder renewed it: alive
        if beat_until(heartbeat_file(path)) != promised:
            return None  # its controller made contact since: alive
        # the dead holder's switch may still be armed: it now waits for the new holder (its lease), whose own arm
        # replaces it - it must not fire into the new cycle's drain, nor stay silent if the new holder dies too
        if new_promise is not None:
            write_atomic(heartbeat_file(path), "%d\n" % new_promise, 0o600)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(heartbeat_file(path))
        # the dead holder's record is the new holder's: what it left undone stays owed until this cycle does it, even
        # if this cycle dies too (owner's own record on top)
        owner["record"] = dict(holder.get("record") or {}, **(owner.get("record") or {}))
        write_owner(path, owner)
        return holder


def take_over(module: AnsibleModule, owner: dict[str, Any], holder: dict[str, Any], age: int, what: str,
              promised: int | None = None, **extra: Any) -> None:
    """Take a dead holder's lock (claim); another cycle that takes it first wins, and this fails."""
    path = module.params["path"]
    lease = module.params["expires_in"] or module.params["stale_after"]
    taken = claim(path, owner, holder, promised, int(time.time()) + lease)
    if taken is not None:
        module.exit_json(changed=True, holder=owner, broken=True, broken_holder=taken, age_s=age,
                         heartbeat=heartbeat_file(path), **extra)
    module.fail_json(msg="%s %s but another cycle took it first (or its holder renewed it): %s"
                     % (what, path, json.dumps({k: v for k, v in read_owner(path).items() if k in ("token", "controller", "pid")})
                        if os.path.isdir(path) else "it is free now; run again"))


def refusal(p: dict[str, Any], holder: dict[str, Any], age: int, now: float) -> str:
    """Who holds the lock, for how long yet, and what the operator may do."""
    lease = holder.get("expires")
    who = "cycle %s started %s by %s@%s (pid %s), %d s ago%s" % (
        holder.get("token"), holder.get("started", "?"), holder.get("user", "?"), holder.get("controller", "?"),
        holder.get("pid", "?"), age,
        "; its lease runs %d s more (a dead holder's lock is taken over once it ends)" % (lease - now)
        if isinstance(lease, (int, float)) and lease > now else "")
    if p["break_token"] and p["break_token"] != holder.get("token"):
        hint = ("The token given to break (%s) is not its holder's: nothing was broken. Give the holder's token if that "
                "cycle is gone." % p["break_token"])
    elif age >= p["stale_after"]:
        hint = ("It is older than stale_after=%d s and may be stale: if that cycle is gone, re-run with "
                "-e bc_lock_break=true to break it, or -e bc_lock_break_token=%s." % (p["stale_after"], holder.get("token")))
    else:
        hint = ("Wait for it to finish (a holder whose controller stops its heartbeat is taken over at once). If that cycle "
                "is gone (its AWX job cancelled, its controller lost), re-run with -e bc_lock_break_token=%s (the AWX "
                "survey's \"Break the lock of a cycle that is gone\"): that lock, and no other, is taken over." % holder.get("token"))
    return "another benchmark cycle holds %s: %s. %s" % (p["path"], who, hint)


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    path = p["path"]
    bad = problem(p)
    if bad:
        module.fail_json(msg=bad)
    forged = untrusted(path)
    if forged and p["state"] == "absent":  # not this cycle's (it never takes one): nothing of it is read or removed
        module.exit_json(changed=False, holder={}, released=False, untrusted=forged)
    if forged:
        module.fail_json(msg="the lock %s is not to be trusted: %s. A lock another local user could have made is never read "
                         "or acted on: nothing was touched. Find out who made it, then remove it (rm -r -- %s)"
                         % (path, forged, path), untrusted=forged)
    if p["state"] == "found":
        module.exit_json(changed=False, found=found(path, time.time()), heartbeat=heartbeat_file(path))
    try:
        if p["state"] == "absent":
            module.exit_json(**release(path, p["token"], module.check_mode))
        if p["state"] == "recorded":
            if module.check_mode:
                module.exit_json(changed=False, holder=read_owner(path) if os.path.isdir(path) else {},
                                 heartbeat=heartbeat_file(path))
            record(module, time.time())
        present(module)
    except LockError as exc:
        module.fail_json(msg=str(exc))


def release(path: str, token: str, check_mode: bool) -> dict[str, Any]:
    """Remove the lock if this cycle holds it (under the guard: never one taken over meanwhile)."""
    if check_mode or not os.path.isdir(path):
        holder = read_owner(path) if os.path.isdir(path) else {}
        mine = holder.get("token") == token
        return {"changed": mine, "holder": holder, "released": mine}
    with Guard(path):
        holder = read_owner(path) if os.path.isdir(path) else {}
        mine = holder.get("token") == token
        if mine:
            shutil.rmtree(path)
    return {"changed": mine, "holder": holder, "released": mine}


def renew(path: str, holder: dict[str, Any], p: dict[str, Any], now: float) -> None:
    """The holder's lock renewed (under its guard, by the caller): heartbeat, lease, and its record merged in."""
    holder.update(heartbeat=now, record=dict(holder.get("record") or {}, **p["record"]))
    if p["expires_in"]:
        holder["expires"] = now + p["expires_in"]
    write_owner(path, holder)


def record(module: AnsibleModule, now: float) -> None:
    """A record is its holder's progress, written before the step it records: only the holder writes it, and a record
    never takes a lock. A cycle that lost its lock (taken over while its controller was silent past its promise, or
    released) fails here, fenced, before the step: the cycle that holds the lock now owns the host."""
    p = module.params
    path = p["path"]
    with Guard(path):
        holder = read_owner(path) if os.path.isdir(path) else {}
        if holder.get("token") == p["token"]:
            renew(path, holder, p, now)
            module.exit_json(changed=True, holder=holder, broken=False, heartbeat=heartbeat_file(path))
    module.fail_json(msg="this cycle (%s) no longer holds the lock %s (%s): its record is not written and it changes nothing "
                     "more here; the cycle that holds the lock owns the host" % (
                         p["token"], path, "held by cycle %s" % holder.get("token") if holder else "it is gone"),
                     fenced=True, holder=holder)


def present(module: AnsibleModule) -> None:
    p = module.params
    path = p["path"]
    now = time.time()
    owner = dict(p["owner"], token=p["token"], started=datetime.now(timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017 - hosts may run Python < 3.11
                 heartbeat=now, expires=now + p["expires_in"] if p["expires_in"] else 0, record=p["record"])
    if module.check_mode:
        module.exit_json(changed=not os.path.isdir(path), holder=read_owner(path) if os.path.isdir(path) else owner,
                         heartbeat=heartbeat_file(path))
    if take(path, owner):
        module.exit_json(changed=True, holder=owner, broken=False, heartbeat=heartbeat_file(path))
    with Guard(path):  # the holder again: renew the heartbeat and lease, merge its record - if it still holds it
        forged = untrusted(path)  # made by someone else between the first look and this take
        if forged:
            module.fail_json(msg="the lock %s is not to be trusted: %s. Nothing was touched." % (path, forged), untrusted=forged)
        holder = read_owner(path)
        mine = holder.get("token") == p["token"]
        if mine:
            renew(path, holder, p, now)
    if mine:
        module.exit_json(changed=bool(p["record"]), holder=holder, broken=False, heartbeat=heartbeat_file(path))
    if take(path, owner):  # released meanwhile
        module.exit_json(changed=True, holder=owner, broken=False, heartbeat=heartbeat_file(path))
    try:
        age = int(now - os.stat(path).st_mtime)
    except FileNotFoundError:
        module.fail_json(msg="the lock %s changed hands while it was read: run again" % path)
    promised = beat_until(heartbeat_file(path))
    if p["take_expired"] and expired(holder, now, promised):
        take_over(module, owner, holder, age, "took over the expired lock", promised, expired=True,
                  heartbeat_ran_out=promised is not None and now > promised)
    if p["break_token"] and holder.get("token") == p["break_token"]:
        take_over(module, owner, holder, age, "broke the dead holder's lock", promised)
    if age >= p["stale_after"] and p["break_stale"]:
        take_over(module, owner, holder, age, "broke the stale lock", promised)
    module.fail_json(msg=refusal(p, holder, age, now), holder=holder, age_s=age)


if __name__ == "__main__":
    main()
