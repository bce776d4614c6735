#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: how much work an inference server holds (SGLang, llama.cpp, vLLM), read once, for a drain."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_load_info
short_description: Read the requests an inference server holds, once, for a drain
description:
  - Reads the running and queued requests of an inference server from its engine's load endpoint, and where the
    engine's count misses its HTTP front end, the front end's own count too (SGLang's C(sglang:http_requests_active),
    vLLM's C(/load), believed only from a server whose main process shows it counts, so give O(unit)). Used with
    C(until) on RV(in_flight) C(== 0), with C(retries), C(delay) and O(deadline), as long as a drain may take.
  - Unknown is not zero - an error status, no answer, metrics off or a front end that cannot be read leave
    RV(in_flight) null, with why (RV(in_flight_unknown)). A server whose unit is inactive or failed holds nothing, a
    known zero.
  - Fails only where waiting is pointless, as M(inference_ops.benchmark_cycle.inference_health) judges the
    answer (the unit failed, restarted since O(restarts_baseline), logged a fatal line since O(failures_since)).
  - Whether the server serves is M(inference_ops.benchmark_cycle.inference_health)'s question.
version_added: "1.0.0"
extends_documentation_fragment:
  - inference_ops.benchmark_cycle.inference_server
  - inference_ops.benchmark_cycle.inference_wait
  - inference_ops.benchmark_cycle.read_only
author:
  - benchmark-cycle contributors (!UNKNOWN)
seealso:
  - module: inference_ops.benchmark_cycle.inference_health
    description: Whether the server serves (liveness, readiness, a completion).
  - module: inference_ops.benchmark_cycle.inference_unit
    description: Stops the unit once the drain is done (C(state=stopped)).
  - module: inference_ops.benchmark_cycle.inference_memory
    description: Releases the server's memory in place once the drain is done.
"""

EXAMPLES = r"""
- name: Wait for in-flight requests to finish
  inference_ops.benchmark_cycle.inference_load_info:
    url: http://127.0.0.1:30001
    engine: sglang
    unit: sglang-k26
    # clock: `date +%s.%N` run on the host before the wait (ansible.builtin.raw), registered
    deadline: "{{ (clock.stdout | inference_ops.benchmark_cycle.bc_host_clock) + 120 }}"
  register: load
  until: load.deadline_passed or (load.in_flight is not none and load.in_flight == 0)
  retries: 60
  delay: 2
  failed_when: false
"""

RETURN = r"""
in_flight:
  description:
    - Running + queued requests; null when unknown (metrics off, an error status, a timeout) - unknown is not zero.
    - For SGLang, the larger of the scheduler's count (C(/v1/loads)) and the requests its HTTP front end holds
      (C(sglang:http_requests_active) less health checks, scrapes and control calls), since C(/v1/loads) never counts
      the front end, and from 0.5.16 it is a snapshot; without that gauge (metrics off) the count is unknown.
    - For vLLM, the larger of the engine's gauges (its last report, so a stalled engine's read 0) and its API server's
      own count (C(/load), with C(--enable-server-load-tracking)), believed only from one API server process whose
      command line (read from the main process of O(unit)) has the flag; otherwise unknown.
  returned: when the read did not fail
  type: float
  sample: 4.0
