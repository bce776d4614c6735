#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: install, stop, start and roll back an inference server's systemd unit."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_unit
short_description: Install, stop (and prove stopped), start or roll back an inference server's systemd unit
description:
  - Each state is one round trip to the host, so that the benchmark cycle spends its time on the
    drain, the sweep and the reload, not on task overhead.
  - O(state=present) verifies O(content) with C(systemd-analyze verify) before anything is written
    (a unit that fails is never installed), keeps the installed unit and environment file for
    rollback, writes the environment file 0600 and the unit atomically, reloads systemd and
    enables the unit. Returns a diff of the unit (never of the environment file, which holds the API key).
  - O(state=stopped) records the unit's processes (its cgroup and the descendants of its main PID),
    stops the unit (systemd waits up to the unit's C(TimeoutStopSec)), kills those of them still alive
    whose title or executable is exactly the O(engine) profile's (SGLang can leave
    C(sglang::scheduler_TP*) children) and nothing else - never a process of another service, a
    compiler or a shell whose command line merely mentions the server - and on a host with
    C(nvidia-smi) waits until the GPU memory is freed.
  - O(state=started) clears the start-rate counter (C(reset-failed)) and starts the unit without
    waiting for the start job (readiness is a separate probe, M(inference_ops.benchmark_cycle.inference_health)). O(state=restarted)
    does the same for a unit that runs (a server whose memory state is not known - paused, released, a failed
    resume), ending it first by a stop job and SIGKILL to all its processes, read back as ended, since a paused
    SGLang server's SIGTERM drain waits for every request its front end holds until C(TimeoutStopSec); the
    stop is bounded whatever it holds, and a requested stop never triggers C(Restart=).
  - O(state=sweep_ended) kills this cycle's sweep (O(sweep_tag)) if it still runs, and nothing else
    (before a released server takes its memory back); it returns the unit's RV(invocation_id).
  - O(state=rolled_back) puts back the files that this cycle's O(state=present) replaced (keyed by
    O(token)) and starts the unit again (a running one is ended as for O(state=restarted) first); when this
    cycle replaced nothing, nothing is restarted.
  - O(state=started) and O(state=restarted) also disarm the unit's dead-man switch
    (M(inference_ops.benchmark_cycle.inference_switch)) - the unit is started, so the switch's job is done.
  - O(state=found) reads the unit and its dead-man switch as they are and changes nothing (RV(found)).
version_added: "1.0.0"
options:
  name: {description: The unit name without C(.service)., type: str, required: true}
  state:
    description: What to do with the unit.
    type: str
    choices: [present, stopped, started, restarted, sweep_ended, rolled_back, found]
    default: present
  token:
    description:
      - This cycle's identity. O(state=present) keeps the files it replaces under C(rollback/<token>/);
        O(state=rolled_back) puts back only those, so a cycle never rolls back to another cycle's files.
    type: str
  content: {description: The unit file text (O(state=present))., type: str}
  env_file: {description: The unit's C(EnvironmentFile)., type: path}
  env_content: {description: The environment file text; written 0600 and never logged., type: str}
  secret_file: {description: "A file only the server reads (SGLang's C(--config) YAML with the API key); written 0600.", type: path}
  secret_content: {description: Its text; never logged., type: str}
  enabled: {description: Enable (or disable) the unit at boot; unset leaves it alone., type: bool}
  systemd_dir: {description: Where units are installed., type: path, default: /etc/systemd/system}
  state_dir:
    description: Holds C(rollback/<token>/) copies of the files a cycle replaced.
    type: path
    default: /var/lib/benchmark-cycle
  engine:
    description:
      - Engine profile whose exact process titles and executables mark leftovers (O(state=stopped)).
      - One of the engines of module_utils/bc_engines.py (C(ENGINES)); another is refused naming them.
    type: str
    default: sglang
  kill_leftovers:
    description: SIGKILL the unit's own server processes still running after the stop; otherwise fail.
    type: bool
    default: true
  gpu_check: {description: Wait until the GPU memory is freed (skipped on a host without nvidia-smi)., type: bool, default: true}
  gpu_free_mib: {description: Used MiB per GPU at or under which it counts as free., type: int, default: 2048}
  gpu_wait_s:
    description: How long to wait for the GPU memory (wall clock; each nvidia-smi call is cut at what is left).
    type: int
    default: 60
  gpu_indices: {description: The GPUs that must be freed; empty means all., type: list, elements: int, default: []}
  stop_timeout:
    description: Seconds C(systemctl stop) may take (the unit's C(TimeoutStopSec) plus a margin) before it is cut.
    type: int
    default: 300
  command_timeout:
    description: Seconds any other command may take before it is killed and the task fails naming it.
    type: int
    default: 60
  sweep_tag:
    description:
      - With O(state=started), a sweep of this cycle (C(--tag) on its command line) still alive is killed first.
    type: str
  invocation_id:
    description:
      - With O(state=started) or O(state=restarted), act only while the unit still runs this start of it (its
        C(InvocationID)); another one means it was started since, and nothing is done (C(changed) false).
    type: str
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat]
author:
  - benchmark-cycle contributors (!UNKNOWN)
notes:
  - Commands run as argument lists with a timeout each; no shell.
attributes:
  check_mode: {support: full, description: Verifies and diffs the unit; reports what would stop or start.}
  diff_mode: {support: full, description: The unit file's diff (never the environment or secrets file's).}
