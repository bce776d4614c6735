#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a live inference server can release its GPU memory in place, and how much that frees."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inference_memory_info
short_description: Ask a live inference server whether it can release its KV cache in place, and how much that frees
description:
  - Asks the live server whether it can release its memory (SGLang started with C(--enable-memory-saver), read from
    C(/server_info)) and how much that frees per GPU (its KV cache). Read-only.
  - The engine's endpoints and payloads are data (module_utils/bc_engines.py, C(release)).
version_added: "1.0.0"
extends_documentation_fragment: [inference_ops.benchmark_cycle.inference_server, inference_ops.benchmark_cycle.read_only]
author: benchmark-cycle contributors (!UNKNOWN)
seealso:
  - module: inference_ops.benchmark_cycle.inference_memory
    description: Releases the memory (its C(state=released)) when this says it can.
notes:
  - Without the memory saver an SGLang release answers 200 and frees nothing; RV(supported) is false and RV(why) names
    the setting.
"""

EXAMPLES = r"""
- name: Can this server release its KV cache, and how much would that free?
  inference_ops.benchmark_cycle.inference_memory_info:
    url: http://127.0.0.1:30001
    engine: sglang
    engine_version: 0.5.16
  register: release_info
"""

RETURN = r"""
supported:
  description:
    - The server can release its memory - its profile has a release, and the live server says the saver is on (SGLang)
      or its main process, read from O(unit), runs with what the release needs and listens on loopback only (vLLM).
  returned: always
  type: bool
  sample: true
saver_on:
  description: The server runs with the memory saver (null when the engine does not say, or did not answer).
  returned: always
  type: bool
  sample: true
releasable_gib:
  description: What a release frees per GPU by the server's own account, the smallest rank's KV cache (null when it does not say).
  returned: always
  type: float
  sample: 127.94
setting:
  description: The engine setting that turns the saver on (null for an engine that cannot release).
  returned: always
  type: str
  sample: enable_memory_saver
why:
  description: Why the server cannot release (empty when it can).
  returned: always
  type: str
  sample: ""
whole:
  description:
    - What a whole-GPU release (weights and KV cache, and the CUDA graph pool where the version backs it up) would
      take and free, from the server's own info, its main process's environment and this host's MemAvailable.
    - C(supported), C(tags) (to release), C(releasable_gib) (per GPU), C(resident) (each tag left on the GPU, with why),
      C(host_backup_mib) (the pinned host copy on this host), C(host_available_mib), C(checker) (the weights checksum
      route, null where the version has none), C(timeout_s) (the release's and resume's deadline for the copy) and
      C(why) (each missing piece).
  returned: always
  type: dict
  sample: {supported: false, tags: [kv_cache], releasable_gib: null, resident: {}, host_backup_mib: null,
           host_available_mib: 1900000, checker: /weights_checker, timeout_s: null,
           why: "weights: it runs without enable_weights_cpu_backup (set bc_engine_settings.enable_weights_cpu_backup: true; ...)"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import resolve
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_health import request
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import check_timeout, main_process, redact
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_release import (
    SERVER_SPEC,
    meminfo_available_mib,
    server_keys,
    support,
)


def host_available_mib() -> int | None:
    """This host's MemAvailable (MiB), None when /proc/meminfo cannot be read: the pinned copy of the weights
    is taken from it."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            return meminfo_available_mib(fh.read())
    except OSError:
        return None


def main() -> None:
    module = AnsibleModule(argument_spec=SERVER_SPEC, supports_check_mode=True)
    p = module.params
    try:
        check_timeout(p["timeout"], "timeout", 3600)
        prof, note = resolve(p["engine"], p["engine_version"])
    except ValueError as err:
        module.fail_json(msg=str(err))
    if note:
        module.warn(note)
    rel = prof.get("release")
    answer = (request("GET", p["url"].rstrip("/") + rel["info_path"], p["timeout"], None, server_keys(p), p["validate_certs"])
              if rel else None)
    result = support(prof, p["engine"], answer, main_process(p["unit"]) if p["unit"] else None, host_available_mib())
    result["why"] = redact(result["why"], server_keys(p))
    result["whole"]["why"] = redact(result["whole"]["why"], server_keys(p))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
