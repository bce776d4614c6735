#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: one poll of a sweep started with async (poll 0), which is also the controller's heartbeat."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sweep_wait
short_description: Poll a sweep started in the background, and beat the cycle's heartbeat
description:
  - One poll of a job started with C(async) and C(poll=0) (M(inference_ops.benchmark_cycle.marlin_sweep)), read from its results file (O(job), the
    C(results_file) the launch returned), used with C(until)/C(retries)/C(delay). Each poll first writes the
    cycle's heartbeat (O(heartbeat)), so a controller that stops polling (killed, cancelled, cut off) is seen dead by
    the host within a short grace, not after the sweep's whole budget.
  - A job still running returns RV(finished=false). A finished job returns its own result, or fails with its own
    message (a sweep killed, out of memory, a bad kernel); its results file is then removed.
  - With O(wait_s), one poll waits on the host for the job's end, up to O(wait_s). The job's end is seen within a
    quarter of a second, and a long sweep costs one module run per O(wait_s), not one per C(delay).
  - A results file not written yet (the job's wrapper is still starting, up to a few seconds on a loaded host) reads
    as running; the caller's retries bound the wait.
version_added: "1.0.0"
options:
  job:
    description: The job's results file (C(results_file) of the task started with C(async) and C(poll=0)).
    type: path
    required: true
  after_s:
    description:
      - Seconds the controller may stay away once the job has ended - the other hosts of its batch (C(serial) above 1)
        may still sweep, and the play's next task waits for them. The heartbeat written with the job's end promises
        this more.
    type: int
    default: 0
  wait_s:
    description:
      - Seconds this poll waits on the host for the job to end (0 - look once). It returns as soon as the job ends,
        so the caller's C(delay) can be 0. The heartbeat written first promises this wait plus O(heartbeat.for_s).
      - A job that ends in the wait is returned with its promise shrunk to O(heartbeat.for_s) from its end (never
        made longer). With O(after_s) above 0 the wait returns RV(finished=false) and leaves the job to the next poll,
        so only a controller that is still there promises the batch's slowest sweep.
    type: int
    default: 0
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat]
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode: {support: full, description: Reads the job as it is (a poll changes nothing but the heartbeat).}
  diff_mode: {support: none, description: Nothing to show as a diff.}
seealso:
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: The sweep this polls; started with C(async) and C(poll=0).
  - module: inference_ops.benchmark_cycle.inference_switch
    description: The dead-man switch (C(state=armed)) reads the heartbeat each poll writes.
  - module: ansible.builtin.async_status
    description: The builtin poll of an async job, without a heartbeat.
"""

EXAMPLES = r"""
- name: Start the sweep
  inference_ops.benchmark_cycle.marlin_sweep:
    num_experts: 384
    hidden_size: 7168
    intermediate_size: 2048
    top_k: 8
    group_size: 32
    output: /var/lib/benchmark-cycle/results/sweep.json
  async: 3660
  poll: 0
  register: launch

- name: Sweep
  inference_ops.benchmark_cycle.sweep_wait:
    job: "{{ launch.results_file }}"
    heartbeat: {path: /run/lock/benchmark-cycle-sglang.lock/heartbeat, for_s: 70}
  register: sweep
  until: sweep.finished
  retries: 733
  delay: 5
"""

RETURN = r"""
finished:
  description: The job has ended (its own result is returned with it).
  returned: always
  type: bool
  sample: false
heartbeat:
  description: The heartbeat written (path, written, until) or why not (why); absent without O(heartbeat).
  returned: when O(heartbeat) is given
  type: dict
  sample: {path: /run/lock/benchmark-cycle-sglang.lock/heartbeat, written: true, until: 1796186677}
job:
  description: The results file polled.
  returned: always
  type: str
  sample: /root/.ansible_async/j412596021806.1839
