#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: one health probe of an inference server (SGLang, llama.cpp, vLLM)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_health
short_description: Probe an inference server once and say where its start-up is
description:
  - Makes one probe of an OpenAI-compatible inference server and, when O(unit) is given, reads
    the systemd unit's state and its journal since the unit started.
  - Returns structured facts on every call, ready or not, so that a task can wait with
    C(until) on C(result.ready) or C(result.phase == 'failed'), with C(retries) and C(delay), as long as a reload takes.
  - Fails only when waiting is pointless - the unit failed, stopped (deactivating with no start job queued), restarted since
    O(restarts_baseline), logged a fatal start-up error, or a ready server gave a wrong answer.
  - O(probe=load) reads the engine's in-flight work, for draining (SGLang's C(/v1/loads) and its HTTP front end's live
    gauge, the others' gauges).
  - What each engine answers while it starts is data (module_utils/bc_engines.py), not code.
version_added: "1.0.0"
options:
  url:
    description: Base URL of the server, scheme, host and port (no path), for example C(http://127.0.0.1:30001).
    type: str
    required: true
  engine:
    description:
      - Which server speaks at O(url); picks endpoints, status meanings, metrics and journal patterns.
      - One of the engines of module_utils/bc_engines.py (C(ENGINES)); another is refused naming them.
    type: str
    default: sglang
  probe:
    description:
      - C(liveness) asks the engine's cheap health endpoint.
      - C(readiness) asks the endpoint that proves the server can serve (SGLang C(/health_generate) runs a 1-token generation;
        vLLM's C(/health) answers 200 with a stalled engine and during its own SIGTERM drain, so a 1-token completion follows it).
      - C(completion) sends O(prompt) to C(/v1/completions) with temperature 0 and checks the answer holds O(expect).
      - C(load) reads running + queued requests (for draining) from the engine's load endpoint, and where the engine's
        count misses its HTTP front end, the front end's own count too (SGLang's C(sglang:http_requests_active), vLLM's
        C(/load), believed only from a server whose main process shows it counts, so give O(unit)).
    type: str
    choices: [liveness, readiness, completion, load]
    default: readiness
  prompt:
    description: Prompt of the completion probe. Only with O(probe=completion).
    type: str
  expect:
    description: Text the completion answer must contain. Only with O(probe=completion). Defaults to C(4) for the default prompt C(2+2=).
    type: str
  max_tokens:
    description: Tokens the completion probe asks for.
    type: int
    default: 4
  model:
    description: Model name sent with the completion probe (the served model name); omitted when empty.
    type: str
    default: ""
  api_key:
    description: Bearer token for servers started with an API key.
    type: str
  api_key_fallbacks:
    description:
      - Keys tried in turn only when the server answers 401 or 403 to O(api_key) - during a key rotation, the keys
        the running server may have started with (the new one applies at its next start).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds one HTTP request may take. For SGLang readiness it must exceed SGLANG_HEALTH_CHECK_TIMEOUT (20 s),
        so values under the engine's minimum are raised to it.
    type: float
    default: 30
  unit:
    description:
      - systemd unit running the server; its state and journal are read on every probe, and its main process's command
        line and environment (what the server really runs with, its health-check timeout and the flags its counts need).
    type: str
  restarts_baseline:
    description: NRestarts of O(unit) when the cycle started it; a larger value is a crash loop and fails the probe.
    type: int
  failures_since:
    description:
      - Epoch seconds on the host's clock; a failure line of the journal counts only from then on (the wait's own
        window), so that a line an earlier phase of the same run logged is not taken for the state now. 0 counts the
        whole run of the unit.
    type: float
    default: 0
  journal_lines:
    description: How many journal lines since the unit's start to scan for progress and failure lines.
    type: int
    default: 400
  validate_certs:
    description: Verify TLS certificates for https URLs.
    type: bool
    default: true
  engine_version:
    description:
      - The engine's version; picks the profile read from that version's sources (module_utils/bc_engines.py
        VERSIONS). A version between known ones takes the older's; an unknown one the nearest's, with a warning.
    type: str
  deadline:
    description:
      - Wall-clock end of the whole wait this probe belongs to (seconds since the epoch, on the host's clock). The
        HTTP request is cut at what is left of it (at least 1 s) and C(deadline_passed) says when it is over, so a
        wait of C(retries) probes ends at the deadline however slowly the server answers.
    type: float
  secrets:
    description: Values removed from every text this module returns (journal lines, errors), besides O(api_key).
    type: list
    elements: str
    default: []
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode: {support: full, description: A probe changes nothing.}
  diff_mode: {support: none, description: Nothing to show as a diff.}
seealso:
  - module: inference_ops.benchmark_cycle.inference_unit
    description: >-
      Starts the unit this module waits on (O(unit)); its C(n_restarts) after the start is
      this module's O(restarts_baseline).
  - module: inference_ops.benchmark_cycle.inference_memory
    description: >-
      Releases and resumes the server's memory in place; probe readiness only after its C(state=resumed), since a
      paused SGLang answers 503 after 20 s. O(probe=load) is what a drain waits on before either.
"""

EXAMPLES = r"""
- name: Wait out a 10-minute SGLang reload
  inference_ops.benchmark_cycle.inference_health:
    url: http://127.0.0.1:30001
    engine: sglang
    unit: sglang-k26-ddtree.service
    restarts_baseline: "{{ nrestarts_at_start }}"
  register: health
  until: health.ready or health.failed
  retries: 180
  delay: 5

- name: Check a real answer
  inference_ops.benchmark_cycle.inference_health:
    url: http://127.0.0.1:8080
    engine: llamacpp
    probe: completion
    prompt: "2+2="
    expect: "4"

- name: In-flight work for a drain
  inference_ops.benchmark_cycle.inference_health:
    url: http://127.0.0.1:30001
    probe: load
    unit: sglang-k26
  register: load
  until: load.in_flight == 0
"""

RETURN = r"""
ready:
  description: The server answered the probe as a ready server does (and correctly, for the completion probe).
  returned: always
  type: bool
  sample: false
phase:
  description:
    - One of C(down), C(loading), C(warming), C(ready), C(failed), or C(restarting) (the unit is deactivating or inactive
      with a start or restart job queued - the first half of a restart, or a start systemd has not run yet, which readiness
      waits out), C(stopping) (the server refuses new work in its own shutdown drain, vLLM's) or C(busy) (a completion
      refused for load, vLLM's 503).
  returned: always
  type: str
  sample: warming
reason:
  description: Why the probe is not ready, or why it failed (then also the task's C(msg)); empty when ready.
  returned: always
  type: str
  sample: HTTP 503
http_status:
  description: HTTP status of the probe, null when no HTTP answer came (refused, timed out).
  returned: always
  type: int
  sample: 503
latency_ms:
  description: Milliseconds the probe's HTTP request took.
  returned: always
  type: float
  sample: 27.4
url:
  description: The base URL probed (O(url) without a trailing slash).
  returned: always
  type: str
  sample: "http://127.0.0.1:30001"
unit_state:
  description:
    - C(systemctl show) of O(unit) - Id, ActiveState, SubState, NRestarts, ExecMainStatus, ExecMainPID,
      InactiveExitTimestampMonotonic, ActiveEnterTimestampMonotonic, InvocationID, LoadState (numbers as integers);
      while it is deactivating or inactive also JobType, the type of the job systemd holds for it (C(systemctl list-jobs)),
      empty for none.
  returned: when O(unit) is set
  type: dict
  sample:
    Id: sglang-k26-ddtree.service
    LoadState: loaded
    ActiveState: active
    SubState: running
    NRestarts: 0
    ExecMainStatus: 0
    ExecMainPID: 48213
    InactiveExitTimestampMonotonic: 432187604512
    ActiveEnterTimestampMonotonic: 432187611087
    InvocationID: 6f1c2a9b0e8d4c7fa1b2c3d4e5f60718
since_start_s:
  description: Seconds since the unit left the inactive state, i.e. since its start began (the reload time so far).
  returned: when O(unit) is set and not inactive
  type: float
  sample: 212.4
stage:
  description: Label of the last progress line in the unit's journal since its start (empty when none, or when the probe answered 200).
  returned: when O(unit) is set
  type: str
  sample: Capture target decode CUDA graph
stage_line:
  description: The journal line that gave RV(stage), redacted and cut at 240 characters.
  returned: when O(unit) is set
  type: str
  sample: >-
    [2026-12-01 10:01:57] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1,
    bs=[1, 2, 4, 8], avail mem=96.19 GB
answer:
  description: Text of the completion answer (null when the answer had no C(choices[0].text)).
  returned: when O(probe=completion) (or a readiness probe that generates, vLLM's) and the server answered with a ready status
  type: str
  sample: "4444"
in_flight:
  description:
    - Running + queued requests; null when unknown (metrics off, an error status, a timeout) - unknown is not zero.
    - For SGLang, the larger of the scheduler's count (C(/v1/loads)) and the requests its HTTP front end holds
      (C(sglang:http_requests_active) less health checks, scrapes and control calls), since C(/v1/loads) never counts
      the front end, and from 0.5.16 it is a snapshot; without that gauge (metrics off) the count is unknown.
    - For vLLM, the larger of the engine's gauges (its last report, so a stalled engine's read 0) and its API server's
      own count (C(/load), with C(--enable-server-load-tracking)), believed only from one API server process whose
      command line (read from the main process of O(unit)) has the flag; otherwise unknown.
  returned: when O(probe=load) and the probe did not fail
  type: float
  sample: 4.0
in_flight_by_metric:
  description: Each in-flight count read, by its JSON path (SGLang's C(/v1/loads)) or Prometheus gauge name.
  returned: when O(probe=load) and the probe did not fail
  type: dict
  sample: {"loads[].num_running_reqs": 3.0, "loads[].num_waiting_reqs": 1.0, "front end (sglang:http_requests_active)": 5.0}
in_flight_unknown:
  description: Why the in-flight count is unknown (an error status, no answer, no gauges).
  returned: when O(probe=load) and in_flight is null
  type: str
  sample: "sglang answered HTTP 404 at /v1/loads"
deadline_passed:
  description: The wait's O(deadline) is over (the probe's own phase is kept, e.g. still C(warming)).
  returned: when O(deadline) is set
  type: bool
  sample: false
profile_note:
  description: Which known version's profile was used for an O(engine_version) that is not one (also a warning).
  returned: when O(engine_version) is not a known version
  type: str
  sample: "sglang 0.5.18 is not a version this profile was read from (0.5.10, 0.5.15, 0.5.16, 0.5.23): using 0.5.16's"
host_time:
  description: The host's clock (seconds since the epoch) when the probe ended.
  returned: always
  type: float
  sample: 1796128551.726
probe_ms:
  description: Time the module spent on this probe (HTTP call, systemctl, journal), without interpreter start-up.
  returned: always
  type: float
  sample: 41.8
startup_phases:
  description:
    - Seconds of each of SGLang's own start-up phases from C(sglang:startup_time_seconds) (C(total) for the gauge without a
      phase label), read from C(/metrics) once ready.
  returned: when ready, the engine profile has start-up metrics (SGLang 0.5.23 and later) and C(/metrics) answers
  type: dict
  sample: {load_weights: 219.3, cuda_graph: 95.5}
"""

import time
from typing import Any
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve, with_health_timeout
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import (
    UNIT_PROPERTIES,
    HttpResult,
    classify,
    front_end,
    in_flight,
    journal_stage,
    queued_job,
    request,
    startup_phases,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    CommandError,
    check_timeout,
    main_process,
    redact,
    unit_show,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run

DEFAULT_PROMPT = "2+2="
DEFAULT_EXPECT = "4"


def http(module: AnsibleModule, method: str, url: str, timeout: float, payload: dict[str, Any] | None = None) -> HttpResult:
    keys = [module.params["api_key"] or "", *module.params["api_key_fallbacks"]]
    return request(method, url, timeout, payload, keys, module.params["validate_certs"])


def unit_facts(module: AnsibleModule, unit: str, engine: str | dict[str, Any], lines: int,
               read_journal: bool, failures_since: float = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """(unit_state, journal facts) of the unit, read with argument lists (no shell). The journal
    is read only while the server is not ready: a ready probe needs no stage and costs less."""
    try:
        state = unit_show(unit, ("Id", *UNIT_PROPERTIES), 15, numbers=True)
    except CommandError as exc:
        module.fail_json(msg=str(exc))
    if state.get("ActiveState") in ("deactivating", "inactive"):  # a restart's first half, or a start queued: the job says
        try:
            service = unit if unit.endswith(".service") else unit + ".service"  # list-jobs matches full names
            rc, out, _err = host_run(["systemctl", "list-jobs", "--no-legend", "--no-pager", "--", service], 15)
        except CommandError as exc:
            module.fail_json(msg=str(exc))
        state["JobType"] = queued_job(out, service) if rc == 0 else ""
    facts: dict[str, Any] = {"stage": "", "stage_line": "", "journal_failure": ""}
    start_us = state.get("InactiveExitTimestampMonotonic")  # the start job began (ExecStartPre included)
    if isinstance(start_us, int) and start_us > 0 and state.get("ActiveState") != "inactive":
        facts["since_start_s"] = round(time.clock_gettime(time.CLOCK_MONOTONIC) - start_us / 1e6, 1)
    invocation = state.get("InvocationID")
    if invocation and read_journal:
        cmd = ["journalctl", "--no-pager", "-o", "short-unix", "-n", str(lines), "_SYSTEMD_INVOCATION_ID=%s" % invocation]
        try:
            rc, out, _err = host_run(cmd, 15)
        except CommandError:
            rc, out = 1, ""  # the journal is a hint; the unit state above is the verdict
        if rc == 0:
            stage, stage_line, failure = journal_stage(out.splitlines(), engine, failures_since)
            facts.update(stage=stage, stage_line=stage_line, journal_failure=failure)
    return state, facts


def validate(module: AnsibleModule) -> None:
    p = module.params
    try:
        parts = urlsplit(p["url"])
        _port = parts.port
        host = parts.hostname
    except ValueError as err:
        module.fail_json(msg="url %r has an invalid port or address (%s); give e.g. http://127.0.0.1:30001 or http://[::1]:30001"
                         % (p["url"], err))
    if parts.scheme not in ("http", "https") or not host:
        module.fail_json(msg="url %r is not an http(s) URL with a host; give e.g. http://127.0.0.1:30001" % p["url"])
    if parts.path not in ("", "/"):
        module.fail_json(msg="url %r has a path; give the base URL only, the engine profile adds the endpoint" % p["url"])
    try:
        check_timeout(p["timeout"], "timeout", 3600)
        if p["deadline"] is not None:
            check_timeout(p["deadline"], "deadline", 1e11)
    except ValueError as err:
        module.fail_json(msg=str(err))
    if p["max_tokens"] < 1:
        module.fail_json(msg="max_tokens must be >= 1, got %d" % p["max_tokens"])
    if p["probe"] != "completion" and (p["prompt"] is not None or p["expect"] is not None):
        module.fail_json(msg="prompt/expect apply to probe=completion only (probe is %s)" % p["probe"])
    if p["journal_lines"] < 1:
        module.fail_json(msg="journal_lines must be >= 1, got %d" % p["journal_lines"])


SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True},
    "engine": {"type": "str", "default": "sglang"},  # checked against ENGINES once, by bc_engines.resolve
    "probe": {"type": "str", "default": "readiness", "choices": ["liveness", "readiness", "completion", "load"]},
    "prompt": {"type": "str"},
    "expect": {"type": "str"},
    "max_tokens": {"type": "int", "default": 4, "no_log": False},
    "model": {"type": "str", "default": ""},
    "api_key": {"type": "str", "no_log": True},
    "api_key_fallbacks": {"type": "list", "elements": "str", "no_log": True, "default": []},
    "timeout": {"type": "float", "default": 30},
    "unit": {"type": "str"},
    "restarts_baseline": {"type": "int"},
    "journal_lines": {"type": "int", "default": 400},
    "failures_since": {"type": "float", "default": 0},
    "validate_certs": {"type": "bool", "default": True},
    "deadline": {"type": "float"},
    "engine_version": {"type": "str"},
    "secrets": {"type": "list", "elements": "str", "default": [], "no_log": True},
}


def ask(module: AnsibleModule, prof: dict[str, Any], base: str, timeout: float
        ) -> tuple[HttpResult, str | None, HttpResult | None, str]:
    """The probe's HTTP exchange, the answer a completion must contain (None for the others), for a load probe
    of an engine whose scheduler count misses its front end that front end's count (its `frontend_gauge` path),
    and how the exchange is judged ("completion" or "status"). A readiness probe of an engine whose liveness
    answers 200 whatever its engine does (`readiness_generates`) is a 1-token completion once that answers 200."""
    p = module.params
    if p["probe"] == "completion":
        prompt = DEFAULT_PROMPT if p["prompt"] is None else p["prompt"]
        expect = DEFAULT_EXPECT if p["expect"] is None and p["prompt"] is None else p["expect"]
        return complete(module, prof, base, timeout, prompt, p["max_tokens"]), expect, None, "completion"
    if p["probe"] == "load":
        answer = http(module, "GET", base + prof["load_path"], timeout)
        if answer.status == 200 and prof.get("load_confirm_s"):
            total, _each = in_flight(answer.body, prof)
            if total == 0:  # a zero must hold: a request between two of the engine's queues reads as none
                time.sleep(prof["load_confirm_s"])
                answer = http(module, "GET", base + prof["load_path"], timeout)
        # read after the scheduler's count: a request that left the front end since was counted there
        front = prof.get("frontend_gauge")
        gauges = http(module, "GET", base + front.get("path", prof["metrics_path"]), timeout) if front else None
        return answer, None, gauges, "status"
    path = prof["readiness_path"] if p["probe"] == "readiness" else prof["liveness_path"]
    answer = http(module, "GET", base + path, timeout)
    if p["probe"] == "readiness" and prof.get("readiness_generates") and answer.status == 200:
        if p["deadline"] is not None:  # the wait overruns its deadline by at most one request's time, both included
            timeout = max(1.0, min(timeout, p["deadline"] - time.time()))
        return complete(module, prof, base, timeout, DEFAULT_PROMPT, 1), None, None, "completion"
    return answer, None, None, "status"


def complete(module: AnsibleModule, prof: dict[str, Any], base: str, timeout: float, prompt: str,
             max_tokens: int) -> HttpResult:
    payload: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if module.params["model"]:
        payload["model"] = module.params["model"]
    return http(module, "POST", base + prof["completion_path"], timeout, payload)


def judge(p: dict[str, Any], prof: dict[str, Any], answer: HttpResult, unit_state: dict[str, Any] | None,
          jfacts: dict[str, Any], expect: str | None, kind: str = "status") -> tuple[dict[str, Any], bool]:
    """The result of the exchange (bc_health.classify), and whether the unit is not running. A load
    probe of a server that is not running has nothing in flight: a known zero, not unknown."""
    not_running = p["probe"] == "load" and unit_state is not None and unit_state.get("ActiveState") in ("inactive", "failed")
    if not_running:
        jfacts.pop("journal_failure")
        return {"ready": False, "failed": False, "phase": "down", "http_status": answer.status,
                "latency_ms": round(answer.latency_ms, 1), "reason": "unit %s is %s: nothing in flight"
                % (p["unit"], unit_state.get("ActiveState"))}, True  # type: ignore[union-attr]
    return classify(prof, kind, answer,
                    unit_state, p["restarts_baseline"], jfacts.pop("journal_failure"), expect), False


def load_fields(p: dict[str, Any], prof: dict[str, Any], answer: HttpResult, not_running: bool,
                gauges: HttpResult | None = None, server: dict[str, Any] | None = None) -> dict[str, Any]:
    """in_flight (and per metric) of a load probe; unknown is not zero: no gauges, an error status or
    no answer leaves in_flight null, with why. Where the engine's scheduler count misses its front end
    (`frontend_gauge`: answered in `gauges`, believed only where the server's main process `server` shows what
    makes it count), in_flight is the larger of the two (a request in the scheduler is in the front end's count
    too), and a front end that cannot be read leaves it unknown."""
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
    validate(module)
    p = module.params
    try:
        prof, profile_note = resolve(p["engine"], p["engine_version"])
    except ValueError as err:
        module.fail_json(msg=str(err))
    base = p["url"].rstrip("/")
    # what the server really runs with (its main process), read once: its health-check timeout and its flags
    server = main_process(p["unit"]) if p["unit"] else None
    prof = with_health_timeout(prof, server["environ"] if server else None)
    timeout = max(p["timeout"], prof["min_timeout_s"]) if p["probe"] == "readiness" else p["timeout"]
    if p["deadline"] is not None:  # the wait overruns its deadline by at most this one request
        timeout = max(1.0, min(timeout, p["deadline"] - time.time()))
    started = time.monotonic()
    answer, expect, gauges, kind = ask(module, prof, base, timeout)
    unit_state, jfacts = (None, {"journal_failure": ""})
    if p["unit"]:
        unit_state, jfacts = unit_facts(module, p["unit"], prof, p["journal_lines"],
                                        read_journal=answer.status != 200 or p["probe"] == "load",
                                        failures_since=p["failures_since"])
    result, not_running = judge(p, prof, answer, unit_state, jfacts, expect, kind)
    result.update(changed=False, url=base, host_time=round(time.time(), 3))
    if profile_note:
        result["profile_note"] = profile_note
        module.warn(profile_note)
    if p["deadline"] is not None:
        result["deadline_passed"] = time.time() >= p["deadline"]
    result["probe_ms"] = round((time.monotonic() - started) * 1000, 1)
    if unit_state is not None:
        result.update(jfacts, unit_state=unit_state)
    if p["probe"] == "load" and not result["failed"]:
        if server is not None and unit_state is not None and unit_state.get("ExecMainPID") != server["pid"]:
            server = None  # the server was read before a restart: what it ran with says nothing of the one that answered
        result.update(load_fields(p, prof, answer, not_running, gauges, server))
    elif result["ready"] and prof["startup_metrics"]:
        metrics = http(module, "GET", base + prof["metrics_path"], min(timeout, 5))
        if metrics.status == 200:
            result["startup_phases"] = startup_phases(metrics.body, prof)
    secrets = [s for s in [p["api_key"], *p["api_key_fallbacks"], *p["secrets"]] if s]
    for key in ("reason", "stage_line", "in_flight_unknown"):
        if isinstance(result.get(key), str):
            result[key] = redact(result[key], secrets)
    if result["failed"]:
        module.fail_json(msg=result["reason"], **{k: v for k, v in result.items() if k != "failed"})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
