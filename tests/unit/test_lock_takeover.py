"""One owner at a time (#26): concurrent take-overs of one dead holder's lock, as real processes released
together, with a pause injected inside the take-over (the window a loaded host opens). Exactly one wins and
inherits the dead cycle's record; the others see the winner, alive. A holder that renewed its heartbeat
after it was judged dead keeps its lock."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import host_lock
import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import guard_file

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import json, os, sys, time
sys.path.insert(0, %(mu)r)
sys.path.insert(0, %(lib)r)
import host_lock
pause = float(sys.argv[3])
if pause:  # the injected pause: between reading the holder and writing the new owner
    real = host_lock.read_owner
    def slow(path):
        got = real(path)
        time.sleep(pause)
        return got
    host_lock.read_owner = slow
judged = json.loads(sys.argv[2])
while not os.path.exists(sys.argv[1] + ".go"):
    time.sleep(0.001)
taken = host_lock.claim(sys.argv[1], {"token": "contender-%%d" %% os.getpid(), "heartbeat": time.time()}, judged)
print(json.dumps({"pid": os.getpid(), "won": taken is not None, "inherited": (taken or {}).get("record")}))
"""


def dead_lock(path: Path) -> dict:
    path.mkdir()
    holder = {"token": "dead-cycle", "heartbeat": 1000.0, "expires": 2000.0, "record": {"released": True, "lb_removed": True}}
    (path / "owner.json").write_text(json.dumps(holder))
    return holder


def race(path: Path, judged: dict, contenders: int, pause: float) -> list[dict]:
    script = CHILD % {"mu": str(ROOT / "collections"), "lib": str(ROOT / "library")}
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), json.dumps(judged), str(pause)],
                              stdout=subprocess.PIPE, text=True) for _ in range(contenders)]
    time.sleep(1.5)  # every contender imported and waiting
    Path(str(path) + ".go").touch()
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return [json.loads(o) for o in outs]


def test_exactly_one_of_eight_concurrent_take_overs_wins_and_inherits_the_record(tmp_path):
    lock = tmp_path / "bc.lock"
    judged = dead_lock(lock)
    results = race(lock, judged, 8, pause=0.3)
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1, results
    assert winners[0]["inherited"] == {"released": True, "lb_removed": True}
    assert json.loads((lock / "owner.json").read_text())["token"] == "contender-%d" % winners[0]["pid"]


def test_without_a_pause_too_exactly_one_wins(tmp_path):
    lock = tmp_path / "bc.lock"
    results = race(lock, dead_lock(lock), 8, pause=0)
    assert sum(r["won"] for r in results) == 1, results


def test_a_holder_that_renewed_its_heartbeat_since_it_was_judged_keeps_the_lock(tmp_path):
    lock = tmp_path / "bc.lock"
    judged = dead_lock(lock)
    alive = dict(judged, heartbeat=judged["heartbeat"] + 30)
    (lock / "owner.json").write_text(json.dumps(alive))  # it renewed between the judgment and the take-over
    assert host_lock.claim(str(lock), {"token": "me"}, judged) is None
    assert json.loads((lock / "owner.json").read_text())["token"] == "dead-cycle"


def test_a_lock_released_meanwhile_is_not_claimed_but_taken_plainly(tmp_path):
    lock = tmp_path / "bc.lock"
    judged = dead_lock(lock)
    (lock / "owner.json").unlink()
    lock.rmdir()
    assert host_lock.claim(str(lock), {"token": "me"}, judged) is None and not lock.exists()


def test_a_holder_judged_dead_then_taken_over_cannot_write_over_the_new_owner(tmp_path):
    """The holder was alive after all (past its lease, or broken as stale) and records its progress after
    another cycle took its lock over: its write goes through the same guard, finds another token and is
    refused; the new owner's lock is untouched. Its release removes nothing either."""
    from test_modules_adhoc import adhoc

    lock = tmp_path / "bc.lock"
    judged = dead_lock(lock)
    assert host_lock.claim(str(lock), {"token": "new-owner", "heartbeat": 5.0, "record": {}}, judged) == judged
    late = adhoc("host_lock", {"path": str(lock), "token": "dead-cycle", "state": "recorded", "record": {"stopped": True}})
    assert late["_status"] == "FAILED!" and late["fenced"] is True, late  # the cycle's rescue gives the host up
    assert "this cycle (dead-cycle) no longer holds the lock" in late["msg"] and "held by cycle new-owner" in late["msg"], late
    assert json.loads((lock / "owner.json").read_text())["token"] == "new-owner"
    gone = adhoc("host_lock", {"path": str(lock), "token": "dead-cycle", "state": "absent"})
    assert not gone["released"] and lock.is_dir()