seealso:
  - module: inference_ops.benchmark_cycle.inference_health
    description: >-
      Probes the unit this module started until it is ready (a start here does not wait for the start job); its
      C(restarts_baseline) is RV(n_restarts).
  - module: inference_ops.benchmark_cycle.inference_memory
    description: >-
      Frees the server's GPU memory in place instead of O(state=stopped); O(state=sweep_ended) precedes its resume.
  - module: inference_ops.benchmark_cycle.inference_switch
    description: The unit's dead-man switch, armed before the stop; the start here disarms it.
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: >-
      The sweep the unit is stopped for; O(sweep_tag) is its C(tag), which O(state=started), O(state=sweep_ended)
      and the dead-man switch end.
  - module: inference_ops.benchmark_cycle.host_lock
    description: >-
      Guards the cycle that stops and starts the unit; the holder records that it stopped it, so a cycle taking over
      a dead holder's lock starts it again.
"""

EXAMPLES = r"""
- name: Install the unit
  inference_ops.benchmark_cycle.inference_unit:
    name: sglang-k26-ddtree
    content: "{{ lookup('ansible.builtin.template', 'unit.service.j2') }}"
    env_file: /etc/benchmark-cycle/sglang-k26-ddtree.env
    env_content: "{{ lookup('ansible.builtin.template', 'unit.env.j2') }}"
    enabled: true

- name: Stop it and prove it stopped
  inference_ops.benchmark_cycle.inference_unit:
    name: sglang-k26-ddtree
    state: stopped
    engine: sglang
    gpu_free_mib: 2048
"""

RETURN = r"""
name:
  description: The unit name without .service.
  returned: always
  type: str
  sample: sglang-k26-ddtree
state:
  description: The state asked for.
  returned: always
  type: str
  sample: stopped
unit_changed:
  description: The unit file was replaced (in check mode, would be).
  returned: state=present
  type: bool
  sample: true
env_changed:
  description: The environment or secrets file was replaced (or its mode fixed).
  returned: state=present
  type: bool
  sample: false
enable_changed:
  description: The unit was enabled or disabled.
  returned: state=present
  type: bool
  sample: false
daemon_reloaded:
  description: systemd reloaded its units (never in check mode).
  returned: state=present
  type: bool
  sample: true
unit_file:
  description: The installed unit file.
  returned: state=present
  type: str
  sample: /etc/systemd/system/sglang-k26-ddtree.service