in_flight_by_metric:
  description: Each in-flight count read, by its JSON path (SGLang's C(/v1/loads)) or Prometheus gauge name.
  returned: when the read did not fail
  type: dict
  sample: {"loads[].num_running_reqs": 3.0, "loads[].num_waiting_reqs": 1.0, "front end (sglang:http_requests_active)": 5.0}
in_flight_unknown:
  description: Why the in-flight count is unknown (an error status, no answer, no gauges).
  returned: when in_flight is null
  type: str
  sample: "sglang answered HTTP 404 at /v1/loads"
phase:
  description: The server's phase as M(inference_ops.benchmark_cycle.inference_health) reads it (C(down) for a unit that is not running).
  returned: always
  type: str
  sample: ready
reason:
  description: Why the read failed, or what the load endpoint's answer says; empty when it answered as a ready server does.
  returned: always
  type: str
  sample: ""
ready:
  description: The load endpoint answered as a ready server does.
  returned: always
  type: bool
  sample: true
latency_ms:
  description: Milliseconds the load endpoint's HTTP request took.
  returned: always
  type: float
  sample: 4.2
url:
  description: The base URL read (O(url) without a trailing slash).
  returned: always
  type: str
  sample: "http://127.0.0.1:30001"
stage:
  description: Label of the last progress line in the unit's journal since its start (empty when none).
  returned: when O(unit) is set
  type: str
  sample: ""
stage_line:
  description: The journal line that gave RV(stage), redacted and cut at 240 characters.
  returned: when O(unit) is set
  type: str
  sample: ""
since_start_s:
  description: Seconds since the unit left the inactive state.
  returned: when O(unit) is set and not inactive
  type: float
  sample: 3512.9
profile_note:
  description: Which known version's profile was used for an O(engine_version) that is not one (also a warning).
  returned: when O(engine_version) is not a known version
  type: str
  sample: "sglang 0.5.18 is not a version this profile was read from (0.5.10, 0.5.15, 0.5.16, 0.5.23): using 0.5.16's"
http_status:
  description: HTTP status of the load endpoint, null when no HTTP answer came.
  returned: always
  type: int
  sample: 200
unit_state:
  description: C(systemctl show) of O(unit), as M(inference_ops.benchmark_cycle.inference_health) returns it (its InvocationID names the start drained).
  returned: when O(unit) is set
  type: dict
  sample: {Id: sglang-k26.service, ActiveState: active, SubState: running, NRestarts: 0, ExecMainPID: 48213,
           InvocationID: 6f1c2a9b0e8d4c7fa1b2c3d4e5f60718}
deadline_passed:
  description: The drain's O(deadline) is over.
  returned: when O(deadline) is set
  type: bool
  sample: false
host_time:
  description: The host's clock (seconds since the epoch) when the read ended.
  returned: always
  type: float
  sample: 1796128551.726
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import HttpResult, classify, front_end, in_flight
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_probe import (
    WAIT_SPEC,
    call,
    cut,
    end,
    problem,
    read_unit,
    report,
    start,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_release import SERVER_SPEC

SPEC: dict[str, Any] = dict(SERVER_SPEC, **WAIT_SPEC)


def ask(p: dict[str, Any], prof: dict[str, Any], base: str, timeout: float) -> tuple[HttpResult, HttpResult | None]:
    """The load endpoint's answer and, for an engine whose scheduler count misses its front end, that front end's
    count (its `frontend_gauge` path), read after the scheduler's: a request that left the front end since was counted
    there. A zero must hold (`load_confirm_s`): a request between two of the engine's queues reads as none."""
    answer = call(p, "GET", base + prof["load_path"], timeout)
    if answer.status == 200 and prof.get("load_confirm_s"):
        total, _each = in_flight(answer.body, prof)
        if total == 0:
            time.sleep(prof["load_confirm_s"])
            answer = call(p, "GET", base + prof["load_path"], timeout)
    front = prof.get("frontend_gauge")
    gauges = call(p, "GET", base + front.get("path", prof["metrics_path"]), timeout) if front else None
    return answer, gauges


def judge(p: dict[str, Any], prof: dict[str, Any], answer: HttpResult, unit_state: dict[str, Any] | None,
          jfacts: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The answer judged as health judges it (bc_health.classify), and whether the unit is not running: a server that
    is not running has nothing in flight, a known zero, not unknown."""
    if unit_state is not None and unit_state.get("ActiveState") in ("inactive", "failed"):
        jfacts.pop("journal_failure")
        return {"ready": False, "failed": False, "phase": "down", "http_status": answer.status,
                "latency_ms": round(answer.latency_ms, 1), "reason": "unit %s is %s: nothing in flight"
                % (p["unit"], unit_state.get("ActiveState"))}, True
    return classify(prof, "status", answer, unit_state, p["restarts_baseline"], jfacts.pop("journal_failure"), None), False


def load_fields(p: dict[str, Any], prof: dict[str, Any], answer: HttpResult, not_running: bool,
                gauges: HttpResult | None = None, server: dict[str, Any] | None = None) -> dict[str, Any]:
    """in_flight (and per metric); unknown is not zero: no gauges, an error status or no answer leaves in_flight null,
    with why. Where the engine's scheduler count misses its front end (`frontend_gauge`: answered in `gauges`, believed
    only where the server's main process `server` shows what makes it count), in_flight is the larger of the two (a
    request in the scheduler is in the front end's count too), and a front end that cannot be read leaves it unknown."""
    if not_running:
        total, each = 0.0, {}
    else:
        total, each = in_flight(answer.body, prof) if answer.status == 200 else (None, {})
    out: dict[str, Any] = {"in_flight": total, "in_flight_by_metric": each}
    if total is None:
        out["in_flight_unknown"] = (
            "%s answered %s at %s" % (p["engine"], "HTTP %s" % answer.status if answer.status else answer.error,
                                      prof["load_path"])
            + (" without %s (metrics off?)" % ", ".join(prof.get("load_json") or prof["inflight_metrics"])
               if answer.status == 200 else ""))
    elif gauges is not None and not not_running:
        spec = prof["frontend_gauge"]
        if gauges.status == 200:
            front, why = front_end(gauges.body, prof, server)
        else:
            got = "HTTP %s" % gauges.status if gauges.status else gauges.error
            front, why = None, "%s answered %s" % (spec.get("path", prof["metrics_path"]), got)
        if front is not None:
            each["front end (%s)" % (spec.get("metric") or spec["path"])] = front
            out["in_flight"] = max(total, front)
        else:
            out["in_flight"] = None
            out["in_flight_unknown"] = "the requests in %s's front end are not counted: %s" % (p["engine"], why)
    return out


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    prof, note, base, server = start(module, problem(p))
    answer, gauges = ask(p, prof, base, cut(p["timeout"], p["deadline"]))
    unit_state, jfacts = read_unit(module, prof, read_journal=True)
    result, not_running = judge(p, prof, answer, unit_state, jfacts)
    report(module, result, base, note, unit_state, jfacts)
    if not result["failed"]:
        if server is not None and unit_state is not None and unit_state.get("ExecMainPID") != server["pid"]:
            server = None  # the server was read before a restart: what it ran with says nothing of the one that answered
        result.update(load_fields(p, prof, answer, not_running, gauges, server))
    end(module, result, ("reason", "stage_line", "in_flight_unknown"))


if __name__ == "__main__":
    main()
