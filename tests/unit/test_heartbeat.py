"""The controller's heartbeat (module_utils/bc_host.py beat, beat_until) and the sweep poll that writes it
(library/sweep_wait.py job_state): pure functions and real files."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "library"))
from sweep_wait import job_state

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import beat, beat_done, beat_until, lost_lock


def test_a_beat_promises_the_calls_own_worst_case_plus_the_silence_after_it(tmp_path):
    path = tmp_path / "heartbeat"
    got = beat({"path": str(path), "for_s": 70}, now=1000.2, own_s=30)
    assert got == {"path": str(path), "written": True, "until": 1101}  # ceil(1030.2) + 70
    assert path.read_text() == "1101\n" and beat_until(str(path)) == 1101
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert beat(None, 1000) is None and beat({}, 1000) is None


def test_a_beat_never_recreates_a_removed_lock_nor_writes_through_a_link(tmp_path):
    gone = beat({"path": str(tmp_path / "no-lock" / "heartbeat"), "for_s": 60}, now=1000)
    assert gone and not gone["written"] and "not a directory" in gone["why"] and not (tmp_path / "no-lock").exists()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.symlink(target, tmp_path / "heartbeat")
    linked = beat({"path": str(tmp_path / "heartbeat"), "for_s": 60}, now=1000)
    assert linked and not linked["written"] and target.read_text() == "keep"


@pytest.mark.parametrize("for_s", [0, -5, "60"])
def test_a_promise_of_no_time_is_refused(tmp_path, for_s):
    got = beat({"path": str(tmp_path / "heartbeat"), "for_s": for_s}, now=1000)
    assert got and not got["written"] and "for_s" in got["why"] and not (tmp_path / "heartbeat").exists()


@pytest.mark.parametrize("text", [None, "", "soon\n", "-5\n", "1 2\n", "9" * 13 + "\n"])
def test_an_unreadable_heartbeat_promises_nothing(tmp_path, text):
    path = tmp_path / "heartbeat"
    if text is not None:
        path.write_text(text)
    assert beat_until(str(path)) is None


def test_a_job_still_running_or_not_written_yet_is_unfinished():
    assert job_state(None) == (False, {})
    assert job_state(json.dumps({"started": True, "finished": False, "ansible_job_id": "j1"})) == (False, {})
    assert job_state(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1", "results_file": "/x"})) == (False, {})


def test_a_finished_job_gives_its_own_result_without_the_wrappers_keys():
    done, result = job_state(json.dumps({"changed": True, "points": 3, "invocation": {"module_args": {}},
                                         "_ansible_no_log": False, "ansible_job_id": "j1"}))
    assert done and result == {"changed": True, "points": 3}
    done, result = job_state(json.dumps({"failed": True, "msg": "the sweep was killed by SIGKILL", "rc": -9}))
    assert done and result == {"failed": True, "msg": "the sweep was killed by SIGKILL", "rc": -9}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "\"done\""])
def test_a_results_file_that_is_no_result_is_a_failed_job_saying_so(text):
    done, result = job_state(text)
    assert done and result["failed"] and "results file is not" in result["msg"]


def test_only_the_locks_holder_beats(tmp_path):
    """A dead cycle's call still running (ansible-core's workers live in their own session: a SIGKILLed
    ansible-playbook leaves its until-loop polling) must not keep the new holder's switch quiet."""
    (tmp_path / "owner.json").write_text(json.dumps({"token": "new-cycle"}))
    path = str(tmp_path / "heartbeat")
    stale = beat({"path": path, "for_s": 60, "token": "dead-cycle"}, now=1000)
    assert stale and not stale["written"] and "held by cycle new-cycle" in stale["why"] and beat_until(path) is None
    assert stale["lost"] is True  # read under the guard: the module fails fenced on it (beat_for), never only warns
    gone = beat({"path": str(tmp_path / "no-lock" / "heartbeat"), "for_s": 60, "token": "dead-cycle"}, now=1000)
    assert gone["lost"] is True and "is gone" in gone["why"]
    mine = beat({"path": path, "for_s": 60, "token": "new-cycle"}, now=1000)
    assert mine and mine["written"] and beat_until(path) == 1060 and "lost" not in mine
    (tmp_path / "owner.json").write_text("{broken")
    assert not beat({"path": path, "for_s": 60, "token": "new-cycle"}, now=2000)["written"] and beat_until(path) == 1060


