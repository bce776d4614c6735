#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Free an inference server's GPU memory in place, and give it back, without a restart."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_memory
short_description: Release an inference server's KV cache in place for a benchmark, and resume it
description:
  - O(state=info) asks the live server whether it can release its memory (SGLang started with
    C(--enable-memory-saver), read from C(/server_info)) and how much that frees per GPU (its KV cache). Read-only.
  - O(state=released) pauses generation (new requests are held by the server, what still runs is
    aborted), proves the scheduler idle, releases the KV cache, then measures with C(nvidia-smi) that
    O(need_mib) MiB are free on O(device). When they are not, it resumes and continues at once and
    returns RV(fell_back), and the caller then stops the service instead. A failure before the release
    answered leaves the server serving; RV(server_state) always says what the server is left as.
  - O(state=resumed) resumes what was released and lets generation continue. Call it only after a
    release that succeeded, and once, since a second resume kills an SGLang server (a KeyError in its scheduler).
  - The engine's endpoints and payloads are data (module_utils/bc_engines.py, C(release)).
version_added: "1.0.0"
author: benchmark-cycle contributors
attributes:
  check_mode:
    support: full
    description: O(state=info) runs; the other states report what they would do and call nothing.
  diff_mode:
    support: none
options:
  url: {description: Base URL of the server., type: str, required: true}
  engine: {description: Engine profile., type: str, default: sglang, choices: [sglang, llamacpp, vllm]}
  engine_version: {description: Engine version (the profile is chosen by it)., type: str}
  state: {description: What to do., type: str, default: info, choices: [info, released, resumed]}
  api_key: {description: Bearer key of the server., type: str}
  api_key_fallbacks:
    description: Keys tried in turn only on a 401 or 403 to O(api_key) (a rotation - the keys the running server may have started with).
    type: list
    elements: str
    default: []
  validate_certs: {description: Verify TLS certificates., type: bool, default: true}
  timeout: {description: Seconds each HTTP request may take., type: float, default: 30}
  need_mib:
    description: With O(state=released), the MiB that must be free on O(device) after the release (the sweep's need).
    type: int
    default: 0
  device: {description: The GPU the sweep runs on., type: int, default: 0}
  expect_mib:
    description:
      - With O(state=resumed), the MiB the release freed on O(device) (its RV(freed_mib)). The resume is believed only
        once the server has taken at least half of it back (read from nvidia-smi within O(gpu_wait_s)); a resume
        that answers 200 and gives nothing back fails with RV(server_state=unknown), and the caller restarts it.
      - 0 checks nothing (no release was measured).
    type: int
    default: 0
  gpu_wait_s: {description: Seconds to wait for the freed memory to show in nvidia-smi., type: float, default: 10}
  idle_wait_s: {description: Seconds to wait for the scheduler to be idle after the pause., type: float, default: 10}
  command_timeout: {description: Seconds each nvidia-smi call may take., type: float, default: 30}
seealso:
  - module: inference_unit
    description: >-
      Stops the service instead when the release falls back (RV(fell_back)) or the server cannot release
      (RV(supported) false), and restarts one left C(unknown).
  - module: inference_health
    description: >-
      Its C(probe=load) drains the server before the release; probe readiness only after O(state=resumed), since a
      paused SGLang answers 503.
  - module: marlin_sweep
    description: >-
      The sweep the memory is freed for - its preflight's C(need_mib) is this module's O(need_mib) and its
      C(device) this O(device).
  - module: host_lock
    description: >-
      The cycle records the release in its lock, so that a cycle taking over a dead holder's lock resumes or
      restarts the server.
notes:
  - Without the memory saver an SGLang release answers 200 and frees nothing; the memory is always measured.
  - While paused, SGLang's C(/health) and C(/health_generate) wait 20 s and answer 503; probe only after O(state=resumed).
"""

EXAMPLES = r"""
- name: Can this server release its KV cache, and how much would that free?
  inference_memory:
    url: http://127.0.0.1:30001
    engine: sglang
    state: info
  register: release_info

- name: Release it for the sweep (or fall back, resumed, when too little is freed)
  inference_memory:
    url: http://127.0.0.1:30001
    state: released
    need_mib: 9900
    device: 0
  register: released

- name: Give it back
  inference_memory:
    url: http://127.0.0.1:30001
    state: resumed
  when: released.released
"""

RETURN = r"""
supported:
  description: The server can release its memory (its profile has a release and the live server says the saver is on).
  returned: state=info
  type: bool
  sample: true
saver_on:
  description: The server runs with the memory saver (null when the engine does not say, or did not answer).
  returned: state=info
  type: bool
  sample: true
releasable_gib:
  description: What a release frees per GPU by the server's own account, the smallest rank's KV cache (null when it does not say).
  returned: state=info
  type: float
  sample: 127.94
setting:
  description: The engine setting that turns the saver on (null for an engine that cannot release).
  returned: state=info
  type: str
  sample: enable_memory_saver
why:
  description: Why the server cannot release (state=info; empty when it can), or why a release fell back.
  returned: state=info, or state=released when it fell back
  type: str
  sample: ""
released:
  description: The memory is released now, and the server paused; the caller must resume it (in check mode, would be).
  returned: state=released (and in check mode, state=resumed)
  type: bool
  sample: true
fell_back:
  description: Too little was freed, so it was resumed at once; the caller stops the service instead.
  returned: state=released (and in check mode, state=resumed)
  type: bool
  sample: false
server_state:
  description: What the server is left as, also on failure; serving, released (paused and released) or unknown (restart it).
  returned: except state=info
  type: str
  sample: released
need_mib:
  description: MiB needed free on the device (O(need_mib)).
  returned: state=released, except in check mode
  type: int
  sample: 10465
free_mib_before:
  description: Free MiB on the device before the release, or before the resume with O(expect_mib) (null without nvidia-smi).
  returned: state=released or resumed, except in check mode
  type: int
  sample: 6037
free_mib_after:
  description: Free MiB on the device after it, polled for up to O(gpu_wait_s) (null without nvidia-smi).
  returned: state=released, or resumed with O(expect_mib), except in check mode
  type: int
  sample: 138547
taken_mib:
  description: With O(state=resumed) and O(expect_mib), the MiB the server took back on the device after the resume, measured.
  returned: state=resumed, except in check mode
  type: int
  sample: 131870
expect_mib:
  description: With O(state=resumed), what the release had freed (O(expect_mib)); 0 when nothing was checked.
  returned: state=resumed, except in check mode
  type: int
  sample: 132510
freed_mib:
  description: What the release freed on the device, measured (null without nvidia-smi).
  returned: state=released, except in check mode
  type: int
  sample: 132510
gpu_checked:
  description: nvidia-smi measured the memory.
  returned: state=released, except in check mode
  type: bool
  sample: true
steps:
  description:
    - Each HTTP step (pause, release, resume, continue) with its path, status, milliseconds and error; empty in check mode.
  returned: except state=info, also on failure
  type: list
  elements: dict
  sample:
    - {step: pause, path: /pause_generation, http_status: 200, ms: 36.7, error: ""}
    - {step: release, path: /release_memory_occupation, http_status: 200, ms: 103.6, error: ""}
msg:
  description: What check mode would do.
  returned: in check mode, except state=info
  type: str
  sample: "check mode: would release http://127.0.0.1:30001"
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bc_engines import resolve
from ansible.module_utils.bc_health import HttpResult, request
from ansible.module_utils.bc_host import CommandError, check_timeout, redact
from ansible.module_utils.bc_host import gpus as host_gpus
from ansible.module_utils.bc_release import Release, ReleaseError, support


def free_mib(module: AnsibleModule, smi: str | None) -> int | None:
    """Free MiB on the module's device, None without nvidia-smi; a hung nvidia-smi or a device that is
    not listed is a CommandError."""
    if not smi:
        return None
    found = {g["index"]: g for g in host_gpus(smi, module.params["command_timeout"])}
    if module.params["device"] not in found:
        raise CommandError("device %d is not present: nvidia-smi lists GPU(s) %s" % (
            module.params["device"], ", ".join(map(str, sorted(found))) or "none"))
    return found[module.params["device"]]["free_mib"]


def released(module: AnsibleModule, rel: Release, smi: str | None) -> dict[str, Any]:
    """Release, measure, and resume at once when too little was freed (or the GPU cannot be read)."""
    p = module.params
    try:
        before = free_mib(module, smi)
    except CommandError as err:
        raise ReleaseError("before the release: %s; nothing was released" % err, "serving") from None
    rel.release(p["idle_wait_s"])
    try:
        after, deadline = free_mib(module, smi), time.monotonic() + p["gpu_wait_s"]
        while after is not None and after < p["need_mib"] and time.monotonic() < deadline:
            time.sleep(0.5)
            after = free_mib(module, smi)
    except CommandError as err:
        rel.resume()  # the freed memory cannot be proven: serve again (a failed resume raises, state unknown)
        raise ReleaseError("after the release: %s; resumed, generation continues" % err, "serving") from None
    enough = after is None or after >= p["need_mib"]
    out = {"released": enough, "fell_back": not enough, "server_state": "released" if enough else "serving",
           "need_mib": p["need_mib"], "free_mib_before": before, "free_mib_after": after, "gpu_checked": smi is not None,
           "freed_mib": None if after is None or before is None else after - before}
    if not enough:
        rel.resume()  # too little freed: back to serving now, and the caller stops it instead
        out["why"] = ("the release freed %s MiB on GPU %d and %d MiB are needed (%d free): resumed; the service is "
                      "stopped instead" % (out["freed_mib"], p["device"], p["need_mib"], after or 0))
        module.warn(out["why"])
    return out


def resumed(module: AnsibleModule, rel: Release, smi: str | None) -> dict[str, Any]:
    """Resume, then read back what the server took: a resume is believed by the memory it gave back
    (at least half of what the release freed), never by its 200 alone."""
    p = module.params
    expect = p["expect_mib"]
    try:
        before = free_mib(module, smi) if expect > 0 else None
    except CommandError:
        before = None
    rel.resume()
    out: dict[str, Any] = {"server_state": "serving", "expect_mib": expect, "free_mib_before": before, "taken_mib": None}
    if expect <= 0:
        return out
    if before is None:
        raise ReleaseError("the resume answered, but GPU %d's memory cannot be read (%s): what it gave back is unknown"
                           % (p["device"], "no nvidia-smi" if smi is None else "nvidia-smi failed"), "unknown")
    deadline = time.monotonic() + p["gpu_wait_s"]
    try:
        after = free_mib(module, smi)
        while after is not None and before - after < expect / 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            after = free_mib(module, smi)
    except CommandError as err:
        raise ReleaseError("after the resume: %s; what it gave back is unknown" % err, "unknown") from None
    out.update(free_mib_after=after, taken_mib=None if after is None else before - after)
    if after is None or before - after < expect / 2:
        raise ReleaseError("the resume answered 200 but the server took back %s MiB on GPU %d of the %d MiB the release "
                           "freed: its memory did not come back" % (out["taken_mib"], p["device"], expect), "unknown")
    return out


SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True},
    "engine": {"type": "str", "default": "sglang", "choices": ["sglang", "llamacpp", "vllm"]},
    "engine_version": {"type": "str"},
    "state": {"type": "str", "default": "info", "choices": ["info", "released", "resumed"]},
    "api_key": {"type": "str", "no_log": True},
    "api_key_fallbacks": {"type": "list", "elements": "str", "no_log": True, "default": []},
    "validate_certs": {"type": "bool", "default": True},
    "timeout": {"type": "float", "default": 30},
    "need_mib": {"type": "int", "default": 0},
    "device": {"type": "int", "default": 0},
    "expect_mib": {"type": "int", "default": 0},
    "gpu_wait_s": {"type": "float", "default": 10},
    "idle_wait_s": {"type": "float", "default": 10},
    "command_timeout": {"type": "float", "default": 30},
}


