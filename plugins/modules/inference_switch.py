#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: arm or disarm the host's dead-man switch of an inference server's unit."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_switch
short_description: Arm or disarm the host's dead-man switch of an inference server's systemd unit
description:
  - The switch is a transient systemd timer and service, C(bc-deadman-<unit>), that runs its script (O(script)) on the
    host. Armed before the cycle stops the unit (or releases its memory in place), it brings the service back when the
    controller dies or loses the host - the cycle's rescue and always sections never run then.
  - O(state=armed) writes the script to C(/usr/local/libexec/benchmark-cycle/deadman-<sha256>.sh) where it is missing
    (root's, 0755; one file per content, so another unit's cycle or another release of the collection never changes
    what an armed switch runs), and (re-)arms the timer for the start of the unit that runs now. When it fires, the
    switch ends this cycle's sweep (O(sweep_tag)) and starts the unit (O(fire_action=start)), or restarts only the
    start of it that it was armed for, its InvocationID (O(fire_action=restart), a server released in place). A unit
    brought back since by anyone is left alone; each firing says what it did and why in the switch's journal.
  - O(state=disarmed) stops the timer; a switch firing right now is let finish, never cut halfway.
    M(inference_ops.benchmark_cycle.inference_unit) disarms it as well when it starts the unit.
version_added: "1.0.0"
options:
  name: {description: The unit name without C(.service)., type: str, required: true}
  state:
    description: Whether the switch is armed.
    type: str
    choices: [armed, disarmed]
    default: armed
  fire_after:
    description:
      - With O(state=armed), seconds until the switch acts unless disarmed or re-armed (the outer bound, for a
        controller alive but stuck).
      - With O(heartbeat) as well, the switch reads the heartbeat every RV(check_s) seconds and acts as soon as the
        controller's promise of its next contact is broken - a dead or cancelled controller costs that grace, not
        the whole bound.
      - Required with O(state=armed).
    type: int
  fire_action:
    description: With O(state=armed), what the switch does to the unit when it fires.
    type: str
    choices: [start, restart]
    default: start
  sweep_tag:
    description: With O(state=armed), the sweep of this cycle (C(--tag) on its command line) the switch ends first.
    type: str
  script:
    description:
      - With O(state=armed), the switch's script (the role service_drain's C(files/deadman.sh), which says what it
        does); the timer runs it with every value as an argument of its own.
      - Required with O(state=armed); one that is empty or not a C(/bin/sh) script is refused before anything is armed.
    type: str
  command_timeout:
    description: Seconds any command may take before it is killed and the task fails naming it.
    type: int
    default: 60
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat]
author:
  - benchmark-cycle contributors (!UNKNOWN)
notes:
  - Commands run as argument lists with a timeout each; the switch's script is the only shell, and no shell reads the
    values it is given (systemd would expand a C($) in them, so a value with one is refused).