def test_the_jobs_warnings_are_read_whatever_form_ansible_core_wrote_them_in():
    from sweep_wait import event_text

    assert event_text("plain") == "plain"
    assert event_text({"msg": "killed the orphaned sweep pid 42"}) == "killed the orphaned sweep pid 42"
    assert event_text({"event": {"msg": "the sweep ran on the CPU", "formatted_traceback": None}}) == "the sweep ran on the CPU"
    assert event_text([{"msg": "a"}, "b", 3]) == "a; b" and event_text(None) == "" and event_text({"x": 1}) == ""


def test_a_disarmed_switchs_promise_is_removed_only_from_this_cycles_lock(tmp_path):
    """After the start (the switch disarmed) a stale promise would make a live holder, waiting minutes for its
    server, look dead to the next cycle: it is removed - but never from a lock another cycle took over."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import end_beat

    (tmp_path / "owner.json").write_text(json.dumps({"token": "mine"}))
    path = tmp_path / "heartbeat"
    path.write_text("1000\n")
    assert end_beat({"path": str(path), "for_s": 60, "token": "theirs"}) == {"path": str(path), "removed": False,
                                                                            "why": "the lock is another cycle's"}
    assert path.exists()
    assert end_beat({"path": str(path), "for_s": 60, "token": "mine"}) == {"path": str(path), "removed": True}
    assert not path.exists() and end_beat({"path": str(path), "for_s": 60, "token": "mine"}) is None and end_beat(None) is None


def test_a_sweep_that_ended_first_in_its_batch_promises_the_slowest_hosts_sweep(tmp_path):
    """serial above 1: the play's next task waits for every host's sweep, so the host whose sweep ended first
    promises its next contact after the batch's longest sweep (after_s), not after one poll."""
    import time

    from test_modules_adhoc import adhoc

    (tmp_path / "owner.json").write_text(json.dumps({"token": "c1"}))
    job = tmp_path / "job"
    heartbeat = {"path": str(tmp_path / "heartbeat"), "for_s": 61, "token": "c1"}
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    running = adhoc("sweep_wait", {"job": str(job), "after_s": 3660, "heartbeat": heartbeat})
    assert running["finished"] is False and running["heartbeat"]["until"] - time.time() < 120  # one poll + the grace
    job.write_text(json.dumps({"changed": True, "points": 3}))
    ended = adhoc("sweep_wait", {"job": str(job), "after_s": 3660, "heartbeat": heartbeat})
    assert ended["finished"] and ended["points"] == 3 and not job.exists()
    assert 3660 + 61 - 5 <= ended["heartbeat"]["until"] - time.time() <= 3660 + 61 + 5


