# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a probe of an inference server belongs to a wait: shared by inference_health and inference_load_info (the spec
is bc_probe.WAIT_SPEC)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  restarts_baseline:
    description: NRestarts of O(unit) when the cycle started it; a larger value is a crash loop and fails the probe.
    type: int
  failures_since:
    description:
      - Epoch seconds on the host's clock; a failure line of the journal counts only from then on (the wait's own
        window), so that a line an earlier phase of the same run logged is not taken for the state now. 0 counts the
        whole run of the unit.
    type: float
    default: 0
  journal_lines:
    description: How many journal lines since the unit's start to scan for progress and failure lines.
    type: int
    default: 400
  deadline:
    description:
      - Wall-clock end of the whole wait this probe belongs to (seconds since the epoch, on the host's clock). The
        HTTP requests are cut at what is left of it (at least 1 s) and C(deadline_passed) says when it is over, so a
        wait of C(retries) probes ends at the deadline however slowly the server answers.
    type: float
  secrets:
    description: Values removed from every text this module returns (journal lines, errors), besides O(api_key).
    type: list
    elements: str
    default: []
"""