def test_a_record_never_takes_a_lock_that_is_gone(tmp_path):
    """A cycle whose lock was released meanwhile (by the cycle that took it over and finished) records a step: it is
    fenced, and no lock of its own is made with that record (the next cycle would inherit a step nobody took)."""
    from test_modules_adhoc import adhoc

    lock = tmp_path / "bc.lock"
    late = adhoc("host_lock", {"path": str(lock), "token": "paused-cycle", "state": "recorded", "record": {"stopped": True}})
    assert late["_status"] == "FAILED!" and late["fenced"] is True and "it is gone" in late["msg"], late
    assert not lock.exists()


def test_a_guard_held_for_ever_fails_at_its_bound_naming_the_file(tmp_path):
    import fcntl
    import os

    lock = tmp_path / "bc.lock"
    judged = dead_lock(lock)
    fd = os.open(guard_file(str(lock)), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another take-over that never ends
    try:
        guard = host_lock.Guard(str(lock), wait_s=1)
        started = time.monotonic()
        try:
            with guard:
                raise AssertionError("the guard was taken while held")
        except host_lock.LockError as exc:
            assert "stayed held for 1 s" in str(exc) and ".bc.lock.guard" in str(exc)
        assert time.monotonic() - started < 30
        assert json.loads((lock / "owner.json").read_text()) == judged  # nothing written
    finally:
        os.close(fd)


def live_lease_lock(path: Path, promised: str | None) -> dict:
    """A holder whose lease runs for an hour yet, with its controller's heartbeat as given (None: none)."""
    path.mkdir()
    holder = {"token": "quiet-cycle", "heartbeat": time.time(), "expires": time.time() + 3600, "record": {"stopped": True}}
    (path / "owner.json").write_text(json.dumps(holder))
    if promised is not None:
        (path / "heartbeat").write_text(promised)
    return holder


def test_a_holder_whose_controller_broke_its_promise_is_dead_though_its_lease_runs(tmp_path):
    """A killed or cancelled controller: its lock is taken over after the grace, not after the lease. The dead
    holder's switch, still armed, now waits for the new holder's lease (its own arm replaces it)."""
    from test_modules_adhoc import adhoc

    lock = tmp_path / "bc.lock"
    live_lease_lock(lock, "%d\n" % (time.time() - 5))
    got = adhoc("host_lock", {"path": str(lock), "token": "next-cycle", "expires_in": 600})
    assert got.get("broken") and got["expired"] and got["heartbeat_ran_out"], got
    assert got["broken_holder"]["record"] == {"stopped": True}
    assert 590 <= host_lock.beat_until(str(lock / "heartbeat")) - time.time() <= 601
    assert json.loads((lock / "owner.json").read_text())["token"] == "next-cycle"


def test_a_taken_over_record_stays_owed_through_a_second_dead_cycle(tmp_path):
    """The lock's record is the cycle's journal: a take-over carries the dead holder's record over as its own, so
    when the cycle that took over dies too before it paid the debt (started the service, put the host back in the
    router), the third cycle still inherits it - and what the second one recorded on top."""
    from test_modules_adhoc import adhoc

    lock = tmp_path / "bc.lock"
    live_lease_lock(lock, "%d\n" % (time.time() - 5))  # the first cycle: it stopped the service, then its controller died
    second = adhoc("host_lock", {"path": str(lock), "token": "second", "expires_in": 600})
    assert second["broken"] and second["holder"]["record"] == {"stopped": True}, second
    on_disk = json.loads((lock / "owner.json").read_text())
    assert on_disk["token"] == "second" and on_disk["record"] == {"stopped": True}
    wrote = adhoc("host_lock", {"path": str(lock), "token": "second", "state": "recorded", "record": {"lb_removed": True}})
    assert wrote["holder"]["record"] == {"stopped": True, "lb_removed": True}, wrote  # the read-back the cycle keeps
    (lock / "heartbeat").write_text("%d\n" % (time.time() - 5))  # the second controller dies too
    third = adhoc("host_lock", {"path": str(lock), "token": "third", "expires_in": 600})
    assert third["broken"] and third["broken_holder"]["token"] == "second", third
    assert third["broken_holder"]["record"] == third["holder"]["record"] == {"stopped": True, "lb_removed": True}


def test_a_kept_promise_or_an_unreadable_one_never_hands_a_live_lease_over(tmp_path):
    from test_modules_adhoc import adhoc

    for i, promised in enumerate(["%d\n" % (time.time() + 60), "garbage\n", None]):
        lock = tmp_path / ("bc%d.lock" % i)
        live_lease_lock(lock, promised)
        got = adhoc("host_lock", {"path": str(lock), "token": "next-cycle"})
        assert got["_status"] == "FAILED!" and "another benchmark cycle holds" in got["msg"], (promised, got)
        assert json.loads((lock / "owner.json").read_text())["token"] == "quiet-cycle"


def test_a_controller_that_beat_since_it_was_judged_keeps_the_lock(tmp_path):
    lock = tmp_path / "bc.lock"
    judged = live_lease_lock(lock, "%d\n" % (time.time() - 5))
    promised = host_lock.beat_until(str(lock / "heartbeat"))
    (lock / "heartbeat").write_text("%d\n" % (time.time() + 60))  # its sweep poll came in between
    assert host_lock.claim(str(lock), {"token": "me"}, judged, promised) is None
    assert json.loads((lock / "owner.json").read_text())["token"] == "quiet-cycle"


def test_found_reads_the_lock_as_it_is_and_changes_nothing(tmp_path):
    """state=found through the real module (AnsiballZ): the holder, its age, the heartbeat's promise, and the
    heartbeat file's name, which host_lock alone gives (a take names it too); nothing is written."""
    from test_modules_adhoc import adhoc

    path = tmp_path / "benchmark-cycle-u.lock"
    none = adhoc("host_lock", {"path": str(path), "state": "found"})
    assert none["_status"] == "SUCCESS" and none["changed"] is False
    assert none["found"] == {"held": False, "holder": {}, "age_s": None, "promised_in_s": None}
    assert not path.exists()
    taken = adhoc("host_lock", {"path": str(path), "token": "t1", "record": {"stopped": True}})
    assert taken["heartbeat"] == str(path / "heartbeat") == none["heartbeat"]
    beat = int(time.time()) - 10
    (path / "heartbeat").write_text("%d\n" % beat)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir())
    t0 = time.time()
    got = adhoc("host_lock", {"path": str(path), "state": "found"})["found"]
    t1 = time.time()
    assert got["held"] is True and got["holder"]["token"] == "t1" and got["holder"]["record"] == {"stopped": True}
    assert beat - int(t1) - 1 <= got["promised_in_s"] <= beat - int(t0) < 0 and got["age_s"] >= 0  # broken
    assert sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir()) == before
    for text in ("", "soon", "-5"):  # a promise that cannot be read is none, never a kept one
        (path / "heartbeat").write_text(text)
        assert adhoc("host_lock", {"path": str(path), "state": "found"})["found"]["promised_in_s"] is None
    for text in ("{broken", "[1, 2]", "null"):  # an owner that is not one reads as unknown, never as a crash
        (path / "owner.json").write_text(text)
        assert adhoc("host_lock", {"path": str(path), "state": "found"})["found"]["holder"]["token"].startswith("unknown")
    # a lock whose directory's parent does not exist is simply not held
    gone = adhoc("host_lock", {"path": str(tmp_path / "no-such-dir" / "x.lock"), "state": "found"})
    assert gone["_status"] == "SUCCESS" and gone["found"]["held"] is False
    # the other states still need this cycle's token, and say so
    r = adhoc("host_lock", {"path": str(path), "state": "absent"})
    assert r["_status"] == "FAILED!" and "token must not be empty (state=absent)" in r["msg"]


