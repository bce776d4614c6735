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
  - Reads the sweep JSON fetched from a host (every backend and routing of one run), writes
    C(<name>.report.md) and C(<name>.png) next to it (C(<name>) is the JSON's file name without
    C(.json)), and appends one line to O(history).
  - The report has the primary backend's table (with the torch bf16 reference's time and the INT4 speed-up
    when torch ran), every backend side by side per routing with its ratio to the roofline floor and the
    fastest per M, and the plot all backends with both floors.
  - The report compares with the previous run of the same host, shape, backend and device kind.
  - Run it on the controller (C(delegate_to) localhost).
version_added: "1.0.0"
options:
  result: {description: Path of the primary sweep JSON on the controller., type: path, required: true}
  host: {description: Inventory name of the host the sweep ran on., type: str, required: true}
  stamp: {description: Timestamp of the cycle (names the run)., type: str, required: true}
  history: {description: The history file shared by all cycles., type: path, required: true}
  gpu_health:
    description: The cycle's GPU health readings by phase (pre, post), for the report and the history line.
    type: dict
    default: {}
  plot:
    description: Also draw the PNG (needs matplotlib on the controller); a failed plot is a warning, never a lost history line.
    type: bool
    default: true
author:
  - benchmark-cycle contributors (!UNKNOWN)
attributes:
  check_mode: {support: full, description: Renders the report in memory and writes nothing.}
  diff_mode: {support: none, description: Nothing to show as a diff.}
seealso:
  - module: inference_ops.benchmark_cycle.marlin_sweep
    description: Runs the sweep on the host whose JSON result (fetched to the controller) this module renders as O(result).
  - module: inference_ops.benchmark_cycle.gpu_health
    description: Its readings before and after the sweep (C(phase=pre), C(phase=post)) are what O(gpu_health) takes.
"""

EXAMPLES = r"""
- name: Report the sweep
  inference_ops.benchmark_cycle.sweep_report:
    result: results/ct200/20261129T120000Z/sweep-tp1-sglang.json
    host: ct200
    stamp: 20261129T120000Z
    history: results/history.jsonl
  delegate_to: localhost
"""

RETURN = r"""
report:
  description: Path of the rendered report, C(<name>.report.md) next to the sweep JSON (in check mode, where it would be written).
  returned: success
  type: str
  sample: results/h200/20261201T100246Z/sweep-tp8-sglang.report.md
plot:
  description: Path of the PNG plot; null when it was not drawn (O(plot=false), or matplotlib failed with a warning).
  returned: success, except in check mode
  type: str
  sample: results/h200/20261201T100246Z/sweep-tp8-sglang.png
previous:
  description:
    - Stamp of the earlier run of the same host, shape, backend and device kind the report compares with.
    - Null when the history has none.
  returned: success
  type: str
  sample: 20261129T120000Z
knee_m:
  description: Knee of the primary sweep (the smallest M within 10% of the plateau, from the result's C(knee_m)); null if it has none.
  returned: success
  type: int
  sample: 256
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_host import write_atomic
from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_report import (
    history_line,
    plot,
    previous_run,
    read_history,
    render,
)

SAFE_NAME = re.compile(r"^[A-Za-z0-9_@:][A-Za-z0-9_.:@-]*\Z")


def load(module: AnsibleModule, path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as err:
        module.fail_json(msg="cannot read sweep result %s: %s" % (path, err))
    if not isinstance(data, dict) or not isinstance(data.get("points"), list) or not all(
            isinstance(pt, dict) and isinstance(pt.get("m"), int) and isinstance(pt.get("ms"), (int, float))
            for pt in data["points"]):
        module.fail_json(msg="sweep result %s is not a marlin_sweep result (a JSON object whose points each have m and ms)"
                         % path)
    if not data.get("points"):
        module.fail_json(msg="sweep result %s has no points (status %s)" % (path, data.get("status")))
    return data


SPEC = {
    "result": {"type": "path", "required": True},
    "host": {"type": "str", "required": True},
    "stamp": {"type": "str", "required": True},
    "history": {"type": "path", "required": True},
    "plot": {"type": "bool", "default": True},
    "gpu_health": {"type": "dict", "default": {}},
}


def main() -> None:
    module = AnsibleModule(argument_spec=SPEC, supports_check_mode=True)
    p = module.params
    for key in ("host", "stamp"):  # both become file names on the controller
        if not SAFE_NAME.match(p[key]):
            module.fail_json(msg="%s=%r is not a safe file name (letters, digits and _.:@- only, not starting with . or -)"
                             % (key, p[key]))
    primary = load(module, p["result"])
    out_dir = os.path.dirname(p["result"])
    base = os.path.splitext(os.path.basename(p["result"]))[0]
    report_path = os.path.join(out_dir, base + ".report.md")
    png_path = os.path.join(out_dir, base + ".png")
    history = read_history(p["history"])
    prev = previous_run(history, p["host"], primary, p["stamp"])
    try:
        text = render(p["host"], p["stamp"], primary, prev, os.path.basename(png_path), p["gpu_health"])
    except (KeyError, TypeError, ValueError) as err:
        module.fail_json(msg="cannot render the report of %s: the result lacks %s" % (p["result"], err))
    if module.check_mode:
        module.exit_json(changed=True, report=report_path, previous=prev and prev["stamp"], knee_m=primary.get("knee_m"))
    write_atomic(report_path, text)
    # the history line first: a plot that fails (no matplotlib, a full disk) must not lose it; a report rendered again
    # (a report run on its own: --tags report) adds no second line for the same run
    if not any(h.get("host") == p["host"] and h.get("stamp") == p["stamp"] and h.get("report") == report_path for h in history):
        os.makedirs(os.path.dirname(p["history"]) or ".", exist_ok=True)
        with open(p["history"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(history_line(p["host"], p["stamp"], primary, report_path, p["gpu_health"]), sort_keys=True) + "\n")
    plotted = None
    if p["plot"]:
        title = "%s %s tp%s %s" % (p["host"], p["stamp"], primary.get("tp_size"), primary.get("backend"))
        try:
            plot(png_path, title, primary)
            plotted = png_path
        except Exception as err:
            module.warn("no plot for %s: %s: %s (the report and the history line are written)"
                        % (p["result"], type(err).__name__, err))
    module.exit_json(changed=True, report=report_path, plot=plotted,
                     previous=prev and prev["stamp"], knee_m=primary.get("knee_m"))


if __name__ == "__main__":
    main()
