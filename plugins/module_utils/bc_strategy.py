# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which strategy a cycle takes to free the GPU for its sweep: a pure function of measured numbers.

Four strategies, least disruptive first: `beside` (the sweep fits in the memory free now: the
service keeps serving), `release` (it fits once the engine has released its KV cache in place:
minutes of reload become the sweep's own seconds), `release_all` (it fits only once the weights go too, and the
CUDA graph pool where the version backs it up: copied to pinned host memory and back, proven identical after) and
`stop` (drain, stop, start, reload). The inputs are the sweep's estimate, the device's free memory, and what the
live server says it can release (bc_release.support, its `whole` for release_all); and the cycle's worst case
(`budget`). No imports: the filter plugin and the modules both use it.
"""

from __future__ import annotations

import re
from typing import Any

POLICIES = ("auto", "always", "never", "release", "release_all")
STRATEGIES = ("beside", "release", "release_all", "stop")


def mib(gib: Any) -> int | None:
    return None if gib is None else int(float(gib) * 1024)


def whole_choice(sup: dict[str, Any], why: str) -> dict[str, Any]:
    """The release_all decision with what the roles need: the tags, what it frees, the copy's deadline."""
    whole = sup["whole"]
    return {"strategy": "release_all", "why": why, "tags": list(whole["tags"]), "resident": dict(whole.get("resident") or {}),
            "releasable_mib": mib(whole["releasable_gib"]), "move_timeout_s": whole.get("timeout_s"),
            "checker": whole.get("checker")}


# what the live server said of the key this cycle installs (`rotation` of choose): how it is said, and what a restart does
ROTATION = {
    True: ("is not the key the live server runs with (a rotation)", "it would go on refusing the new key",
           "a key rotation: the live server refuses the new key until it starts again"),
    None: ("may not be the key the live server runs with (asked with it alone, the server did not answer either way)",
           "it would go on refusing the new key", "whether the live server takes the new key is not known: a restart puts "
           "it in force"),
    "keyless": ("is not in force: the live server answers a request with no key at all (it started before a key was set)",
                "it would go on answering anyone without a key", "the live server answers without a key: a restart puts "
                "bc_api_key in force"),
}


def key_rotation(with_key: dict[str, Any] | None, without_key: dict[str, Any] | None) -> bool | str | None:
    """What the live server says of the key this cycle installs (choose's `rotation`), from two completion probes
    (inference_health results): asked with the key alone, and with no key at all. "keyless": it answered with no key
    (the key is not in force); False: it answered the key, or was not asked (no key, no running server); True: it
    refused the key (HTTP 401/403: a rotation); None: it said neither (a timeout, a 503: unknown is not "no
    rotation")."""
    if (without_key or {}).get("ready") is True:
        return "keyless"
    if not with_key or with_key.get("skipped") or with_key.get("ready") is True:
        return False
    return True if re.search(r"HTTP 40[13]", str(with_key.get("reason") or "")) else None


def forced(policy: str, sup: dict[str, Any], whole: dict[str, Any], whole_mib: int | None) -> dict[str, Any]:
    """The strategy a policy other than auto names, or a ValueError naming the fix where the server cannot do it."""
    if policy == "always":
        return {"strategy": "stop", "why": "bc_stop_policy=always"}
    if policy == "never":
        return {"strategy": "beside", "why": "bc_stop_policy=never"}
    if policy == "release":
        if not sup.get("supported"):
            raise ValueError("bc_stop_policy=release, but %s. Use bc_stop_policy=auto to fall back to a stop"
                             % sup.get("why"))
        return {"strategy": "release", "why": "bc_stop_policy=release"}
    if whole_mib is None:
        raise ValueError("bc_stop_policy=release_all, but the whole GPU cannot be released: %s. Use "
                         "bc_stop_policy=auto to fall back to a KV release or a stop" % whole["why"])
    return whole_choice(sup, "bc_stop_policy=release_all")