def finish(job: Path, result: dict) -> None:
    """The job's end as the async wrapper writes it: the whole file at once (a rename)."""
    tmp = job.with_name(job.name + ".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, job)


def _waiting_poll(tmp_path: Path, args: dict) -> tuple[Any, dict, Path, Path]:
    """A sweep_wait poll with wait_s, run in the background against a running job in a lock of cycle c1, returned
    once it waits (its promise written): (thread, its result once joined, the job, the heartbeat)."""
    import threading

    from test_modules_adhoc import adhoc

    (tmp_path / "owner.json").write_text(json.dumps({"token": "c1"}))
    job, beat_file = tmp_path / "job", tmp_path / "heartbeat"
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    got: dict = {}
    poll = threading.Thread(target=lambda: got.update(adhoc("sweep_wait", dict(
        args, job=str(job), heartbeat={"path": str(beat_file), "for_s": 30, "token": "c1"}))))
    poll.start()
    deadline = time.monotonic() + 120
    while not beat_file.exists() and poll.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert beat_file.exists(), got
    return poll, got, job, beat_file


def test_a_poll_that_waits_on_the_host_promises_the_wait_and_sees_the_end_when_it_comes(tmp_path):
    """wait_s: while the job runs, the promise written before the wait covers it (wait_s + the grace from the write);
    the end is seen when it comes, not when the wait is up, and the promise is then shrunk to the grace from the end."""
    from test_modules_adhoc import adhoc

    (tmp_path / "owner.json").write_text(json.dumps({"token": "c1"}))
    job, beat_file = tmp_path / "job", tmp_path / "heartbeat"
    job.write_text(json.dumps({"started": 1, "finished": 0, "ansible_job_id": "j1"}))
    wait_s = 10
    running = adhoc("sweep_wait", {"job": str(job), "wait_s": wait_s, "heartbeat": {"path": str(beat_file), "for_s": 30, "token": "c1"}})
    assert running["finished"] is False and job.exists()
    refused = adhoc("sweep_wait", {"job": str(job), "wait_s": -1})
    assert refused["_status"] == "FAILED!" and "wait_s and after_s are seconds: give 0 or more (wait_s=-1" in refused["msg"]
    # written when the wait began: its promise holds the wait (a promise of the grace alone ends before this)
    assert running["heartbeat"]["until"] >= beat_file.stat().st_mtime + 30 + wait_s / 2
    beat_file.unlink()
    wait_s = 100
    poll, got, job, beat_file = _waiting_poll(tmp_path, {"wait_s": wait_s})
    finish(job, {"changed": True, "points": 3})
    ended = time.monotonic()
    poll.join(timeout=120)
    assert got["finished"] is True and got["points"] == 3 and not job.exists()
    assert time.monotonic() - ended < wait_s / 2  # seen at its end, not at the end of the wait
    assert got["heartbeat"]["until"] <= math.ceil(time.time()) + 30 and beat_until(str(beat_file)) == got["heartbeat"]["until"]


def test_a_job_that_ends_in_the_wait_is_left_to_the_next_poll_where_its_batch_is_promised(tmp_path):
    """after_s (other hosts in the batch): a promise that long is made only by a poll a live controller started, never
    from inside a wait a dead controller may have left: the wait returns the job unread, the next poll promises it."""
    from test_modules_adhoc import adhoc

    poll, got, job, beat_file = _waiting_poll(tmp_path, {"wait_s": 60, "after_s": 3660})
    promised = beat_until(str(beat_file))
    finish(job, {"changed": True, "points": 3})
    poll.join(timeout=120)
    assert got["finished"] is False and job.exists() and beat_until(str(beat_file)) == promised
    ended = adhoc("sweep_wait", {"job": str(job), "wait_s": 60, "after_s": 3660,
                                 "heartbeat": {"path": str(beat_file), "for_s": 30, "token": "c1"}})
    assert ended["finished"] is True and ended["points"] == 3 and not job.exists()
    assert ended["heartbeat"]["until"] >= math.floor(beat_file.stat().st_mtime) + 3660 + 30


def test_a_wait_whose_lock_was_taken_over_touches_nothing_at_the_end(tmp_path):
    """The promise made at the end is fenced as the first was: a lock taken over during the wait fails the poll."""
    poll, got, job, beat_file = _waiting_poll(tmp_path, {"wait_s": 60})
    promised = beat_until(str(beat_file))
    (tmp_path / "owner.json").write_text(json.dumps({"token": "c2"}))
    finish(job, {"changed": True, "points": 3})
    poll.join(timeout=120)
    assert got["_status"] == "FAILED!" and got.get("fenced") is True and "is held by cycle c2" in got["msg"], got
    assert beat_until(str(beat_file)) == promised and job.exists()


def _lock(tmp_path: Path, holder: str | None) -> str:
    lock = tmp_path / "bc.lock"
    lock.mkdir(mode=0o700)
    if holder is not None:
        (lock / "owner.json").write_text(json.dumps({"token": holder}))
    return str(lock / "heartbeat")


@pytest.mark.parametrize(("holder", "token", "lost"), [
    ("cycle-a", "cycle-a", ""),                                 # the holder: it acts
    ("cycle-b", "cycle-a", "is held by cycle cycle-b"),        # taken over while this controller was paused: fenced
    (None, "cycle-a", "is held by cycle None"),                # a holder that cannot be read is not this cycle
    ("cycle-a", None, ""),                                     # no token to tell by (a heartbeat of an older caller)
])
def test_a_step_acts_only_while_its_cycle_holds_the_lock(tmp_path, holder, token, lost):
    path = _lock(tmp_path, holder)
    heartbeat = {"path": path, "for_s": 60, **({"token": token} if token else {})}
    got = lost_lock(heartbeat)
    assert (lost in got) if lost else got == ""


def test_a_lock_that_is_gone_is_not_held(tmp_path):
    assert "its lock" in lost_lock({"path": str(tmp_path / "gone.lock" / "heartbeat"), "for_s": 60, "token": "cycle-a"})
    assert lost_lock(None) == "" and lost_lock({}) == ""


def test_a_sweep_is_never_started_by_a_cycle_that_lost_the_lock(tmp_path):
    """A controller paused past its lease wakes after another cycle took the host: its sweep launch fails fenced before
    it starts anything on the GPU the other cycle owns (#44)."""
    from test_modules_adhoc import adhoc

    path = _lock(tmp_path, "cycle-b")
    out = tmp_path / "sweep.json"
    args = {"output": str(out), "backends": ["torch"], "batch_sizes": [1], "num_experts": 8, "hidden_size": 256,
            "intermediate_size": 256, "top_k": 2, "iters": 3, "warmup": 0, "python": "/bin/false"}
    lost = adhoc("marlin_sweep", dict(args, heartbeat={"path": path, "for_s": 60, "token": "cycle-a"}))
    assert lost["_status"] == "FAILED!" and "no longer owns" in lost["msg"] and "cycle-b" in lost["msg"], lost
    assert not out.exists()
    # the holder's launch only reads: the promise its first poll wrote (async may run the launch after it) stands
    Path(path).write_text("4102444800\n")
    held = adhoc("marlin_sweep", dict(args, heartbeat={"path": path, "for_s": 60, "token": "cycle-b"}))
    assert "no longer owns" not in json.dumps(held) and Path(path).read_text() == "4102444800\n", held


def test_a_stop_once_done_promises_the_grace_not_what_was_left_of_its_worst_case(tmp_path):
    """#44 item 25: the stop's first beat covers its worst case (a 900 s stop timeout here); once the unit is stopped
    and proven, the promise shrinks to the grace after it, so a controller lost right after its stop costs the
    switch's grace. Through the real module, with a systemctl double (this machine has no systemd) whose unit is
    already stopped."""
    from test_modules_adhoc import adhoc

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    double = bin_dir / "systemctl"  # a double of systemctl: the unit reads as stopped; every other call succeeds
    double.write_text('#!/bin/sh\ncase "$*" in *show*) printf "ActiveState=inactive\\nMainPID=0\\n";; esac\nexit 0\n')
    double.chmod(0o755)
    lock = tmp_path / "lock"
    lock.mkdir()
    (lock / "owner.json").write_text(json.dumps({"token": "t1"}))
    given = {"path": str(lock / "heartbeat"), "for_s": 30, "token": "t1"}
    r = adhoc("inference_unit", {"name": "bc-test", "state": "stopped", "heartbeat": given, "gpu_check": False,
                                 "stop_timeout": 900}, path=str(bin_dir))
    done = time.time()
    assert r["_status"] in ("SUCCESS", "CHANGED"), r
    until = beat_until(str(lock / "heartbeat"))
    assert until is not None and until <= math.ceil(done) + 30, (until, done)  # the grace after the stop, no more
    assert r["heartbeat"] == {"path": given["path"], "written": True, "until": until}


def test_a_done_step_never_shrinks_a_promise_it_did_not_write(tmp_path):
    class Module:
        check_mode = False
        params: ClassVar[dict] = {"heartbeat": {"path": str(tmp_path / "heartbeat"), "for_s": 30}}

    unwritten = {"path": str(tmp_path / "heartbeat"), "written": False, "why": "x"}
    assert beat_done(Module(), unwritten) is unwritten and not (tmp_path / "heartbeat").exists()
    assert beat_done(Module(), None) is None
    first = beat(Module.params["heartbeat"], now=time.time(), own_s=900)
    Module.check_mode = True
    assert beat_done(Module(), first) is first and beat_until(str(tmp_path / "heartbeat")) == first["until"]


NOW = 1_800_000_000


@pytest.mark.parametrize(("holder", "promise", "seen", "gone"), [
    ("cycle-a", NOW + 30, True, ""),                                    # a kept promise: go on
    ("cycle-a", NOW, True, "promised its next contact by %d" % NOW),     # due now and not renewed: gone
    ("cycle-a", NOW - 5, False, "promised its next contact by"),          # broken, even if never read before
    ("cycle-a", None, False, ""),                                       # not written yet: the first poll writes it
    ("cycle-a", None, True, "cannot be read any more"),                 # read before, gone now
    ("cycle-a", "soon", True, "cannot be read any more"),               # not a whole number: unknown is not alive
    ("cycle-b", NOW + 30, True, "is held by cycle cycle-b"),            # taken over: a kept promise of another cycle's
    (None, NOW + 30, True, "is held by cycle None"),                    # a holder that cannot be read
])
def test_a_process_the_controller_left_running_ends_when_its_controller_is_gone(tmp_path, holder, promise, seen, gone):
    """The sweep's watch (bc_sweeprun.run_watched) asks this every few seconds: the dead-man switch's rule, plus the lock."""
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import controller_gone

    path = _lock(tmp_path, holder)
    if promise is not None:
        Path(path).write_text("%s\n" % promise)
    got = controller_gone({"path": path, "for_s": 60, "token": "cycle-a"}, NOW, seen)
    assert (gone in got and got) if gone else got == "", got


def test_without_a_heartbeat_or_a_lock_nothing_is_gone(tmp_path):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import controller_gone

    assert controller_gone(None, NOW, True) == ""
    assert "its lock" in controller_gone({"path": str(tmp_path / "gone.lock" / "heartbeat"), "for_s": 60, "token": "a"}, NOW, False)
