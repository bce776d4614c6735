# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which strategy a cycle takes to free the GPU for its sweep: a pure function of measured numbers.

Three strategies, least disruptive first: `beside` (the sweep fits in the memory free now: the
service keeps serving), `release` (it fits once the engine has released its KV cache in place:
minutes of reload become the sweep's own seconds) and `stop` (drain, stop, start, reload). The
inputs are the sweep's estimate, the device's free memory, and what the live server says it can
release (bc_release.support). No imports: the filter plugin and the modules both use it.
"""

from __future__ import annotations

from typing import Any

POLICIES = ("auto", "always", "never", "release")
STRATEGIES = ("beside", "release", "stop")


def choose(policy: str, sizing: dict[str, Any], sup: dict[str, Any] | None) -> dict[str, Any]:
    """The cycle's strategy and why. `sizing`: fits, has_gpu, need_mib, free_mib (the device's,
    now); `sup`: `support()` (None when the server was not asked). A `release` asked for that
    the server cannot do is a ValueError naming the fix."""
    if policy not in POLICIES:
        raise ValueError("bc_stop_policy=%s: use one of %s" % (policy, "|".join(POLICIES)))
    sup = sup or {"supported": False, "releasable_gib": None, "why": "the server was not asked"}
    need, free = int(sizing.get("need_mib") or 0), int(sizing.get("free_mib") or 0)
    releasable = None if sup.get("releasable_gib") is None else int(sup["releasable_gib"] * 1024)
    if policy == "always":
        return {"strategy": "stop", "why": "bc_stop_policy=always"}
    if policy == "never":
        return {"strategy": "beside", "why": "bc_stop_policy=never"}
    if policy == "release":
        if not sup.get("supported"):
            raise ValueError("bc_stop_policy=release, but %s. Use bc_stop_policy=auto to fall back to a stop"
                             % sup.get("why"))
        return {"strategy": "release", "why": "bc_stop_policy=release"}
    if sizing.get("fits"):
        return {"strategy": "beside", "why": "the sweep fits beside the live service (%d MiB needed, %d MiB free)"
                % (need, free)}
    if not sizing.get("has_gpu"):
        return {"strategy": "stop", "why": "no GPU: a release frees GPU memory, and the sweep needs host memory"}
    if not sup.get("supported"):
        return {"strategy": "stop", "why": "the sweep does not fit beside the service (%d MiB needed, %d MiB free) "
                "and it cannot release its memory: %s" % (need, free, sup.get("why"))}
    if releasable is None:
        return {"strategy": "stop", "why": "the server does not say how much a release frees, so it is not "
                "relied on (bc_stop_policy=release asks for it anyway)"}
    if need <= free + releasable:
        return {"strategy": "release", "why": "the sweep fits once the KV cache is released (%d MiB needed, %d MiB "
                "free + %d MiB releasable)" % (need, free, releasable)}
    return {"strategy": "stop", "why": "the sweep does not fit even after a release (%d MiB needed, %d MiB free + "
            "%d MiB releasable)" % (need, free, releasable)}