def choose(policy: str, sizing: dict[str, Any], sup: dict[str, Any] | None, rotation: bool | str | None = False) -> dict[str, Any]:
    """The cycle's strategy and why. `sizing`: fits, has_gpu, need_mib, free_mib (the device's,
    now); `sup`: `support()` (None when the server was not asked); `rotation`: the live server refuses the key this
    cycle installs (it runs with an older one, and takes the new one only when it starts again; None: asked, it did not
    say; "keyless": it answers with no key at all; False: no rotation). A `release` or
    `release_all` asked for that the server cannot do, or a rotation under a policy that never restarts, is a
    ValueError naming the fix."""
    if policy not in POLICIES:
        raise ValueError("bc_stop_policy=%s: use one of %s" % (policy, "|".join(POLICIES)))
    if rotation in ROTATION:
        seen, goes_on, why = ROTATION[rotation]
        if policy in ("never", "release", "release_all"):
            raise ValueError("bc_api_key %s, and it takes the new one only when it starts again, which bc_stop_policy=%s "
                             "never does: %s. Run this cycle with bc_stop_policy=auto or always" % (seen, policy, goes_on))
        return {"strategy": "stop", "why": why}
    sup = sup or {"supported": False, "releasable_gib": None, "why": "the server was not asked"}
    whole = sup.get("whole") or {}
    whole = dict(whole, why=whole.get("why") or sup.get("why") or "unknown")
    need, free = int(sizing.get("need_mib") or 0), int(sizing.get("free_mib") or 0)
    releasable = mib(sup.get("releasable_gib"))
    whole_mib = mib(whole.get("releasable_gib")) if whole.get("supported") else None
    if policy != "auto":
        return forced(policy, sup, whole, whole_mib)
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
    kv = "%d MiB needed, %d MiB free + %d MiB in a KV release" % (need, free, releasable)
    if whole_mib is None:
        return {"strategy": "stop", "why": "the sweep does not fit even after a KV release (%s), and the whole GPU "
                "cannot be released: %s" % (kv, whole["why"])}
    if need <= free + whole_mib:
        return whole_choice(sup, "the sweep fits only once the whole GPU is released (%s; %d MiB in a whole release: "
                            "%s)" % (kv, whole_mib, ", ".join(whole["tags"])))
    return {"strategy": "stop", "why": "the sweep does not fit even after a whole-GPU release (%s; %d MiB in a whole "
            "release)" % (kv, whole_mib)}


# the constants of the worst case, each once: a sweep's async margin over its timeout, the drain's last probe, a
# release or resume's HTTP calls, the pre-stop GPU check (DCGM included) and the post-sweep one (its commands at 60 s),
# readiness's last probe and the completion, the play's own tasks
ASYNC_MARGIN_S = 60
DRAIN_PROBE_S = 10
RELEASE_S = 90
GPU_PRE_CHECK_S = 360
GPU_POST_CHECK_S = 120
READINESS_PROBE_S = 40
OVERHEAD_S = 60


def budget(n: dict[str, Any]) -> dict[str, Any]:
    """The cycle's worst case, phase by phase, in seconds, and the parts that follow from it: `total_s` (what an AWX
    job timeout must exceed: it kills the job and skips `always`), `lease_s` (the lock's lease: past it the holder is
    dead) and `switch_after_s` (the dead-man switch's outer bound, from its arm before the stop: the stop, the GPU
    wait, every sweep and the post-sweep GPU check, plus the margin). `n`: drain_deadline_s, release (a release may
    be tried), release_move_s (a whole release's copy deadline, each way and each checksum; 0 or absent: none), stop_timeout_s,
    gpu_wait_s, has_gpu, sweep_runs, sweep_timeout_s, readiness_timeout_s, margin_s, and
    gpu_check (the stop waits for the GPU to free; has_gpu when absent). The switch is armed before a release: a
    release that frees too little is resumed and followed by a stop, all inside the switch's window. With `recovery`
    (playbooks/recover.yml), the phases a recovery runs: no drain, release, sweep or GPU check; a restart's stop, the
    readiness and a rollback's (it needs none of the sweep's numbers)."""
    cycle = not n.get("recovery")
    gpu = bool(n.get("has_gpu")) and cycle
    gpu_wait = int(n.get("gpu_wait_s") or 0) if bool(n.get("gpu_check", gpu)) else 0
    phases = {"drain": int(n["drain_deadline_s"]) + DRAIN_PROBE_S if cycle else 0,
              # a whole release copies the weights to the host and back, and hashes them before and after (identity):
              # each of the four takes the copy's deadline
              "release": RELEASE_S + 4 * int(n.get("release_move_s") or 0) if cycle and n["release"] else 0,
              "gpu_pre_check": GPU_PRE_CHECK_S if gpu else 0,
              "stop": int(n["stop_timeout_s"]) + gpu_wait,
              "sweep": int(n["sweep_runs"]) * (int(n["sweep_timeout_s"]) + ASYNC_MARGIN_S) if cycle else 0,
              "gpu_post_check": GPU_POST_CHECK_S if gpu else 0,
              "readiness": int(n["readiness_timeout_s"]) + READINESS_PROBE_S,
              "rollback_readiness": int(n["readiness_timeout_s"]) + READINESS_PROBE_S,
              "overhead": OVERHEAD_S}
    total, margin = sum(phases.values()), int(n["margin_s"])
    return {"phases": phases, "total_s": total, "lease_s": total + margin,
            "switch_after_s": phases["release"] + phases["stop"] + phases["sweep"] + phases["gpu_post_check"] + margin}


