#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: which process an inference unit runs, and the files that may hold its API key, read at once."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_unit_info
short_description: Read which process an inference unit runs and the files that may hold its API key
description:
  - Reads, in one call, what a cycle needs of a unit before it touches anything - the unit's main PID
    (C(systemctl show), bounded by O(timeout)) and the text of each file that may hold the server's API key - its
    environment and secrets files (O(files)), its main process's environment (C(/proc/PID/environ)) and the copies
    of O(files) a past install kept under O(rollback_dir) (a key rotation not yet in force). Read-only.
  - A file that does not exist or cannot be read is left out - it holds no key. Paths are absolute and read as
    given (no C(~) or variable expansion), and RV(texts) is keyed by them.
  - A C(systemctl) that does not answer within O(timeout) is killed and the module fails with RV(hung) true; one that
    fails, cannot be started or gives no main PID fails the module with RV(hung) false - a PID not known is never read
    as "not running".
version_added: "1.0.0"
extends_documentation_fragment: [inference_ops.benchmark_cycle.read_only]
author: benchmark-cycle contributors (!UNKNOWN)
options:
  unit:
    description: The systemd unit.
    type: str
    required: true
  files:
    description: The unit's files that may hold the key (its environment file, its secrets file); empty items are skipped.
    type: list
    elements: str
    default: []
  rollback_dir:
    description:
      - Where the unit's installs keep what they replaced, searched for regular files named as O(files) (a symlink, a
        FIFO or a device of that name is skipped). None - none.
    type: str
  timeout:
    description: Seconds C(systemctl show) may take on the host before it is killed.
    type: float
    default: 30
seealso:
  - module: inference_ops.benchmark_cycle.inference_unit
    description: Installs, stops, starts and rolls back the unit (and keeps the files O(rollback_dir) holds).
notes:
  - RV(texts) holds the API key - use C(no_log) on the task.
"""

EXAMPLES = r"""
- name: Read which process the unit runs and the keys on the host
  inference_ops.benchmark_cycle.inference_unit_info:
    unit: sglang-kimi
    files: [/etc/default/sglang-kimi, /etc/sglang-kimi/secrets.env]
    rollback_dir: /var/lib/benchmark-cycle/rollback
    timeout: 30
  register: unit_info
  no_log: true  # its texts hold the API key
"""

RETURN = r"""
main_pid:
  description: The unit's main process, 0 when it runs none (or there is no such unit).
  returned: success
  type: int
  sample: 4242
texts:
  description: Each file read, by path, its text (NUL-separated for C(/proc/PID/environ)). Holds the key.
  returned: success
  type: dict
  sample: {/etc/default/sglang-kimi: "SGLANG_API_KEY=...\n"}
hung:
  description: C(systemctl show) did not answer within O(timeout) and was killed.
  returned: when the module ran
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import CommandError, CommandTimeout, check_timeout
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_unit import UnitError, check_name, key_texts


def main() -> None:
    module = AnsibleModule(argument_spec={
        "unit": {"type": "str", "required": True},
        "files": {"type": "list", "elements": "str", "default": []},
        "rollback_dir": {"type": "str"},
        "timeout": {"type": "float", "default": 30},
    }, supports_check_mode=True)
    p = module.params
    try:
        check_name(p["unit"], "unit")
        check_timeout(p["timeout"], "timeout", 3600)
    except (UnitError, ValueError) as err:
        module.fail_json(msg=str(err), hung=False)
    try:
        module.exit_json(changed=False, hung=False, **key_texts(p["unit"], p["files"], p["rollback_dir"] or "", p["timeout"]))
    except CommandTimeout as err:
        module.fail_json(msg=str(err), hung=True)
    except CommandError as err:  # it failed, gave no PID or could not start: not a hang
        module.fail_json(msg=str(err), hung=False)


if __name__ == "__main__":
    main()
