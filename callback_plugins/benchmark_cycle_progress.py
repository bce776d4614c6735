# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Callback: one readable line per readiness or drain retry, in a terminal and in AWX alike.

    ct200 reload 04:35  warming  "Capture decode CUDA graph"  (92 retries left)

It prints through the display (stdout), so AWX's job output shows the same lines; it adds lines,
it does not replace the stdout callback.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ansible.plugins.callback import CallbackBase

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "filter_plugins"))
from bc_filters import reload_line

DOCUMENTATION = r"""
name: benchmark_cycle_progress
type: aggregate
short_description: One progress line per readiness/drain retry of the benchmark cycle
description:
  - For every retry of an C(inference_health) task, prints the host, time since the unit started,
    the phase, the last start-up stage from the journal and the retries left.
requirements:
  - enable in ansible.cfg with C(callbacks_enabled = benchmark_cycle_progress)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "benchmark_cycle_progress"
    CALLBACK_NEEDS_ENABLED = True

    def v2_runner_retry(self, result: Any) -> None:
        res = result._result
        if "phase" not in res and "in_flight" not in res:
            return
        host = result._host.get_name()
        left = res.get("retries", 0) - res.get("attempts", 0)
        if "in_flight" in res and res.get("in_flight") is not None:
            self._display.display("%s drain  %s request(s) in flight  (%d retries left)" % (host, res["in_flight"], left))
            return
        self._display.display(reload_line(res, host, left))
