# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback: one readable line per readiness or drain retry, in a terminal and in AWX alike.

    ct200 reload 04:35  warming  "Capture decode CUDA graph"  (92 retries left)

It prints through the display (stdout), so AWX's job output shows the same lines; it adds lines,
it does not replace the stdout callback. With an event log set, it also appends one JSON line per
task start and per host result (time, host, task, status; the message of a failure, never a
result's data): the cycle's timeline on the controller, from which time-to-detect is measured.
With a JUnit file set, it writes one testcase per step (role) and host at the end of the run, with
the step's time and the message of each failure (a failure that was rescued still fails its step).
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: benchmark_cycle_progress
type: aggregate
short_description: One progress line per readiness/drain retry of the benchmark cycle
description:
  - For every retry of an C(inference_health) task, prints the host, time since the unit started,
    the phase, the last start-up stage from the journal and the retries left.
  - With O(event_log), appends the cycle's timeline as JSON lines (task starts and results).
requirements:
  - enable in ansible.cfg with C(callbacks_enabled = benchmark_cycle_progress), or from the collection with
    C(callbacks_enabled = inference_ops.benchmark_cycle.benchmark_cycle_progress); run from the collection, the
    roles' tasks are named by the roles' FQCN in its JUnit file and event log (C(inference_ops.benchmark_cycle.service_drain))
options:
  event_log:
    description: File to append the timeline to (JSON lines); unset writes none.
    type: path
    env:
      - name: BC_CYCLE_EVENT_LOG
    ini:
      - section: benchmark_cycle_progress
        key: event_log
  junit_file:
    description: JUnit XML written at the end of the run, one testcase per step (role) and host; unset writes none.
    type: path
    env:
      - name: BC_CYCLE_JUNIT
    ini:
      - section: benchmark_cycle_progress
        key: junit_file
"""


import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_export import junit
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import reload_line
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import redact

# a filter of plugins/filter/bc_filters.py: looking it up by its full name loads them all
WARM_FILTER = "bc_closest"


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "benchmark_cycle_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._play = ""
        self._started: dict[str, float] = {}
        self._steps: dict[tuple[str, str], dict[str, Any]] = {}

    def _step(self, result: Any, status: str, msg: Any = None) -> None:
        task = result._task
        role = task._role.get_name() if getattr(task, "_role", None) else ""
        name = role or "playbook: " + (self._play.split(" - ")[0] if self._play else "tasks")
        host = result._host.get_name()
        step = self._steps.setdefault((host, name), {"host": host, "step": name, "seconds": 0.0, "failures": [],
                                                     "skipped": True})
        step["seconds"] += max(0.0, time.time() - self._started.get(task._uuid, time.time()))
        if status != "skipped":
            step["skipped"] = False
        if status == "failed":
            step["failures"].append("%s: %s" % (task.get_name().strip(), redact(str(msg), [os.environ.get("BC_API_KEY", "")])[:1000]))

    def v2_playbook_on_start(self, playbook: Any) -> None:
        """Load the Jinja filters and tests once, here in ansible-playbook's own process. Each task runs in a worker
        forked from it: a worker that finds them loaded does not import them again, where otherwise the first filter of
        each task's templating imports every filter file (this project's with its module_utils): about 60 ms of CPU per
        task, 5% of a lab cycle's controller CPU (docs/timings.md)."""
        filter_loader.get("ansible.builtin.bool")  # every non-collection filter file
        test_loader.get("ansible.builtin.success")
        filter_loader.get(".".join([*__name__.split(".")[1:3], WARM_FILTER]))  # the collection's, by its own name

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._play = play.get_name().strip()

    def v2_playbook_on_stats(self, stats: Any) -> None:
        path = self.get_option("junit_file")
        if not path or not self._steps:
            return
        tmp = path + ".tmp"
        # 0600, as the event log: its failure messages are the operator's alone
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(junit(list(self._steps.values())))
        os.replace(tmp, path)

    def _log(self, event: str, task: Any, host: str | None = None, msg: str | None = None) -> None:
        path = self.get_option("event_log")
        if not path:
            return
        line = {"t": round(time.time(), 3), "event": event, "task": task.get_name().strip() if task else None, "host": host}
        if msg:
            # the messages are redacted where they are made; this is the second line of defence: the
            # key of the environment (inventory/ct200 reads BC_API_KEY) and every secret-looking field
            line["msg"] = redact(str(msg), [os.environ.get("BC_API_KEY", "")])[:1000]
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # the cycle's timeline is the operator's alone, even if the file existed
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._started[task._uuid] = time.time()
        self._log("start", task)

    def v2_runner_on_ok(self, result: Any) -> None:
        self._step(result, "ok")
        self._log("ok", result._task, result._host.get_name())

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._step(result, "ok" if ignore_errors else "failed", result._result.get("msg"))
        self._log("failed", result._task, result._host.get_name(), result._result.get("msg"))

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._step(result, "skipped")
        self._log("skipped", result._task, result._host.get_name())

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._step(result, "failed", "unreachable: %s" % result._result.get("msg"))
        self._log("unreachable", result._task, result._host.get_name(), result._result.get("msg"))

    def v2_runner_retry(self, result: Any) -> None:
        self._log("retry", result._task, result._host.get_name())
        res = result._result
        if "phase" not in res and "in_flight" not in res:
            return
        host = result._host.get_name()
        left = res.get("retries", 0) - res.get("attempts", 0)
        if "in_flight" in res and res.get("in_flight") is not None:
            self._display.display("%s drain  %s request(s) in flight  (%d retries left)" % (host, res["in_flight"], left))
            return
        self._display.display(redact(reload_line(res, host, left), [os.environ.get("BC_API_KEY", "")]))