rollback_kept:
  description: The files this install replaced and kept for rollback (a file it created has no earlier version to keep).
  returned: state=present
  type: list
  elements: str
  sample: [/etc/systemd/system/sglang-k26-ddtree.service, /etc/benchmark-cycle/sglang-k26-ddtree.env]
rollback_dir:
  description: Where this cycle keeps the files it replaced (C(rollback/-) under O(state_dir) without O(token)).
  returned: state=present or rolled_back
  type: str
  sample: /var/lib/benchmark-cycle/rollback/20261201T083500Z-731942018
diff:
  description:
    - The whole unit file before and after, with headers (never the environment or secrets file); the sample is cut.
  returned: state=present in diff mode, when the unit file changes
  type: dict
  sample:
    before: "[Service]\nType=exec\nTimeoutStopSec=345\n"
    after: "[Service]\nType=exec\nTimeoutStopSec=375\n"
    before_header: /etc/systemd/system/sglang-k26-ddtree.service (installed)
    after_header: /etc/systemd/system/sglang-k26-ddtree.service (new)
sweeps_ended:
  description: This cycle's sweeps (O(sweep_tag)) killed before the start, each as pid and tag (none in check mode).
  returned: state=started, restarted or sweep_ended
  type: list
  elements: str
  sample: ["61234 sglang-k26-ddtree/20261201T083500Z-731942018"]
found:
  description:
    - The unit's C(ActiveState), C(SubState) and C(InvocationID), and its dead-man switch's timer's C(ActiveState) and
      C(SubState) (C(inactive) when it is not armed), as systemd reports them.
  returned: state=found
  type: dict
  sample:
    unit: {ActiveState: active, SubState: running, InvocationID: 6f1c2a9b0e8d4c7fa1b2c3d4e5f60718}
    switch: {ActiveState: inactive, SubState: dead}
switch:
  description: The dead-man switch's transient unit name.
  returned: state=found
  type: str
  sample: bc-deadman-sglang-k26-ddtree
ended_by_sigkill:
  description: The unit read back after a restart ended it by SIGKILL to all its processes (empty when it did not run).
  returned: state=restarted, except in check mode
  type: dict
  sample: {"ActiveState": "failed", "SubState": "failed", "Result": "signal"}
invocation_id:
  description: The unit's InvocationID (which start of it runs; empty when it is not running).
  returned: state=started, restarted or sweep_ended
  type: str
  sample: 6f1c2a9b0e8d4c7fa1b2c3d4e5f60718
was:
  description: ActiveState before the stop, start or restart.
  returned: state=stopped, started or restarted
  type: str
  sample: active