def own_lock(path: Path) -> Path:
    """A lock as host_lock makes it: its user's, 0700, its record 0600."""
    import os
    dead_lock(path)
    os.chmod(path, 0o700)
    os.chmod(path / "owner.json", 0o600)
    return path


@pytest.mark.parametrize(("fault", "as_other_user", "why"), [
    (None, True, "belongs to uid 0, not to uid 65534"),  # made by another user than the one the cycle runs as
    (lambda lock: lock.chmod(0o777), False, "bc.lock is writable by its group or by others (mode 0777)"),
    (lambda lock: (lock / "owner.json").chmod(0o666), False, "owner.json is writable by its group or by others (mode 0666)"),
    (lambda lock: [(lock / "heartbeat").write_text("99999999999\n"), (lock / "heartbeat").chmod(0o646)], False,
     "heartbeat is writable by its group or by others"),
    (lambda lock: (lock / "owner.json").unlink() or (lock / "owner.json").symlink_to("/etc/hostname"), False,
     "owner.json is not a plain file (a link?)"),
])
def test_a_lock_another_user_could_have_made_is_never_trusted(tmp_path, fault, as_other_user, why):
    """/run/lock is writable by every local user: a lock (or its record, or its heartbeat) that is not the cycle's
    user's own, or that others may write, or a link, is refused before anything reads it."""
    lock = tmp_path / "bc.lock"
    assert host_lock.untrusted(str(lock), 0) == ""  # no lock: nothing to distrust
    own_lock(lock)
    assert host_lock.untrusted(str(lock), 0) == ""  # the module's own (the tests run as root, as the cycle does)
    if fault:
        fault(lock)
    assert why in host_lock.untrusted(str(lock), 65534 if as_other_user else 0)


