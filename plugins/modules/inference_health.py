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
  - How much work the server holds (for a drain) is M(inference_ops.benchmark_cycle.inference_load_info)'s question.
  - What each engine answers while it starts is data (module_utils/bc_engines.py), not code.
version_added: "1.0.0"
extends_documentation_fragment: [inference_ops.benchmark_cycle.inference_wait]
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
    type: str
    choices: [liveness, readiness, completion]
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
  validate_certs:
    description: Verify TLS certificates for https URLs.
    type: bool
    default: true
  engine_version:
    description:
      - The engine's version; picks the profile read from that version's sources (module_utils/bc_engines.py
        VERSIONS). A version between known ones takes the older's; an unknown one the nearest's, with a warning.
    type: str
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
      paused SGLang answers 503 after 20 s.
  - module: inference_ops.benchmark_cycle.inference_load_info
    description: The in-flight work a drain waits on before the stop or the release.
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import HttpResult, classify, startup_phases
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

DEFAULT_PROMPT = "2+2="
DEFAULT_EXPECT = "4"

SPEC: dict[str, Any] = dict(
    SERVER_SPEC, **WAIT_SPEC,
    probe={"type": "str", "default": "readiness", "choices": ["liveness", "readiness", "completion"]},
    prompt={"type": "str"},
    expect={"type": "str"},
    max_tokens={"type": "int", "default": 4, "no_log": False},
    model={"type": "str", "default": ""},
)


def validate(p: dict[str, Any]) -> str:
    bad = problem(p)
    if bad:
        return bad
    if p["max_tokens"] < 1:
        return "max_tokens must be >= 1, got %d" % p["max_tokens"]
    if p["probe"] != "completion" and (p["prompt"] is not None or p["expect"] is not None):
        return "prompt/expect apply to probe=completion only (probe is %s)" % p["probe"]
    return ""


def ask(p: dict[str, Any], prof: dict[str, Any], base: str, timeout: float) -> tuple[HttpResult, str | None, str]:
    """The probe's HTTP exchange, the answer a completion must contain (None for the others), and how the exchange is
    judged ("completion" or "status"). A readiness probe of an engine whose liveness answers 200 whatever its engine
    does (`readiness_generates`) is a 1-token completion once that answers 200."""
    if p["probe"] == "completion":
        prompt = DEFAULT_PROMPT if p["prompt"] is None else p["prompt"]
        expect = DEFAULT_EXPECT if p["expect"] is None and p["prompt"] is None else p["expect"]
        return complete(p, prof, base, timeout, prompt, p["max_tokens"]), expect, "completion"
    path = prof["readiness_path"] if p["probe"] == "readiness" else prof["liveness_path"]
    answer = call(p, "GET", base + path, timeout)
    if p["probe"] == "readiness" and prof.get("readiness_generates") and answer.status == 200:
        return complete(p, prof, base, cut(timeout, p["deadline"]), DEFAULT_PROMPT, 1), None, "completion"
    return answer, None, "status"


def complete(p: dict[str, Any], prof: dict[str, Any], base: str, timeout: float, prompt: str,
             max_tokens: int) -> HttpResult:
    payload: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    if p["model"]:
        payload["model"] = p["model"]
    return call(p, "POST", base + prof["completion_path"], timeout, payload)


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    prof, note, base, _server = start(module, validate(p))
    timeout = cut(max(p["timeout"], prof["min_timeout_s"]) if p["probe"] == "readiness" else p["timeout"], p["deadline"])
    started = time.monotonic()
    answer, expect, kind = ask(p, prof, base, timeout)
    unit_state, jfacts = read_unit(module, prof, read_journal=answer.status != 200)
    result = classify(prof, kind, answer, unit_state, p["restarts_baseline"], jfacts.pop("journal_failure"), expect)
    report(module, result, base, note, unit_state, jfacts)
    result["probe_ms"] = round((time.monotonic() - started) * 1000, 1)
    if result["ready"] and prof["startup_metrics"]:
        metrics = call(p, "GET", base + prof["metrics_path"], min(timeout, 5))
        if metrics.status == 200:
            result["startup_phases"] = startup_phases(metrics.body, prof)
    end(module, result, ("reason", "stage_line"))


if __name__ == "__main__":
    main()