def batches(count: int, serial: Any) -> list[int]:
    """The sizes of the roll's batches as ansible-core cuts `count` hosts by a play's `serial`
    (executor/playbook_executor.py _get_serialized_batches, utils/helpers.py pct_to_int): a number, a share ('25%',
    rounded down, at least 1) or a list of them whose last repeats; 0 or less: one batch of all."""
    steps = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    sizes, left, i = [], count, 0
    while left > 0:
        step = str(steps[i]).strip() if steps else "-1"
        size = (int(int(step[:-1]) / 100.0 * count) or 1) if step.endswith("%") else int(step)
        if size <= 0:
            sizes.append(left)
            break
        sizes.append(min(size, left))
        left -= sizes[-1]
        i = min(i + 1, len(steps) - 1)
    return sizes


def roll_problem(totals: list[Any], serial: Any, job_budget_s: Any, elapsed_s: Any, forks: Any = None) -> str:
    """Why the roll may outlast the job's time limit, or "" (an AWX job timeout kills the job and skips `always`: a
    service stopped then is left to the host's dead-man switch). The roll's worst case: the time already spent in the
    job, then batch after batch the worst case of its slowest host, times the waves its hosts take when the batch
    holds more hosts than `forks` (the linear strategy runs each task on at most `forks` hosts at once). `totals`:
    every target's worst case (budget's total_s) in the roll's order, 0 for a host that will not cycle (it still
    holds its place in the batches, as ansible-core cuts them from every target); `elapsed_s`: seconds since the job
    began, None when that is not known (never read as none spent)."""
    limit = int(job_budget_s or 0)
    if limit <= 0:
        return ""
    fix = ("raise the job's timeout, roll fewer hosts per job (--limit) or more per batch (bc_serial, within the forks), "
           "or lower bc_sweep_timeout_s, bc_readiness_timeout_s or bc_drain_deadline_s")
    if elapsed_s is None:
        return ("when the job began is not known (benchmark_cycle.yml's Target play notes it), so whether the roll fits "
                "bc_job_budget_s=%d cannot be told: run the cycle through benchmark_cycle.yml, or set bc_job_budget_s=0" % limit)
    width = int(forks or 0)
    worst, at = [], 0
    for size in batches(len(totals), serial):
        waves = -(-size // width) if width > 0 else 1
        worst.append(waves * max(int(t) for t in totals[at:at + size]))
        at += size
    spent = max(0, int(float(elapsed_s)))
    if spent + sum(worst) <= limit:
        return ""
    return ("the roll's worst case is %d s (%d s already spent in the job, then %d batch(es) by bc_serial=%s and %s "
            "forks, each its slowest host's worst case times its waves: %s s), over bc_job_budget_s=%d: %s"
            % (spent + sum(worst), spent, len(worst), serial, forks, " + ".join(map(str, worst)), limit, fix))


def sweep_alone(main_pid: Any, unit: str, sizing: dict[str, Any]) -> str:
    """Why a sweep run on its own (`--tags sweep`: no drain, no stop, no start) is refused, or "" when it may run.
    It never frees the GPU, so it runs only where the GPU is free already: the unit runs no process (MainPID 0), or the
    sweep fits in the device's free memory beside it. A MainPID that could not be read is not "not running"."""
    pid = str(main_pid).strip()
    if not pid.isdigit():
        return "whether %s runs is not known (systemctl show -p MainPID gave %r)" % (unit, pid[:40])
    if int(pid) == 0:
        return ""
    need, free = int(sizing.get("need_mib") or 0), int(sizing.get("free_mib") or 0)
    if sizing.get("has_gpu") and sizing.get("fits"):
        return ""
    where = ("the sweep needs %d MiB and %d MiB are free beside it" % (need, free) if sizing.get("has_gpu")
             else "no GPU: the sweep would share the host's memory and CPU with it")
    return ("%s runs (MainPID %s) and holds the GPU: %s. A sweep on its own never stops a service: run the whole "
            "cycle (no --tags), or stop %s first" % (unit, pid, where, unit))