stop_s:
  description: Seconds the stop took (C(systemctl stop), systemd waiting up to the unit's C(TimeoutStopSec)).
  returned: state=stopped
  type: float
  sample: 6.62
after_stop:
  description:
    - The unit read back after the stop (C(ActiveState), C(Result), C(ExecMainCode), C(ExecMainStatus)). SGLang SIGKILLs
      its own main process after its drain, which systemd records as C(failed)/C(Result=signal); that failure alone is
      cleared (RV(reset_failed)) and C(inactive) read back. C(Result=timeout) (the stop ran into C(TimeoutStopSec)), an
      exit code or the OOM killer stay as they are.
  returned: state=stopped and the unit was active
  type: dict
  sample: {ActiveState: inactive, Result: success, ExecMainCode: "0", ExecMainStatus: "0"}
reset_failed:
  description: The stop cleared the engine's own SIGKILL of its main process (see RV(after_stop)).
  returned: state=stopped
  type: bool
  sample: true
leftover_processes:
  description: The unit's own server processes found after the stop (pid and command line).
  returned: state=stopped
  type: list
  elements: str
  sample: ["48391 sglang::scheduler_TP3"]
leftovers_killed:
  description: They were SIGKILLed.
  returned: state=stopped
  type: bool
  sample: true
other_services_processes:
  description: Processes with a server's name that belong to another systemd service (pid and service); left alone.
  returned: state=stopped
  type: list
  elements: str
  sample: ["5151 sglang-qwen3.service"]
gpu_memory_used_mib:
  description: Used MiB per GPU index once free ({} without nvidia-smi, with O(gpu_check=false) or in check mode).
  returned: state=stopped
  type: dict
  sample: {"0": 0, "1": 0, "2": 0, "3": 0, "4": 0, "5": 0, "6": 0, "7": 0}
gpu_checked:
  description: The GPU memory was checked (nvidia-smi exists and O(gpu_check) is on).
  returned: state=stopped
  type: bool
  sample: true
rolled_back:
  description: A file this cycle replaced was put back (and the unit restarted).
  returned: state=rolled_back
  type: bool
  sample: true
restored:
  description: The files put back.
  returned: state=rolled_back
  type: list
  elements: str
  sample: [/etc/benchmark-cycle/sglang-k26-ddtree.env]
heartbeat:
  description:
    - The heartbeat written before anything else (path, written, until) or why not (why).
    - With O(state=started) or O(state=restarted) (the switch disarmed), or O(state=rolled_back), the heartbeat removed
      instead (path, removed), so that a live holder waiting for its server never looks dead to the next cycle.
  returned: when O(heartbeat) is given, except in check mode
  type: dict
  sample: {path: /run/lock/benchmark-cycle-sglang.lock/heartbeat, written: true, until: 1796186677}
n_restarts:
  description: Restart count after the start (0 after reset-failed); the baseline a crash loop is measured from.
  returned: state=started, restarted or rolled_back
  type: int
  sample: 0
"""

import shutil
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES, profile
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    HEARTBEAT_OPTION,
    CommandError,
    beat_done,
    beat_for,
    end_beat,
    fence,
    redact,
    write_atomic,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_switch import Switch
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import Unit, UnitError


def run_steps(module: AnsibleModule, unit: Unit, beaten: dict[str, Any] | None = None) -> dict[str, Any]:
    p = module.params
    if p["state"] == "present":
        files = [(f, c, 0o600) for f, c in ((p["env_file"], p["env_content"]), (p["secret_file"], p["secret_content"]))
                 if f and c is not None]
        scratch = tempfile.mkdtemp(prefix="bc-unit-")
        try:
            result = unit.install(p["content"], files, p["enabled"], scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        diff = result.pop("diff")
        if module._diff and result["unit_changed"]:
            result["diff"] = diff
        return result
    if p["state"] == "stopped":
        smi = module.get_bin_path("nvidia-smi") if p["gpu_check"] else None
        gpu = {"nvidia_smi": smi, "free_mib": p["gpu_free_mib"], "wait_s": p["gpu_wait_s"],
               "indices": p["gpu_indices"]} if smi else None
        return dict(unit.stop(ENGINES[p["engine"]]["processes"], p["kill_leftovers"], gpu, stop_timeout=p["stop_timeout"]),
                    gpu_checked=gpu is not None)
    if p["state"] in ("started", "restarted"):
        result = unit.start(p["sweep_tag"], restart=p["state"] == "restarted", only_invocation=p["invocation_id"])
        if not module.check_mode:  # started (or another start runs: this cycle awaits it): the switch is done
            Switch(unit).disarm()
        return result
    if p["state"] == "sweep_ended":
        ended = [] if module.check_mode else unit.end_sweep(p["sweep_tag"])
        return {"changed": bool(ended), "sweeps_ended": ended,
                # (`invocation` is Ansible's own key in a result: it would be taken out)
                "invocation_id": unit.show("InvocationID").get("InvocationID", "")}
    if p["state"] == "found":
        return unit.found()
    return unit.rollback()


SPEC: dict[str, Any] = {
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["present", "stopped", "started", "restarted", "sweep_ended", "rolled_back", "found"],
              "default": "present"},
    "token": {"type": "str", "no_log": False},  # the cycle's lock token: a name, not a credential
    "content": {"type": "str"},
    "env_file": {"type": "path"},
    "env_content": {"type": "str", "no_log": True},
    "secret_file": {"type": "path"},
    "secret_content": {"type": "str", "no_log": True},
    "enabled": {"type": "bool"},
    "systemd_dir": {"type": "path", "default": "/etc/systemd/system"},
    "state_dir": {"type": "path", "default": "/var/lib/benchmark-cycle"},
    "engine": {"type": "str", "default": "sglang"},  # checked against ENGINES once, by bc_engines.profile
    "kill_leftovers": {"type": "bool", "default": True},
    "gpu_check": {"type": "bool", "default": True},
    "gpu_free_mib": {"type": "int", "default": 2048},
    "gpu_wait_s": {"type": "int", "default": 60},
    "gpu_indices": {"type": "list", "elements": "int", "default": []},
    "stop_timeout": {"type": "int", "default": 300},
    "command_timeout": {"type": "int", "default": 60},
    "sweep_tag": {"type": "str"},
    "invocation_id": {"type": "str"},
    "heartbeat": HEARTBEAT_OPTION,
}
REQUIRED_IF = [("state", "present", ["content", "token"]), ("state", "rolled_back", ["token"])]


def problem(p: dict[str, Any]) -> str:
    """The first parameter the unit cannot take, named with the fix; "" when all are sound."""
    try:
        profile(p["engine"])
    except ValueError as err:
        return str(err)
    if p["state"] == "present" and p["env_file"] and p["env_content"] is None:
        return "env_content is required with env_file for state=present (the environment file's text)"
    for key in ("gpu_free_mib", "gpu_wait_s"):
        if p[key] < 0:
            return "%s must be >= 0, got %d" % (key, p[key])
    for key in ("stop_timeout", "command_timeout"):
        if not 1 <= p[key] <= 86400:
            return "%s must be 1-86400 seconds, got %d" % (key, p[key])
    return ""


# the states that bring the service back (a start and a restart, which disarm the dead-man switch; a rollback's start):
# each ends the heartbeat (the lock's lease decides its liveness while readiness waits) and acts only for the lock's
# holder
DISARMING = ("started", "restarted", "rolled_back")


def own_budget(p: dict[str, Any]) -> float:
    """This call's worst case in seconds, from its parameters (the heartbeat's promise covers it): a few
    commands, and for a stop its stop timeout and GPU wait; a restart's end (30 s) or a sweep's (10 s)."""
    extra = {"stopped": p["stop_timeout"] + p["gpu_wait_s"], "restarted": 30, "sweep_ended": 10, "started": 10}
    return 3 * p["command_timeout"] + extra.get(p["state"], 0)


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    p = module.params
    bad = problem(p)
    if bad:
        module.fail_json(msg=bad)

    def run(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        return host_run(argv, timeout or p["command_timeout"])

    # the states that disarm the switch end the heartbeat instead of writing one; they too act only for the lock's holder
    if p["state"] in DISARMING:
        fence(module)
    beaten = None if p["state"] in (*DISARMING, "found") else beat_for(module, own_budget(p), time.time())
    try:
        unit = Unit(p["name"], run, write_atomic, systemd_dir=p["systemd_dir"], state_dir=p["state_dir"],
                    env_file=p["env_file"], check_mode=module.check_mode, timeout=p["command_timeout"], token=p["token"])
        if p["secret_file"]:
            unit.extra_files.append(p["secret_file"])
        result = run_steps(module, unit, beaten)
        if p["state"] in DISARMING and not module.check_mode:
            beaten = end_beat(p["heartbeat"])
        elif p["state"] == "stopped":  # stopped (minutes, at worst): the promise shrinks to the grace
            beaten = beat_done(module, beaten)
    except (UnitError, CommandError) as err:
        module.fail_json(msg="%s: %s" % (p["name"], redact(str(err))))
    module.exit_json(name=unit.name, state=p["state"], **dict(result, **({"heartbeat": beaten} if beaten else {})))


if __name__ == "__main__":
    main()
