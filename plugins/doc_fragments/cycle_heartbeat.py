# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's heartbeat option, shared by every module that is a contact of a cycle with its host."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  heartbeat:
    description:
      - The cycle's heartbeat - this call is a contact of the controller with the host, and the controller promises
        the next one by the end of this call's own worst case (which the module knows from its parameters) plus
        O(heartbeat.for_s) seconds (the delay to its next call and a grace). Written before the call does anything
        else, as whole epoch seconds, into O(heartbeat.path) (in the cycle's lock directory, which must exist - a
        heartbeat never re-creates a lock).
      - Past that time the controller is dead (killed, cancelled in AWX, cut off), whatever its pid or host name
        says - the host's dead-man switch (M(inference_ops.benchmark_cycle.inference_switch) with C(state=armed)) brings the service back,
        and M(inference_ops.benchmark_cycle.host_lock) lets another cycle take the lock over.
      - A heartbeat that cannot be written fails nothing; the result says why, and the switch reads the controller
        as dead (the safe side).
    type: dict
    suboptions:
      path: {description: The heartbeat file., type: path, required: true}
      for_s:
        description: Seconds of silence after this call - the delay to the next one and a grace (at least 1).
        type: int
        required: true
      token:
        description:
          - The cycle's lock token - the heartbeat is written only while the lock (C(owner.json) beside the heartbeat)
            is this cycle's. A dead cycle's call still running (an orphaned poll) never keeps another cycle's switch quiet.
        type: str
"""
