#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read each GPU's health: ECC, retired pages, row remaps, clock events, temperature, XIDs, DCGM."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Judge each GPU of the host healthy enough to benchmark on and to serve from
description:
  - Reads C(nvidia-smi -q -x) once (uncorrectable ECC errors, volatile and aggregate; pages pending
    retirement; rows pending remap or a failed remap; clock-event reasons; temperature; persistence
    mode), the kernel log's C(NVRM Xid) lines since O(since), and C(dcgmi diag -r 1 -j) where DCGM is
    installed (O(dcgm)).
  - Judges them by rules that are data (module_utils/bc_gpuhealth.py C(RULES), overridable with
    O(rules)), and returns RV(healthy), the RV(problems) and RV(concerns) each naming the GPU, the
    reading and its value. It never fails for an unhealthy GPU; the caller decides. A hung
    nvidia-smi (a wedged GPU) is a problem, not a hung task.
  - Without nvidia-smi nothing is judged (RV(checked) false) and nothing is healthy (RV(healthy) false) - on a host
    meant to have a GPU (O(required), the default) that is a problem naming the missing tool and the fix; only a host
    declared GPU-less (O(required=false), no O(expect) or O(devices)) gets RV(no_gpu) true and no problem.
version_added: "1.0.0"
extends_documentation_fragment: [inference_ops.benchmark_cycle.cycle_heartbeat, inference_ops.benchmark_cycle.read_only]
author: benchmark-cycle contributors (!UNKNOWN)
options:
  since:
    description: Epoch seconds; XID lines of the kernel log from then on count (0 counts all since boot).
    type: float
    default: 0
  within_s:
    description: With O(since) 0, XID lines of the last this many seconds on the host's clock count (0 counts all since boot).
    type: float
    default: 0
  devices: {description: The GPU indices to judge; empty judges all., type: list, elements: int, default: []}
  required:
    description:
      - The host is meant to have a GPU, so no nvidia-smi is a problem (RV(healthy) false).
      - False only where the host is declared to have no GPU (the cycle passes it from the sweep's backends, false when
        none of them runs only on a GPU); there, no nvidia-smi gives RV(no_gpu) true, RV(checked) and RV(healthy) false, and no
        problem. A host whose nvidia-smi is there is judged either way, and O(expect) or O(devices) need one whatever
        this says.
    type: bool
    default: true
  dcgm:
    description: Run C(dcgmi diag -r 1) - C(auto) where dcgmi is installed, C(always) (missing is a problem), C(never).
    type: str
    choices: [auto, always, never]
    default: auto
  rules: {description: "Overrides of the rules, e.g. C({temperature_c: {max: 80}})", type: dict, default: {}}
  command_timeout: {description: Seconds each command may take (dcgmi diag -r 1 takes about a minute)., type: float, default: 120}
  phase:
    description: C(post) right after a sweep, where temperature and thermal clock events only warn (the sweep's own heat).
    type: str
    choices: [pre, post]
    default: pre
  expect:
    description:
      - The GPUs an earlier check saw (their UUIDs, from RV(gpus)); one that nvidia-smi no longer lists is a problem
        (a GPU that fell off the bus). O(devices) that nvidia-smi does not list are problems too.
    type: list
    elements: str
    default: []
seealso:
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: >-
      The benchmark this check guards - run with O(phase=pre) before the sweep (a sick GPU's times would lie) and
      O(phase=post) right after it, with O(since) the first check's RV(host_time).
  - module: inference_ops.benchmark_cycle.sweep_report
    description: Takes both phases' results as its C(gpu_health) option, for the report and the history line.
  - module: inference_ops.benchmark_cycle.inference_unit
    description: Starts the server on these GPUs again after the sweep; a GPU with a problem is not one to serve from.
  - name: NVIDIA XID catalogue
    description: What each XID means.
    link: https://docs.nvidia.com/deploy/xid-errors/index.html
  - name: DCGM diagnostics
    description: Run levels of dcgmi diag.
    link: https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html
"""

EXAMPLES = r"""
- name: Refuse to benchmark on a sick GPU
  inference_ops.benchmark_cycle.gpu_health:
    since: "{{ cycle_started_at }}"
  register: health
  failed_when: not health.healthy
"""

RETURN = r"""
checked:
  description: nvidia-smi was there and was run (false on a host without it, where RV(healthy) is false too).
  returned: always
  type: bool
  sample: true
healthy:
  description:
    - GPUs were judged and no reading crossed a rule of level fail (RV(problems) is empty).
    - False whenever nothing was judged, RV(no_gpu) included (no GPU is not a healthy GPU).
  returned: always
  type: bool
  sample: false
no_gpu:
  description:
    - The host has no nvidia-smi and was declared to have no GPU (O(required=false)) - nothing was judged and nothing is
      wrong; the caller skips what needs a GPU. False everywhere else.
  returned: always
  type: bool
  sample: false
problems:
  description:
    - What fails the check, each naming the GPU, the reading and its value; also an unreadable or hung nvidia-smi,
      an XID on a PCI address nvidia-smi does not list, and failed DCGM tests.
  returned: always
  type: list
  elements: str
  sample:
    - >-
      GPU 0 (NVIDIA H200, GPU-17e71e43-915a-9ef6-d571-5812c9a8a04b): remapped_rows_pending=True
      (rows waiting to be remapped (a GPU reset is needed))
concerns:
  description:
    - What only warns (persistence off, aggregate ECC, the software power cap, application XIDs, an unreadable kernel log,
      a DCGM diagnostic that could not run, a reading the GPU should give that is missing or N/A, and in O(phase=post)
      temperature and thermal clock events).
  returned: always
  type: list
  elements: str
  sample:
    - "GPU 0 (NVIDIA H200, GPU-17e71e43-915a-9ef6-d571-5812c9a8a04b): XID 13 in the kernel log since the cycle started (application faults)"
gpus:
  description:
    - Each GPU's readings from C(nvidia-smi -q -x) (those in O(devices), or all), with the XIDs matched to its PCI
      address (C(xid)) and the names of the readings that crossed a rule (C(problems)).
    - C(unknown) names the readings this GPU should give and did not (missing or N/A), each a concern; none is read
      as 0 or No. A reading the GPU legitimately leaves N/A is null and not a concern - page retirement on a GPU that
      remaps rows (Ampere and later, as the real H200 reports it), row remapping on one that retires pages.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-17e71e43-915a-9ef6-d571-5812c9a8a04b
      name: NVIDIA H200
      pci: "00000000:00:06.0"
      persistence_off: false
      temperature_c: 33
      ecc_uncorrectable_volatile: 0
      ecc_uncorrectable_aggregate: 0
      retired_pages_pending: null
      remapped_rows_pending: true
      remapped_rows_failure: false
      throttle: []
      recovery_action: []
      repair_pending: []
      power_capped: false
      clock_events: [gpu_idle]
      xid: [13]
      unknown: []
      problems: [remapped_rows_pending]
xid_events:
  description:
    - The kernel log's C(NVRM Xid) lines since O(since) (or O(within_s)), each with its PCI address, XID, C(mig) (the MIG
      instance the driver names, e.g. C(GPU-I:05 GPU-CI:00), empty for none) and line; a line in a form not known here
      has C(xid) null and is a problem.
    - Null when the kernel log could not be read, or nvidia-smi failed or is missing on a host meant to have a GPU
      (unknown, not clean).
  returned: always
  type: list
  elements: dict
  sample:
    - pci: "0000:00:06"
      xid: 13
      mig: ""
      line: >-
        1796126001.204318 vm kernel: NVRM: Xid (PCI:0000:00:06): 13, pid=48213, name=python3,
        Graphics Exception: ESR 0x50df30=0x102000e
kernel_log:
  description:
    - Where the XIDs were read from, C(journalctl) or C(dmesg), or why they could not be read.
    - Empty when nvidia-smi is missing or failed (the kernel log is then not read).
  returned: always
  type: str
  sample: journalctl
dcgm:
  description:
    - The DCGM diagnostic (C(dcgmi diag -r 1 -j)) - C(ran), the C(failed) tests, and C(why) it did not run
      (C(why) is left out when nvidia-smi is missing or failed).
  returned: always
  type: dict
  sample: {ran: true, failed: [], why: ""}
host_time:
  description: The host's clock (epoch seconds) when read; the next check's O(since).
  returned: always
  type: float
  sample: 1796128527.9801645
msg:
  description: Why nothing was judged.
  returned: when the host has no nvidia-smi
  type: str
  sample: >-
    no nvidia-smi on this host, which is declared to have no GPU (required=false): nothing judged;
    there is no GPU here to be healthy or sick
"""

import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_gpuhealth import (
    dcgm_failures,
    judge,
    parse_smi_xml,
    rules_problems,
    without_smi,
    xid_events,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import (
    HEARTBEAT_OPTION,
    CommandError,
    beat_done,
    beat_for,
    check_timeout,
)
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import run as host_run


def kernel_log(module: AnsibleModule, since: float, timeout: float) -> tuple[list[dict[str, Any]] | None, str]:
    """XID lines from the journal's kernel messages, else dmesg; (None, why) when neither has any
    kernel line at all (a container sees none: unknown, not clean)."""
    journalctl = module.get_bin_path("journalctl")
    if journalctl:
        try:
            rc, out, _err = host_run([journalctl, "-k", "-b", "-q", "--no-pager", "-o", "short-unix"], timeout)
        except CommandError:
            rc, out = 1, ""
        lines = [ln for ln in out.splitlines() if ln.strip()]
        if rc == 0 and lines:
            recent = [ln for ln in lines if _stamp(ln) is None or _stamp(ln) >= since]
            return xid_events("\n".join(recent)), "journalctl"
    dmesg = module.get_bin_path("dmesg")
    if dmesg:
        try:
            rc, out, _err = host_run([dmesg], timeout)
        except CommandError:
            rc, out = 1, ""
        if rc == 0 and out.strip():
            # dmesg's [seconds since boot] on the wall clock: the boot time is now - /proc/uptime
            try:
                with open("/proc/uptime", encoding="ascii") as fh:
                    boot = time.time() - float(fh.read().split()[0])
            except (OSError, ValueError):
                boot = None
            recent = [ln for ln in out.splitlines()
                      if boot is None or _boot_stamp(ln) is None or boot + (_boot_stamp(ln) or 0) >= since]
            return xid_events("\n".join(recent)), "dmesg"
    return None, "no kernel log readable here (journalctl -k and dmesg show nothing)"


def _boot_stamp(line: str) -> float | None:
    """dmesg's `[  12.345678] ...` stamp: seconds since boot."""
    match = re.match(r"\[\s*(\d+\.\d+)\]", line)
    return float(match.group(1)) if match else None


def _stamp(line: str) -> float | None:
    head = line.split(" ", 1)[0]
    try:
        return float(head)
    except ValueError:
        return None


SPEC: dict[str, Any] = {
    "since": {"type": "float", "default": 0},
    "within_s": {"type": "float", "default": 0},
    "devices": {"type": "list", "elements": "int", "default": []},
    "required": {"type": "bool", "default": True},
    "dcgm": {"type": "str", "choices": ["auto", "always", "never"], "default": "auto"},
    "rules": {"type": "dict", "default": {}},
    "command_timeout": {"type": "float", "default": 120},
    "phase": {"type": "str", "choices": ["pre", "post"], "default": "pre"},
    "expect": {"type": "list", "elements": "str", "default": []},
    "heartbeat": HEARTBEAT_OPTION,
}


def dcgm_diag(module: AnsibleModule) -> dict[str, Any]:
    """`dcgmi diag -r 1 -j` where DCGM is installed and not `never`: ran, the failed checks, and why
    it did not run (a failure only with `always`)."""
    p = module.params
    dcgm: dict[str, Any] = {"ran": False, "failed": [], "why": ""}
    dcgmi = module.get_bin_path("dcgmi") if p["dcgm"] != "never" else None
    if dcgmi:
        try:
            _rc, dout, derr = host_run([dcgmi, "diag", "-r", "1", "-j"], p["command_timeout"])
            failed = dcgm_failures(dout)
            if failed is None:  # no JSON: its host engine is not running; a problem only when asked for
                dcgm = {"ran": False, "failed": [], "why": "dcgmi diag gave no JSON: %s" % (derr or dout).strip()[:200]}
            else:
                dcgm = {"ran": True, "failed": failed, "why": ""}
        except CommandError as err:
            dcgm = {"ran": True, "failed": ["dcgmi diag -r 1 did not finish: %s" % err], "why": ""}
    elif p["dcgm"] == "always":
        dcgm["why"] = "dcgmi is not installed"
    if dcgm["why"] and p["dcgm"] == "always":
        dcgm["failed"] = ["not run (%s; dcgm=always)" % dcgm["why"]]
    return dcgm


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    try:
        check_timeout(p["command_timeout"], "command_timeout", 3600)
    except ValueError as err:
        module.fail_json(msg=str(err))
    # nvidia-smi, the kernel log and DCGM's diagnostic: command_timeout each at most
    beaten = beat_for(module, 3 * p["command_timeout"], time.time())
    bad = rules_problems(p["rules"])
    if bad:
        module.fail_json(msg="rules: " + "; ".join(bad))
    now = time.time()
    smi = module.get_bin_path("nvidia-smi")
    if not smi:  # never healthy: a problem unless the host is declared GPU-less
        verdict = without_smi(p["required"], p["expect"] + [str(i) for i in p["devices"]])
        module.exit_json(changed=False, concerns=[], xid_events=[] if verdict["no_gpu"] else None, kernel_log="",
                         dcgm={"ran": False, "failed": []}, host_time=now, **verdict)
    try:
        rc, out, err = host_run([smi, "-q", "-x"], p["command_timeout"])
        if rc != 0:
            raise ValueError("nvidia-smi -q -x exited %d: %s" % (rc, (err or out).strip()[:300]))
        gpus = parse_smi_xml(out)
    except (CommandError, ValueError) as err:  # a GPU that cannot be read is not a healthy one
        module.exit_json(changed=False, checked=True, healthy=False, no_gpu=False, problems=["%s (a wedged GPU or driver?)" % err],
                         concerns=[], gpus=[], xid_events=None, kernel_log="", dcgm={"ran": False, "failed": []}, host_time=now)
    if p["devices"]:
        gpus = [g for g in gpus if g["index"] in p["devices"]]
    xids, source = kernel_log(module, p["since"] or (now - p["within_s"] if p["within_s"] > 0 else 0), p["command_timeout"])
    dcgm = dcgm_diag(module)
    verdict = judge(gpus, xids, dcgm["failed"], p["rules"], p["phase"], p["expect"] + [str(i) for i in p["devices"]])
    if dcgm["why"] and p["dcgm"] == "auto":
        verdict["warnings"].append("DCGM diagnostic not run: %s" % dcgm["why"])
    verdict["concerns"] = verdict.pop("warnings")  # `warnings` is Ansible's own key: it would be taken out of the result
    beat_done(module, beaten)  # read: the promise shrinks from the reads' worst case to the grace
    module.exit_json(changed=False, checked=True, no_gpu=False, xid_events=xids, kernel_log=source, dcgm=dcgm, host_time=now,
                     **verdict)


if __name__ == "__main__":
    main()
