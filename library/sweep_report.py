#!/usr/bin/python
# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module: report.md, PNG plot and history line for fetched sweep results (controller side)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sweep_report
short_description: Render a sweep's report, plot and history line on the controller
description:
  - Reads the sweep JSON fetched from a host (and the torch reference run beside it), writes
    C(report.md) and C(sweep.png) next to it, and appends one line to C(history.jsonl).
  - The report compares with the previous run of the same host, shape, backend and device kind.
  - Run it with C(delegate_to: localhost).
version_added: "1.0.0"
options:
  result: {description: Path of the primary sweep JSON on the controller., type: path, required: true}
  reference: {description: Path of the torch reference sweep JSON, if one ran., type: path}
  host: {description: Inventory name of the host the sweep ran on., type: str, required: true}
  stamp: {description: Timestamp of the cycle (names the run)., type: str, required: true}
  history: {description: The history file shared by all cycles., type: path, required: true}
  plot: {description: Also draw the PNG (needs matplotlib on the controller)., type: bool, default: true}
author:
  - benchmark-cycle contributors
"""

EXAMPLES = r"""
- name: Report the sweep
  sweep_report:
    result: results/ct200/20261129T120000Z/sweep-tp1-sglang.json
    reference: results/ct200/20261129T120000Z/sweep-tp1-torch.json
    host: ct200
    stamp: 20261129T120000Z
    history: results/history.jsonl
  delegate_to: localhost
"""

RETURN = r"""
report: {description: Path of report.md., returned: success, type: str}
plot: {description: Path of the PNG plot., returned: when plot is true, type: str}
previous: {description: Stamp of the run compared with (null if none)., returned: success, type: str}
knee_m: {description: Knee of the primary sweep., returned: success, type: int}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.bc_report import history_line, plot, previous_run, read_history, render


def load(module: AnsibleModule, path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        module.fail_json(msg="cannot read sweep result %s: %s" % (path, err))
    if not data.get("points"):
        module.fail_json(msg="sweep result %s has no points (status %s)" % (path, data.get("status")))
    return data


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "result": {"type": "path", "required": True},
            "reference": {"type": "path"},
            "host": {"type": "str", "required": True},
            "stamp": {"type": "str", "required": True},
            "history": {"type": "path", "required": True},
            "plot": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    primary = load(module, p["result"])
    reference = load(module, p["reference"]) if p["reference"] else None
    out_dir = os.path.dirname(p["result"])
    base = os.path.splitext(os.path.basename(p["result"]))[0]
    report_path = os.path.join(out_dir, base + ".report.md")
    png_path = os.path.join(out_dir, base + ".png")
    history = read_history(p["history"])
    prev = previous_run(history, p["host"], primary, p["stamp"])
    text = render(p["host"], p["stamp"], primary, reference, prev, os.path.basename(png_path))
    if module.check_mode:
        module.exit_json(changed=True, report=report_path, previous=prev and prev["stamp"], knee_m=primary.get("knee_m"))
    with open(report_path, "w", encoding="utf-8") as fh:
        fh.write(text)
    if p["plot"]:
        title = "%s %s tp%s %s" % (p["host"], p["stamp"], primary.get("tp_size"), primary["backend"])
        plot(png_path, title, primary, reference)
    os.makedirs(os.path.dirname(p["history"]) or ".", exist_ok=True)
    with open(p["history"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps(history_line(p["host"], p["stamp"], primary, report_path), sort_keys=True) + "\n")
    module.exit_json(changed=True, report=report_path, plot=png_path if p["plot"] else None,
                     previous=prev and prev["stamp"], knee_m=primary.get("knee_m"))


if __name__ == "__main__":
    main()
