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
  - Whether the server can release, and how much that frees, is M(inference_ops.benchmark_cycle.inference_memory_info)'s to ask.
  - O(state=released) pauses generation (new requests are held by the server, what still runs is
    aborted), proves the scheduler idle, releases the KV cache, then measures with C(nvidia-smi) that
    O(need_mib) MiB are free on O(device). When they are not, it resumes and continues at once and
    returns RV(fell_back), and the caller then stops the service instead. A failure before the release
    answered leaves the server serving; RV(server_state) always says what the server is left as.
  - O(state=resumed) resumes what was released and lets generation continue. Call it only after a
    release that succeeded, and once, since a second resume kills an SGLang server (a KeyError in its scheduler).
  - The engine's endpoints and payloads are data (module_utils/bc_engines.py, C(release)).
version_added: "1.0.0"
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat, inference_ops.benchmark_cycle.inference_server]
author: benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode:
    support: full
    description: Reports what it would do and calls nothing.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  state: {description: What to do., type: str, required: true, choices: [released, resumed]}
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
  tags:
    description:
      - What the release and the resume take (SGLang's C(kv_cache), C(weights), C(cuda_graph)); omitted, the KV cache
        alone (the profile's release). Another set only where the engine has a whole release that knows each tag
        (M(inference_ops.benchmark_cycle.inference_memory_info)'s RV(inference_ops.benchmark_cycle.inference_memory_info#module:whole.tags)).
    type: list
    elements: str
  move_timeout:
    description:
      - Seconds the release and the resume may each take when they copy the weights to host memory and back
        (RV(inference_ops.benchmark_cycle.inference_memory_info#module:whole.timeout_s)), and the weights checksum; at least O(timeout).
    type: float
    default: 0
  identity:
    description:
      - Prove the server that resumes is the one released (a whole release). With O(state=released), its weights'
        checksum per rank, a fixed prompt's top-k logprobs and the answer to O(prompt) are read before the pause
        (RV(identity_before)); any of them unreadable and nothing is released (RV(fell_back), and the caller stops it).
      - With O(state=resumed), the same are read after the resume and compared with O(identity_before)
        (module_utils/bc_identity.py); a mismatch or an unknown fails with RV(server_state=unknown), and the caller
        restarts it (a real reload), never back in the router on faith.
    type: bool
    default: false
  identity_before:
    description: With O(state=resumed) and O(identity), the release's RV(identity_before).
    type: dict
  prompt:
    description: With O(identity), the known-answer prompt (the readiness's).
    type: str
    default: 2+2=
  model:
    description: With O(identity), the served model name; omitted when empty.
    type: str
    default: ""
  gpu_wait_s: {description: Seconds to wait for the freed memory to show in nvidia-smi., type: float, default: 10}
  idle_wait_s: {description: Seconds to wait for the scheduler to be idle after the pause., type: float, default: 10}
  command_timeout: {description: Seconds each nvidia-smi call may take., type: float, default: 30}
seealso:
  - module: inference_ops.benchmark_cycle.inference_memory_info
    description: Whether the server can release (RV(inference_ops.benchmark_cycle.inference_memory_info#module:supported)), and how much that frees.
  - module: inference_ops.benchmark_cycle.inference_unit
    description: >-
      Stops the service instead when the release falls back (RV(fell_back)) or the server cannot release,
      and restarts one left C(unknown).
  - module: inference_ops.benchmark_cycle.inference_load_info
    description: The drain waits on it before the release.
  - module: inference_ops.benchmark_cycle.inference_health
    description: Probe readiness only after O(state=resumed), since a paused SGLang answers 503.
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: >-
      The sweep the memory is freed for - its preflight's C(need_mib) is this module's O(need_mib) and its
      C(device) this O(device).
  - module: inference_ops.benchmark_cycle.host_lock
    description: >-
      The cycle records the release in its lock, so that a cycle taking over a dead holder's lock resumes or
      restarts the server.
notes:
  - Without the memory saver an SGLang release answers 200 and frees nothing; the memory is always measured.
  - While paused, SGLang's C(/health) and C(/health_generate) wait 20 s and answer 503; probe only after O(state=resumed).
"""

EXAMPLES = r"""
- name: Release it for the sweep (or fall back, resumed, when too little is freed)
  inference_ops.benchmark_cycle.inference_memory:
    url: http://127.0.0.1:30001
    state: released
    need_mib: 9900
    device: 0
  register: released

- name: Give it back
  inference_ops.benchmark_cycle.inference_memory:
    url: http://127.0.0.1:30001
    state: resumed
  when: released.released
"""

RETURN = r"""
why:
  description: Why a release fell back.
  returned: state=released when it fell back
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
  returned: always
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
identity_before:
  description: With O(identity), what the server answered before the release (checksum, fingerprint, answer).
  returned: state=released with O(identity), except in check mode
  type: dict
  sample: {checksum: {success: true, ranks: []}, fingerprint: {choices: []}, answer: "4"}
identity:
  description:
    - With O(state=resumed) and O(identity), the verdict (C(ok), C(mismatch), C(unknown)), why, each check, the
      tolerance, and the per-rank checksums before and after; also on failure.
  returned: state=resumed with O(identity), except in check mode
  type: dict
  sample: {verdict: ok, why: "", checks: {checksum: true, fingerprint: true, answer: true}, tolerance: 0.02}
steps:
  description:
    - Each HTTP step (pause, release, resume, continue) with its path, status, milliseconds and error; empty in check mode.
  returned: always, also on failure
  type: list
  elements: dict
  sample:
    - {step: pause, path: /pause_generation, http_status: 200, ms: 36.7, error: ""}
    - {step: release, path: /release_memory_occupation, http_status: 200, ms: 103.6, error: ""}
msg:
  description: What check mode would do.
  returned: in check mode
  type: str
  sample: "check mode: would release http://127.0.0.1:30001"
"""

import time
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import HttpResult, request
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    HEARTBEAT_OPTION,
    CommandError,
    beat_done,
    beat_for,
    check_timeout,
    main_process,
    redact,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import gpus as host_gpus
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_identity import (
    TOLERANCE,
    checksum_problem,
    identity,
    rank_checksums,
    unreadable,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_release import (
    SERVER_SPEC,
    Release,
    ReleaseError,
    checksum,
    identity_figures,
    server_keys,
    server_problem,
    whole_checker,
)


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
    proof = figures(module, rel) if p["identity"] else None
    missing = unreadable(proof) if proof else []
    if missing:  # what comes back could not be proven the same: never released, a stop instead
        why = ("the server's %s could not be read before the release, so what a resume gives back could not be proven "
               "the same: nothing was released; the service is stopped instead" % " and ".join(missing))
        module.warn(why)
        return {"released": False, "fell_back": True, "server_state": "serving", "need_mib": p["need_mib"],
                "free_mib_before": before, "free_mib_after": before, "freed_mib": 0, "gpu_checked": smi is not None,
                "why": why, "identity_before": proof}
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
    if proof is not None:
        out["identity_before"] = proof
    if not enough:
        rel.resume()  # too little freed: back to serving now, and the caller stops it instead
        out["why"] = ("the release freed %s MiB on GPU %d and %d MiB are needed (%d free): resumed; the service is "
                      "stopped instead" % (out["freed_mib"], p["device"], p["need_mib"], after or 0))
        module.warn(out["why"])
    return out


def resumed(module: AnsibleModule, rel: Release, smi: str | None, seen: dict[str, Any]) -> dict[str, Any]:
    """Resume, then read back what the server took: a resume is believed by the memory it gave back
    (at least half of what the release freed), never by its 200 alone."""
    p = module.params
    expect = p["expect_mib"]
    try:
        before = free_mib(module, smi) if expect > 0 else None
    except CommandError:
        before = None
    rel.resume(weights_same(module, rel, seen) if p["identity"] else None)
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


def figures(module: AnsibleModule, rel: Release, with_checksum: bool = True) -> dict[str, Any]:
    p = module.params
    return identity_figures(rel.http, rel.prof, p["model"], p["prompt"], p["timeout"], rel.move_timeout, with_checksum)


def weights_same(module: AnsibleModule, rel: Release, seen: dict[str, Any]) -> Callable[[], None]:
    """The check run after the resume and before generation continues: the weights' checksum per rank read again and
    equal to the release's, else a ReleaseError (`unknown`: restart it) while the server is still paused, so that
    nothing, not even a request that bypassed the router, is answered from weights read as wrong. What it read lands in
    `seen` (the whole verdict's checksum, once generation continued)."""
    def check() -> None:
        before = rank_checksums((module.params["identity_before"] or {}).get("checksum"))
        got = checksum(rel.http, whole_checker(rel.prof), rel.move_timeout)
        seen["checksum"] = got
        after = rank_checksums(got)
        kind, why = checksum_problem(before, after)
        if kind:
            verdict = {"verdict": kind, "why": why, "tolerance": TOLERANCE,
                       "checks": {"checksum": False, "fingerprint": None, "answer": None},
                       "checksums": {"before": before, "after": after}}
            raise ReleaseError("the resumed server cannot be proven the one released (%s: %s): it stays paused and is "
                               "restarted; the router takes it back only once it answers correctly" % (verdict["verdict"], why),
                               "unknown", {"identity": verdict})
    return check


def proven(module: AnsibleModule, rel: Release, out: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """The resumed server's identity against the release's (bc_identity): ok, or a ReleaseError that leaves it
    `unknown` (the caller restarts it) carrying the verdict."""
    p = module.params
    before, after = p["identity_before"] or {}, dict(figures(module, rel, with_checksum=False), checksum=seen.get("checksum"))
    # the greedy answer must be the very text it was (the readiness then checks it holds the known answer)
    verdict = identity(before, after, before.get("answer") if isinstance(before.get("answer"), str) else "")
    verdict["checksums"] = {"before": rank_checksums(before.get("checksum")), "after": rank_checksums(after.get("checksum"))}
    out["identity"] = verdict
    if verdict["verdict"] != "ok":
        raise ReleaseError("the resumed server cannot be proven the one released (%s: %s): it is restarted, and the "
                           "router takes it back only once it answers correctly" % (verdict["verdict"], verdict["why"]),
                           "unknown", {"identity": verdict})
    return out


SPEC: dict[str, Any] = {
    **SERVER_SPEC,
    "state": {"type": "str", "required": True, "choices": ["released", "resumed"]},
    "need_mib": {"type": "int", "default": 0},
    "device": {"type": "int", "default": 0},
    "expect_mib": {"type": "int", "default": 0},
    "tags": {"type": "list", "elements": "str"},
    "move_timeout": {"type": "float", "default": 0},
    "identity": {"type": "bool", "default": False},
    "identity_before": {"type": "dict"},
    "prompt": {"type": "str", "default": "2+2="},
    "model": {"type": "str", "default": ""},
    "gpu_wait_s": {"type": "float", "default": 10},
    "idle_wait_s": {"type": "float", "default": 10},
    "command_timeout": {"type": "float", "default": 30},
    "heartbeat": HEARTBEAT_OPTION,
}


def checked(p: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The engine's profile and its version note, once every parameter is sound (a ValueError naming it)."""
    for key in ("timeout", "command_timeout"):
        check_timeout(p[key], key, 3600)
    if p["move_timeout"] < 0 or p["move_timeout"] > 7200:
        raise ValueError("move_timeout must be 0-7200 seconds, got %r" % p["move_timeout"])
    if "weights" in (p["tags"] or []) and not p["identity"]:
        raise ValueError("tags with weights need identity: true (a resume of released weights is proven the same, "
                         "never trusted by its 200)")
    if p["identity"] and p["state"] == "resumed" and not p["identity_before"]:
        raise ValueError("identity_before is required with identity and state=resumed: the release's identity_before")
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
    # a release or resume, its fall-back included (free memory, pause, the idle wait and its last probe, release, free
    # memory and the GPU wait, resume, continue): five HTTP calls, the two waits and three commands at most
    # (a whole release: the release or the resume copies the weights, and identity reads a checksum and two completions)
    moves = max(p["timeout"], p["move_timeout"])
    own_s = (3 * p["timeout"] + 2 * moves + p["idle_wait_s"] + p["gpu_wait_s"] + 3 * p["command_timeout"]
             + (moves + 2 * p["timeout"] if p["identity"] else 0))
    beaten = beat_for(module, own_s, time.time())
    base = p["url"].rstrip("/")

    def http(method: str, path: str, payload: dict[str, Any] | None, timeout: float) -> HttpResult:
        return request(method, base + path, timeout, payload, server_keys(p), p["validate_certs"])

    if p["state"] == "released":  # what the running server takes, read from its main process where the engine says
        problem = server_problem(prof.get("release") or {}, p["engine"], main_process(p["unit"]) if p["unit"] else None)
        if problem:
            module.fail_json(msg="%s: nothing was released: %s" % (base, problem), server_state="serving", steps=[])
    if module.check_mode:  # what would be: released (and the caller resumes it), or serving again
        module.exit_json(changed=True, server_state="released" if p["state"] == "released" else "serving", steps=[],
                         released=p["state"] == "released", fell_back=False,
                         msg="check mode: would %s %s" % ("release" if p["state"] == "released" else "resume", base))
    try:
        rel = Release(prof, p["engine"], http, p["timeout"], tags=p["tags"], move_timeout=p["move_timeout"])
    except ReleaseError as err:
        module.fail_json(msg="%s: %s" % (base, err), server_state=err.state, steps=[])
    try:
        if p["state"] == "released":
            result = released(module, rel, module.get_bin_path("nvidia-smi"))
        else:
            seen: dict[str, Any] = {}
            result = resumed(module, rel, module.get_bin_path("nvidia-smi"), seen)
            if p["identity"]:
                result = proven(module, rel, result, seen)
    except ReleaseError as err:
        module.fail_json(msg="%s: %s" % (base, redact(str(err), server_keys(p))), server_state=err.state,
                         steps=rel.steps, **err.extra)
    beat_done(module, beaten)  # released or resumed: the promise shrinks from the step's worst case to the grace
    module.exit_json(changed=True, steps=rel.steps, **result)


if __name__ == "__main__":
    main()