def checked(p: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The engine's profile and its version note, once every parameter is sound (a ValueError naming it)."""
    for key in ("timeout", "command_timeout"):
        check_timeout(p[key], key, 3600)
    for key in ("gpu_wait_s", "idle_wait_s"):
        if p[key] < 0 or p[key] > 3600:
            raise ValueError("%s must be 0-3600 seconds, got %r" % (key, p[key]))
    for key in ("need_mib", "device", "expect_mib"):
        if p[key] < 0:
            raise ValueError("%s must be >= 0, got %d" % (key, p[key]))
    return resolve(p["engine"], p["engine_version"])


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    try:
        prof, note = checked(p)
    except ValueError as err:
        module.fail_json(msg=str(err))
    if note:
        module.warn(note)
    base = p["url"].rstrip("/")

    def http(method: str, path: str, payload: dict[str, Any] | None, timeout: float) -> HttpResult:
        return request(method, base + path, timeout, payload, [p["api_key"] or "", *p["api_key_fallbacks"]], p["validate_certs"])

    if p["state"] == "info":
        rel_spec = prof.get("release")
        answer = http("GET", rel_spec["info_path"], None, p["timeout"]) if rel_spec else None
        result = support(prof, p["engine"], answer)
        result["why"] = redact(result["why"], [p["api_key"] or "", *p["api_key_fallbacks"]])
        module.exit_json(changed=False, **result)
    if module.check_mode:  # what would be: released (and the caller resumes it), or serving again
        module.exit_json(changed=True, server_state="released" if p["state"] == "released" else "serving", steps=[],
                         released=p["state"] == "released", fell_back=False,
                         msg="check mode: would %s %s" % ("release" if p["state"] == "released" else "resume", base))
    try:
        rel = Release(prof, p["engine"], http, p["timeout"])
    except ReleaseError as err:
        module.fail_json(msg="%s: %s" % (base, err), server_state=err.state, steps=[])
    try:
        if p["state"] == "released":
            result = released(module, rel, module.get_bin_path("nvidia-smi"))
        else:
            result = resumed(module, rel, module.get_bin_path("nvidia-smi"))
    except ReleaseError as err:
        module.fail_json(msg="%s: %s" % (base, redact(str(err), [p["api_key"] or "", *p["api_key_fallbacks"]])), server_state=err.state,
                         steps=rel.steps)
    module.exit_json(changed=True, steps=rel.steps, **result)


if __name__ == "__main__":
    main()
