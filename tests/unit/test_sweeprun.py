"""module_utils/bc_sweeprun: the sweep's worker run to its end, its timeout, or its controller's end. Real processes and
real heartbeat files; the lab case (tests/integration/test_partial_runs.py, a sweep on its own whose controller is
killed) is the whole path."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweeprun import run_watched

# a worker that reads its input, says it started, and sleeps for the seconds it was given
WORKER = [sys.executable, "-c", "import sys, time; n = float(sys.stdin.read()); print('started', flush=True); time.sleep(n); print('done')"]


def lock(tmp_path: Path, holder: str = "cycle-a", promise: float | None = None) -> dict:
    directory = tmp_path / "bc.lock"
    directory.mkdir(mode=0o700, exist_ok=True)
    (directory / "owner.json").write_text(json.dumps({"token": holder}))
    if promise is not None:
        (directory / "heartbeat").write_text("%d\n" % promise)
    return {"path": str(directory / "heartbeat"), "for_s": 4, "token": "cycle-a"}  # looked at every second


def test_a_worker_whose_controller_keeps_its_promise_runs_to_its_end(tmp_path):
    rc, out, _err, why = run_watched(WORKER, "1.5", 60, lock(tmp_path, promise=time.time() + 600))
    assert (rc, why) == (0, "") and out.split() == ["started", "done"]


def test_a_worker_whose_controller_broke_its_promise_is_killed_at_the_next_look(tmp_path):
    t0 = time.monotonic()
    rc, out, _err, why = run_watched(WORKER, "600", 600, lock(tmp_path, promise=time.time() - 1))
    assert rc < 0 and "promised its next contact by" in why and out.split() == ["started"], (rc, why)
    assert time.monotonic() - t0 < 300  # ended by the watch, long before the worker's own end or the timeout


def test_a_worker_is_killed_when_another_cycle_took_the_lock_or_the_promise_it_read_is_gone(tmp_path):
    heartbeat = lock(tmp_path, holder="cycle-b", promise=time.time() + 600)
    rc, _out, _err, why = run_watched(WORKER, "600", 600, heartbeat)
    assert rc < 0 and "is held by cycle cycle-b" in why
    # the holder's promise read once, then removed (not by a renewal): unknown is not alive
    second = tmp_path / "b"
    second.mkdir()
    heartbeat = lock(second, promise=time.time() + 600)
    threading.Timer(2.5, Path(heartbeat["path"]).unlink).start()
    rc, _out, _err, why = run_watched(WORKER, "600", 600, heartbeat)
    assert rc < 0 and "cannot be read any more" in why


def test_a_promise_not_written_yet_is_not_a_broken_one_and_no_heartbeat_is_bounded_by_the_timeout(tmp_path):
    rc, _out, _err, why = run_watched(WORKER, "2", 60, lock(tmp_path))  # the first poll has not written it
    assert (rc, why) == (0, "")
    rc, out, _err, why = run_watched(WORKER, "600", 2, None)
    assert rc < 0 and why == "timeout" and out.split() == ["started"]