"""

import json
import math
import os
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import HEARTBEAT_OPTION, beat_for, read_text

SPEC: dict[str, Any] = {"job": {"type": "path", "required": True}, "after_s": {"type": "int", "default": 0},
                        "wait_s": {"type": "int", "default": 0}, "heartbeat": HEARTBEAT_OPTION}
# how often a poll with wait_s looks at the job's results file (a stat and a small read)
LOOK_S = 0.25
# what the async wrapper and AnsibleModule add to a job's result: never passed on as the module's own
INTERNAL = ("invocation", "started", "finished", "ansible_job_id", "results_file")


def job_state(text: str | None) -> tuple[bool, dict[str, Any]]:
    """(finished, result) of an async job's results file: absent or still `started` is running; a finished job's
    file is the module's own result. A file that is not a JSON object is a finished, failed job (it says why)."""
    if text is None:
        return False, {}
    try:
        data = json.loads(text)
    except ValueError:
        return True, {"failed": True, "msg": "the job's results file is not JSON: %s" % text[:200]}
    if not isinstance(data, dict):
        return True, {"failed": True, "msg": "the job's results file is not a JSON object: %s" % text[:200]}
    if data.get("started") and not data.get("finished") and len(set(data) - set(INTERNAL)) == 0:
        return False, {}
    return True, {k: v for k, v in data.items() if k not in INTERNAL and not k.startswith("_ansible")}


def event_text(event: Any) -> str:
    """The text of a warning the job's module gave: a string, or the event dict ansible-core 2.19 writes into a
    module's result (its message under `msg`, or inside `event` / `details`)."""
    if isinstance(event, str):
        return event
    if isinstance(event, dict):
        for key in ("msg", "event", "details"):
            if key in event:
                found = event_text(event[key])
                if found:
                    return found
    if isinstance(event, list):
        return "; ".join(filter(None, (event_text(e) for e in event)))
    return ""


def wait_for_end(module: AnsibleModule) -> tuple[bool, dict[str, Any], dict[str, Any] | None]:
    """(finished, result, heartbeat) of one poll: the job read, and while it runs, read again until it ends or wait_s
    pass. The promise of the wait is written before it. A job that ends in the wait is returned with a promise made
    anew from its end - but only one that shrinks: a promise after the batch's slowest sweep (after_s) is made by the
    next poll, from a controller that is still there, so a dead controller's orphaned wait never extends it."""
    p = module.params
    finished, result = job_state(read_text(p["job"]))
    if finished or p["wait_s"] <= 0:
        return finished, result, beat_for(module, p["after_s"] if finished else 0, time.time())
    now = time.time()
    beaten = beat_for(module, p["wait_s"], now)
    deadline = time.monotonic() + p["wait_s"] - (time.time() - now)  # the wait promised, from the same clock reading
    while not finished and time.monotonic() < deadline:
        time.sleep(min(LOOK_S, max(0.0, deadline - time.monotonic())))
        finished, result = job_state(read_text(p["job"]))
    if finished and p["after_s"] > 0:
        return False, {}, beaten  # not consumed: the next poll sees the end at once and promises after_s
    now = time.time()
    if finished and beaten and beaten.get("written") and math.ceil(now) + p["heartbeat"]["for_s"] < beaten["until"]:
        beaten = beat_for(module, 0, now)  # only ever shorter than the wait's promise
    return finished, result, beaten


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    if p["wait_s"] < 0 or p["after_s"] < 0:
        module.fail_json(msg="wait_s and after_s are seconds: give 0 or more (wait_s=%s, after_s=%s)" % (p["wait_s"], p["after_s"]))
    finished, result, beaten = wait_for_end(module)
    extra = {"heartbeat": beaten} if beaten is not None else {}
    if not finished:
        module.exit_json(changed=False, finished=False, job=p["job"], **extra)
    if not module.check_mode and os.path.exists(p["job"]):
        os.unlink(p["job"])
    # the job's own warnings, said again (as the events they are written as, they cannot be passed on as values)
    for warning in result.pop("warnings", None) or []:
        text = event_text(warning)
        if text:
            module.warn(text)
    for key in ("deprecations", "exception"):
        result.pop(key, None)
    if result.pop("failed", False):
        msg = event_text(result.pop("msg", "")) or "the job failed without a message"
        module.fail_json(msg=msg, finished=True, job=p["job"], **dict(result, **extra))
    result.pop("changed", None)
    module.exit_json(changed=True, finished=True, job=p["job"], **dict(result, **extra))


if __name__ == "__main__":
    main()
