# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a cycle brings its service back (roles/cycle/tasks/bring_back.yml: the cycle's `always`, and the
recovery's): one pure function of the lock's record - the cycle's journal on the host, written before each step
that must be undone (router out, stopped, released) and carried over to the cycle that takes a dead one's lock -
so each decision is written once and tested as a table of record states.

- a service the record says was stopped (by this cycle or a dead one), or (a recovery) a unit found down, is
  started;
- one this cycle released in place (the record's `released_by` is its token) and whose release answered is resumed
  (once);
- one whose memory state is not known is restarted: a release that did not answer, or a dead cycle's release
  (a resume that already ran once would kill an SGLang server);
- a service the record says nothing about is never started or restarted here.

The router is owed the host when the record says it left the router (`lb_removed`, written before the remove
hook: a cycle that dies during the hook is undone by the next; a hook that fails here leaves the debt as it was);
it takes the host back unless a GPU went bad during the sweep and the policy keeps such a host out (`unrouted`).
A post-sweep check that should have run and left no reading is a sick GPU: absent is never healthy. Only a host
whose pre-sweep check found it declared GPU-less (no nvidia-smi, none expected) has no post-sweep check owed; a
post-sweep report that is there is believed either way.

It never raises: it runs where a stopped service must come back whatever else is wrong. What it cannot read (an
unknown policy, an unknown key in a lock's record, a record that is not a mapping, a flag that is not true or false,
an input it does not know) is decided the safe way - the service started, the host kept out of the router when a GPU
went bad - and listed in `problems`, which the bring-back adds to the cycle's failure. No imports: the filter plugin
uses it.
"""

from __future__ import annotations

from typing import Any

ACTIVE = ("active", "activating", "reloading")
POLICIES = ("serve", "unrouted")
INPUTS = ("record", "token", "release_state", "unit_state", "gpu_pre", "gpu_none", "gpu_swept", "gpu_post_healthy",
          "gpu_problems", "policy", "strategy")
# the lock's record: the flags, then the words beside them
RECORD = ("lb_removed", "stopped", "released", "restarted", "rolled_back")
RECORD_WORDS = ("released_by", "released_invocation")


def _flag(state: dict[str, Any], name: str, problems: list[str], where: str = "") -> bool:
    value = state.get(name)
    if value is None or isinstance(value, bool):
        return bool(value)
    read = str(value).strip().lower() in ("true", "yes", "1", "on")
    problems.append("bring back: %s%s=%r is not true or false; read as %s" % (where, name, value, read))
    return read


def record_flags(record: Any, problems: list[str]) -> dict[str, bool]:
    """The lock's record as flags. A record that is not a mapping is read as the worst it could say (stopped, out of
    the router: the service is started and the host routed once it answers) and named; keys this version does not
    know are named and ignored."""
    if not isinstance(record, dict):
        problems.append("bring back: the lock's record %r is not a mapping: read as stopped and out of the router" % (record,))
        return dict(dict.fromkeys(RECORD, False), stopped=True, lb_removed=True)
    unknown = sorted(set(record) - set(RECORD) - set(RECORD_WORDS))
    if unknown:
        problems.append("bring back: the lock's record has key(s) this version does not know: %s (ignored)"
                        % ", ".join(unknown))
    return {k: _flag(record, k, problems, "the lock's record ") for k in RECORD}


def plan(state: dict[str, Any]) -> dict[str, Any]:
    """What the bring-back does, from `state`: record (the lock's record as the host holds it when the bring-back
    begins: this cycle's entries and those carried over from a dead holder), token (this cycle's), release_state (what
    this cycle's release left the server as: released, serving, unknown; None when it never ran), unit_state (a
    recovery: the unit's ActiveState as found; None in a cycle), gpu_pre (a pre-sweep health report exists), gpu_none
    (that report found no nvidia-smi on a host declared GPU-less: no GPU to judge after the sweep; a host meant to
    have one never gets here, its pre-check failed), gpu_swept (the sweep ran), gpu_post_healthy (the post-sweep
    report's verdict; None when it left none), gpu_problems, policy (bc_gpu_health_policy) and strategy. What it
    cannot read is in `problems` (see above)."""
    problems: list[str] = []
    unknown = sorted(set(state) - set(INPUTS))
    if unknown:
        problems.append("bring back: unknown input(s) %s (known: %s): ignored" % (", ".join(unknown), ", ".join(INPUTS)))
    policy = state.get("policy")
    if policy not in POLICIES:
        problems.append("bc_gpu_health_policy=%r is not one of %s: read as unrouted (a host whose GPU went bad stays out "
                        "of the router)" % (policy, "|".join(POLICIES)))
        policy = "unrouted"
    raw = state.get("record", {})
    record = record_flags(raw, problems)
    token = state.get("token")
    mine = bool(token) and isinstance(raw, dict) and raw.get("released_by") == token
    unit_state = state.get("unit_state")
    found_down = unit_state is not None and unit_state not in ACTIVE and not record["released"]
    stopped = record["stopped"] or found_down
    # resumed only by the cycle that released it, and only a release that answered: anything else is restarted
    resume = record["released"] and not stopped and mine and state.get("release_state") == "released"
    restart = record["released"] and not stopped and not resume
    router_owed = record["lb_removed"]
    # only a real true skips the check (a flag it cannot read owes the check, and says so)
    gpu_none = _flag(state, "gpu_none", problems) and state.get("gpu_none") is True
    gpu_check = _flag(state, "gpu_pre", problems) and _flag(state, "gpu_swept", problems) and not gpu_none
    healthy = state.get("gpu_post_healthy")
    gpu_sick = (healthy is not True) if healthy is not None else gpu_check
    route_back = router_owed and not (gpu_sick and policy == "unrouted")
    return {"start": stopped, "found_down": found_down, "resume": resume, "restart": restart,
            "record_unreleased": resume or restart, "rollback_allowed": stopped or resume or restart,
            "touched": stopped or record["released"] or record["restarted"],
            "router_owed": router_owed, "route_back": route_back, "gpu_check": gpu_check, "gpu_sick": gpu_sick,
            "gpu_failure": _gpu_failure(state, router_owed, policy) if gpu_sick else "", "problems": problems}


def readiness_keys(server_keys: Any, record: Any) -> list[str]:
    """The keys besides the unit's own that readiness accepts from the server: the keys the running server may hold
    (`server_keys`, read from the host before the cycle) only where the lock's `record` says the server that answers
    was not started with the new unit - never stopped (beside, resumed), or rolled back to the previous unit. A server
    stopped (by this cycle or a dead one) and started again, or restarted by this cycle, must take the unit's key: []
    then. A flag it cannot read counts as set where that accepts fewer keys (stopped, restarted) and unset where it
    would accept more (rolled_back); a record that is not a mapping accepts none: an unknown never widens what counts
    as ready."""
    keys = [k for k in server_keys if isinstance(k, str) and k] if isinstance(server_keys, list) else []
    if not isinstance(record, dict):
        return []

    def truly(value: Any) -> bool:
        return value is True or (value is not None and value is not False
                                 and str(value).strip().lower() not in ("false", "no", "0", "off", ""))
    rolled_back = record.get("rolled_back") is True
    new_unit = truly(record.get("stopped")) or truly(record.get("restarted"))
    return keys if rolled_back or not new_unit else []


def _gpu_failure(state: dict[str, Any], router_owed: bool, policy: str) -> str:
    problems = "; ".join(str(p) for p in state.get("gpu_problems") or []) or "the check after the sweep left no reading"
    if not router_owed and state.get("strategy") == "beside":
        then = "the sweep ran beside the service, which was never out of the router: take the host out by hand"
    elif policy == "unrouted":
        then = "the service serves, and the host stays OUT of the router"
    else:
        then = "the service serves, back in the router"
    return "GPU health after the sweep: %s (bc_gpu_health_policy=%s: %s)" % (problems, policy, then)


def failure(bring: dict[str, Any], unit: str, rolled_back: bool, restarted: bool, earlier: str | None,
            start_failure: str) -> str:
    """The words of a bring-back that failed (`bring`: plan()'s answer): what became of the service, whether the
    host stays out of the router, and the cycle's first failure before the start's."""
    if rolled_back:
        said = "the new unit of %s did not come up; rolled back to the previous unit, which is serving again." % unit
    elif restarted:
        said = "%s did not serve after its memory came back; it was restarted and serves again." % unit
    elif bring["resume"] or bring["restart"]:
        said = "%s was restarted (its memory state was not known) and is NOT serving." % unit
    elif bring["start"]:
        said = ("%s did not come up, and this cycle replaced nothing to roll back to: it was started as it was and "
                "is NOT serving." % unit)
    else:
        said = "%s is not serving, and this cycle never stopped it: it was not restarted." % unit
    if bring["router_owed"] and not (rolled_back or restarted):
        said += " The host stays OUT of the router until it serves (a re-run puts it back)."
    if earlier:
        return "%s The cycle had failed first, at %s; then bringing the service back failed: %s" % (
            said, earlier, start_failure)
    return "%s Original failure: %s" % (said, start_failure)


def verdict(failure: str, touched: bool, recovery: bool, host: str, fenced: bool = False) -> str:
    """The job's last words once the service is back and a failure remains (a cycle's first failure, or what a
    recovery could not read): whether this job stopped the service (`touched`) and so started it again. A cycle that
    lost its lock (`fenced`) brought nothing back: the cycle that holds the lock now owns the host."""
    if fenced:
        return ("the cycle failed at %s; it no longer owns %s: it started nothing and put nothing back in the router, and "
                "the cycle that holds the lock now brings the service back" % (failure, host))
    if recovery:
        return "%s: the service was brought back, but %s" % (host, failure)
    return "the cycle failed at %s; the service %s and answers correctly" % (
        failure, "was started again" if touched else "was never stopped")