attributes:
  check_mode: {support: full, description: Checks the script and the deadline; arms and disarms nothing.}
  diff_mode: {support: none, description: The script is the collection's own file.}
seealso:
  - module: inference_ops.benchmark_cycle.inference_unit
    description: Stops and starts the unit the switch covers; its O(state=started) disarms the switch.
  - module: inference_ops.benchmark_cycle.host_lock
    description: Names the heartbeat file the armed switch reads.
"""

EXAMPLES = r"""
- name: Arm the host's dead-man switch before the stop
  inference_ops.benchmark_cycle.inference_switch:
    name: sglang-k26-ddtree
    fire_after: 4300
    sweep_tag: sglang-k26-ddtree/20261205T120000Z
    # the role service_drain's files/deadman.sh (this lookup finds it from a task of that role)
    script: "{{ lookup('ansible.builtin.file', 'deadman.sh', rstrip=false) }}"
    heartbeat:
      path: /run/lock/benchmark-cycle-sglang-k26-ddtree.lock/heartbeat
      for_s: 60
      token: "{{ cycle_token }}"

- name: Disarm it (the release failed with the server serving)
  inference_ops.benchmark_cycle.inference_switch:
    name: sglang-k26-ddtree
    state: disarmed
"""

RETURN = r"""
switch:
  description: The switch's transient unit name.
  returned: always
  type: str
  sample: bc-deadman-sglang-k26-ddtree
fires_in_s:
  description: Seconds until the armed switch acts at the latest (O(fire_after)).
  returned: state=armed
  type: int
  sample: 4300
check_s:
  description: How often the armed switch reads the heartbeat (0 without O(heartbeat) - it fires once, after O(fire_after)).
  returned: state=armed
  type: int
  sample: 15
fire_action:
  description: What the armed switch does when it fires (O(fire_action)).
  returned: state=armed, except in check mode
  type: str
  sample: restart
armed_for_invocation:
  description: The InvocationID of the start of the unit the switch restarts (O(fire_action=restart)); empty for C(start).
  returned: state=armed, except in check mode
  type: str
  sample: 6f1c2a9b0e8d4c7fa1b2c3d4e5f60718
script:
  description: The script's file on the host, which the timer runs.
  returned: state=armed, except in check mode
  type: str
  sample: /usr/local/libexec/benchmark-cycle/deadman-3f2a9c0d41b7.sh
script_written:
  description: Whether the script (O(script)) was written to the host (it was missing, or not root's alone).
  returned: state=armed, except in check mode
  type: bool
  sample: false
was_armed:
  description: The switch was armed when disarmed.
  returned: state=disarmed, except in check mode
  type: bool
  sample: true
heartbeat:
  description:
    - The heartbeat written before anything else (path, written, until) or why not (why), with O(state=armed).
    - With O(state=disarmed), the heartbeat removed instead (path, removed), so that a live holder waiting for its
      server never looks dead to the next cycle.
  returned: when O(heartbeat) is given, except in check mode
  type: dict
  sample: {path: /run/lock/benchmark-cycle-sglang.lock/heartbeat, written: true, until: 1796186677}
"""

import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    HEARTBEAT_OPTION,
    CommandError,
    beat_for,
    end_beat,
    fence,
    redact,
    write_atomic,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_switch import Switch
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import Unit, UnitError

SPEC: dict[str, Any] = {
    "name": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["armed", "disarmed"], "default": "armed"},
    "fire_after": {"type": "int"},
    "fire_action": {"type": "str", "choices": ["start", "restart"], "default": "start"},
    "sweep_tag": {"type": "str"},
    "script": {"type": "str"},
    "command_timeout": {"type": "int", "default": 60},
    "heartbeat": HEARTBEAT_OPTION,
}
REQUIRED_IF = [("state", "armed", ["fire_after", "script"])]


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    p = module.params
    if p["command_timeout"] < 1:
        module.fail_json(msg="command_timeout=%s: give a number of seconds from 1" % p["command_timeout"])

    def run(argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        return host_run(argv, timeout or p["command_timeout"])

    # a disarm acts only for the lock's holder and ends the heartbeat; an arm writes it first (its own worst case: a
    # few commands)
    if p["state"] == "disarmed":
        fence(module)
    beaten = beat_for(module, 3 * p["command_timeout"], time.time()) if p["state"] == "armed" else None
    try:
        switch = Switch(Unit(p["name"], run, write_atomic, systemd_dir="/etc/systemd/system", state_dir="/var/lib/benchmark-cycle",
                             check_mode=module.check_mode, timeout=p["command_timeout"]))
        if p["state"] == "armed":
            # a switch reads a heartbeat only when this arm could write one; else it fires once, at fire_after
            written = bool(beaten and beaten.get("written"))
            beat_file, beat_s = (p["heartbeat"]["path"], p["heartbeat"]["for_s"]) if written else (None, 0)
            result = switch.arm(p["fire_after"], p["sweep_tag"], p["fire_action"], beat_file, beat_s, script=p["script"])
        else:
            result = switch.disarm()
            if not module.check_mode:
                beaten = end_beat(p["heartbeat"])
    except (UnitError, CommandError) as err:
        module.fail_json(msg="%s: %s" % (p["name"], redact(str(err))))
    module.exit_json(name=p["name"], state=p["state"], **dict(result, **({"heartbeat": beaten} if beaten else {})))


if __name__ == "__main__":
    main()