def test_a_lock_that_is_a_link_is_never_trusted(tmp_path):
    real = tmp_path / "elsewhere"
    real.mkdir(mode=0o700)
    link = tmp_path / "linked.lock"
    link.symlink_to(real)
    assert "linked.lock is not a plain directory (a link?)" in host_lock.untrusted(str(link), 0)


# host_lock's refusal: the words a refused cycle says, each way the lab's lock faults met it (issue #45: rows, not lab
# cycles); the holder named, and the way out with its token
HOLDER = {"token": "other-cycle", "user": "alice", "controller": "awx-1", "pid": "4242", "started": "earlier"}


@pytest.mark.parametrize(("break_token", "age", "said"), [
    (None, 60, "re-run with -e bc_lock_break_token=other-cycle"),  # young: wait, or break it by its token
    ("some-other-cycle", 60, "The token given to break (some-other-cycle) is not its holder's: nothing was broken"),
    (None, 3 * 3600, "may be stale: if that cycle is gone, re-run with -e bc_lock_break=true to break it, "
                     "or -e bc_lock_break_token=other-cycle"),
    ("some-other-cycle", 3 * 3600, "is not its holder's: nothing was broken"),  # a wrong token breaks nothing, stale or not
])
def test_a_refused_lock_names_its_holder_and_the_way_out(break_token, age, said):
    p = {"path": "/run/lock/benchmark-cycle-llama-lab.lock", "break_token": break_token, "stale_after": 7200}
    text = host_lock.refusal(p, HOLDER, age, time.time())
    assert text.startswith("another benchmark cycle holds /run/lock/benchmark-cycle-llama-lab.lock: cycle other-cycle"), text
    assert "alice@awx-1 (pid 4242)" in text and said in text, text


# host_lock.expired: a holder is dead by its heartbeat's promise or its lease, never by its name or pid (a twin controller
# name in another pid namespace keeps the lock while its promise holds)
@pytest.mark.parametrize(("holder", "promised", "dead"), [
    ({"expires": 2000.0}, 1000 + 86400, False),  # a live holder on a twin controller name: its promise a day ahead
    ({"expires": 2000.0}, 995, True),  # its controller broke its promise: dead, though its lease runs
    ({"expires": 2000.0}, None, False),  # an unreadable heartbeat proves nothing: the lease decides
    ({"expires": 900.0}, None, True),  # the lease ran out
    ({"expires": 0}, None, False),  # no lease: never expired by it
    ({}, None, False),
])
def test_a_holder_is_dead_by_its_broken_promise_or_its_lease_never_by_its_name(holder, promised, dead):
    assert host_lock.expired(dict(HOLDER, **holder), 1000.0, promised) is dead


def test_the_holders_command_line_is_read_whole_whatever_the_terminal_width(tmp_path):
    """The role's own liveness read (roles/cycle_lock/tasks/main.yml) of a live ansible-playbook whose command line is
    long (a venv under a long path) with COLUMNS=80 in the environment (as a runner gives it): ps cuts its output to
    COLUMNS when not on a terminal, and a holder whose "ansible-playbook" fell past the cut was taken for dead."""
    import os

    import yaml

    tasks = yaml.safe_load((ROOT / "roles/cycle_lock/tasks/main.yml").read_text())
    check = next(t for block in tasks for t in block.get("block", [])
                 if t.get("name") == "Check whether the holder's ansible-playbook still runs on this controller")
    argv = check["ansible.builtin.command"]["argv"]
    long_dir = tmp_path / ("v" * 90) / "bin"
    long_dir.mkdir(parents=True)
    script = long_dir / "ansible-playbook"
    script.write_text("import time\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, str(script), "benchmark_cycle.yml"])
    try:
        time.sleep(0.2)
        cmd = [a.replace("{{ cycle_bc.bc_command_timeout_s }}", "10").replace(
            "{{ __cycle_lock_taken.holder.pid | default('0') }}", str(holder.pid)) for a in argv]
        read = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False,
                              env=dict(os.environ, COLUMNS="80"))
    finally:
        holder.kill()
        holder.wait()
    assert read.returncode == 0 and "ansible-playbook" in read.stdout, (cmd, read.stdout)
