"""The bring-back's decisions (bc_bringback.plan through the bc_bring_back filter): a table of the lock's record - the
cycle's journal on the host, this cycle's entries and a dead one's carried over - with what this cycle's release left
and what the GPU check found, against what is started, resumed, restarted and routed; and its refusals of input it
does not know (a misspelt fact must never read as "nothing to do")."""

from __future__ import annotations

import pytest
from bc_filters import bring_back, bring_back_failure, cycle_verdict, readiness_keys

ME = "20261206T030000Z-1"
BASE = {"policy": "unrouted", "token": ME}
MINE_RELEASED = {"released": True, "released_by": ME, "released_invocation": "abc", "lb_removed": True}
DEAD_STOPPED = {"stopped": True, "lb_removed": True}
DEAD_RELEASED = {"released": True, "released_by": "20261206T020000Z-9", "released_invocation": "abc", "lb_removed": True}


def decide(**state: object) -> dict:
    return bring_back(dict(BASE, **state))


# Each state the lock's record can be in when the bring-back (a cycle's, or a recovery's) begins.
# what the record says                                     inputs                                start  resume restart router
TABLE = [
    ("nothing recorded: beside, or refused before the drain", {"record": {}}, False, False, False, False),
    ("out of the router, stopped", {"record": {"lb_removed": True, "stopped": True}}, True, False, False, True),
    ("stopped, no router", {"record": {"stopped": True}}, True, False, False, False),
    ("out of the router only: a drain aborted at its deadline, or a remove hook that failed",
     {"record": {"lb_removed": True}}, False, False, False, True),
    ("put back in the router by the drain itself", {"record": {"lb_removed": False}}, False, False, False, False),
    ("released by this cycle, the release answered", {"record": MINE_RELEASED, "release_state": "released"},
     False, True, False, True),
    ("released by this cycle, the release did not answer", {"record": MINE_RELEASED, "release_state": "unknown"},
     False, False, True, True),
    ("released by this cycle, the cycle never saw the answer", {"record": MINE_RELEASED}, False, False, True, True),
    ("released, freed too little: resumed at once, then stopped",
     {"record": dict(MINE_RELEASED, released=False, stopped=True), "release_state": "serving"}, True, False, False, True),
    ("a release refused: the server serves", {"record": dict(MINE_RELEASED, released=False), "release_state": "serving"},
     False, False, False, True),
    ("a dead cycle stopped it (carried over)", {"record": DEAD_STOPPED}, True, False, False, True),
    ("a dead cycle released it, not finished", {"record": DEAD_RELEASED}, False, False, True, True),
    ("a dead cycle released it; an answer of this cycle's own release never resumes it",
     {"record": DEAD_RELEASED, "release_state": "released"}, False, False, True, True),
    ("a dead cycle released it, restarted here (recorded unreleased)", {"record": dict(DEAD_RELEASED, released=False,
                                                                                       restarted=True)},
     False, False, False, True),
    ("a release recorded by an older version (no released_by): restarted, never resumed",
     {"record": {"released": True, "lb_removed": True}, "release_state": "released"}, False, False, True, True),
    ("recovery: the unit found down, nothing recorded", {"record": {}, "unit_state": "failed"}, True, False, False, False),
    ("recovery: the unit found serving", {"record": {}, "unit_state": "active"}, False, False, False, False),
    ("recovery: found down but recorded released", {"record": DEAD_RELEASED, "unit_state": "inactive"},
     False, False, True, True),
    ("recovery: found serving, recorded stopped (the switch started it)", {"record": DEAD_STOPPED, "unit_state": "active"},
     True, False, False, True),
]


@pytest.mark.parametrize(("state", "start", "resume", "restart", "router"), [row[1:] for row in TABLE],
                         ids=[row[0] for row in TABLE])
def test_what_the_bring_back_starts_resumes_restarts_and_routes_from_each_record_state(state, start, resume, restart,
                                                                                        router):
    got = decide(**state)
    assert (got["start"], got["resume"], got["restart"], got["router_owed"]) == (start, resume, restart, router)
    assert got["record_unreleased"] is (resume or restart)
    assert got["rollback_allowed"] is (start or resume or restart)
    assert got["problems"] == []
    # nothing the record does not say was stopped, released or restarted is ever touched
    if not (start or resume or restart):
        assert not got["rollback_allowed"]


@pytest.mark.parametrize(("record", "touched"), [
    ({}, False), ({"lb_removed": True}, False), ({"stopped": True}, True), (MINE_RELEASED, True),
    (DEAD_RELEASED, True), ({"released": False, "restarted": True}, True),
])
def test_the_job_touched_the_service_when_the_record_says_it_stopped_released_or_restarted_it(record, touched):
    assert decide(record=record)["touched"] is touched


@pytest.mark.parametrize(("gpu", "sick"), [
    ({}, False),  # no check before the sweep: none after
    ({"gpu_pre": True}, False),  # checked, but the sweep never ran: nothing to judge
    ({"gpu_pre": True, "gpu_swept": True, "gpu_post_healthy": True}, False),
    ({"gpu_pre": True, "gpu_swept": True, "gpu_post_healthy": False}, True),
    ({"gpu_pre": True, "gpu_swept": True}, True),  # the check should have run and left no reading: not healthy
    # the pre-check found a host declared GPU-less (gpu_health's no_gpu): no GPU to judge after the sweep
    ({"gpu_pre": True, "gpu_none": True, "gpu_swept": True}, False),
    ({"gpu_pre": True, "gpu_none": False, "gpu_swept": True}, True),
    # a report that is there is believed either way
    ({"gpu_pre": True, "gpu_none": True, "gpu_swept": True, "gpu_post_healthy": False}, True),
])
def test_a_gpu_check_that_left_no_reading_is_a_sick_gpu(gpu, sick):
    got = decide(record=DEAD_STOPPED, **gpu)
    assert got["gpu_check"] is bool(gpu.get("gpu_pre") and gpu.get("gpu_swept") and not gpu.get("gpu_none"))
    assert got["gpu_sick"] is sick
    assert (got["gpu_failure"] != "") is sick


@pytest.mark.parametrize(("policy", "owed", "back", "words"), [
    ("unrouted", True, False, "stays OUT of the router"),
    ("serve", True, True, "back in the router"),
    ("serve", False, False, "back in the router"),
])
def test_a_sick_gpu_keeps_the_host_out_only_under_unrouted(policy, owed, back, words):
    got = bring_back({"policy": policy, "record": {"stopped": True, "lb_removed": owed}, "gpu_pre": True, "gpu_swept": True,
                      "gpu_post_healthy": False, "gpu_problems": ["GPU 0: ECC"]})
    assert got["route_back"] is back
    assert got["gpu_failure"].startswith("GPU health after the sweep: GPU 0: ECC (bc_gpu_health_policy=%s" % policy)
    assert words in got["gpu_failure"]


def test_a_sick_gpu_beside_a_service_never_taken_out_says_to_take_it_out_by_hand():
    got = decide(strategy="beside", gpu_pre=True, gpu_swept=True, gpu_post_healthy=False)
    assert not got["router_owed"] and not got["route_back"]
    assert "take the host out by hand" in got["gpu_failure"]


@pytest.mark.parametrize(("state", "says", "safe"), [
    # a policy it does not know: the host whose GPU went bad stays out of the router
    ({"policy": "Serve", "record": DEAD_STOPPED, "gpu_pre": True, "gpu_swept": True, "gpu_post_healthy": False},
     "bc_gpu_health_policy='Serve' is not one of serve|unrouted: read as unrouted", {"start": True, "route_back": False}),
    ({"policy": None, "record": {"stopped": True}}, "bc_gpu_health_policy=None", {"start": True}),
    # a lock written by another version: its known keys still count, the rest is named
    ({"record": {"stopped": True, "lb_removed": True, "paused_at": 3}}, "does not know: paused_at (ignored)",
     {"start": True, "router_owed": True}),
    ({"stoped": True, "record": {"stopped": True}}, "unknown input(s) stoped", {"start": True}),  # a misspelt input
    ({"record": {"stopped": "yes"}}, "the lock's record stopped='yes' is not true or false; read as True", {"start": True}),
    ({"record": {"released": 1}}, "the lock's record released=1 is not true or false; read as True", {"restart": True}),
    # a record that is not a mapping: the service started and awaited, the host routed once it answers
    ({"record": "stopped"}, "is not a mapping: read as stopped and out of the router", {"start": True, "router_owed": True}),
    ({"record": None}, "is not a mapping", {"start": True, "router_owed": True}),
    ({"record": {"stopped": True}, "gpu_pre": True, "gpu_swept": True, "gpu_post_healthy": "unknown"}, "",
     {"gpu_sick": True}),
    # a no-GPU flag it cannot read owes the check after the sweep
    ({"record": {"stopped": True}, "gpu_pre": True, "gpu_swept": True, "gpu_none": "yes"},
     "gpu_none='yes' is not true or false", {"gpu_check": True, "gpu_sick": True}),
])
def test_what_it_cannot_read_is_decided_the_safe_way_and_named_never_raised(state, says, safe):
    got = bring_back(dict(BASE, **state))
    assert all(got[k] == v for k, v in safe.items()), (got, safe)
    assert (says in "; ".join(got["problems"])) if says else not got["problems"], got["problems"]


def test_what_it_reads_cleanly_has_no_problems():
    assert decide(record=dict(DEAD_RELEASED, stopped=True), release_state="serving")["problems"] == []


@pytest.mark.parametrize(("state", "rolled", "restarted", "says", "out"), [
    ({"record": DEAD_STOPPED}, True, False, "rolled back to the previous unit, which is serving again", False),
    ({"record": MINE_RELEASED, "release_state": "released"}, False, True, "it was restarted and serves again", False),
    ({"record": MINE_RELEASED, "release_state": "unknown"}, False, False, "restarted (its memory state was not", True),
    ({"record": DEAD_STOPPED}, False, False, "replaced nothing to roll back to", True),
    ({"record": {}}, False, False, "this cycle never stopped it: it was not restarted", False),
])
def test_the_words_of_a_failed_bring_back(state, rolled, restarted, says, out):
    plan = decide(**state)
    text = bring_back_failure(plan, "llama-lab", rolled, restarted, None, "readiness: timed out")
    assert says in text and text.endswith("Original failure: readiness: timed out")
    assert ("The host stays OUT of the router" in text) is out
    earlier = bring_back_failure(plan, "llama-lab", rolled, restarted, "the sweep: killed", "readiness: timed out")
    assert "The cycle had failed first, at the sweep: killed; then bringing the service back failed" in earlier


@pytest.mark.parametrize(("touched", "recovery", "says"), [
    (True, False, "the cycle failed at the sweep: killed; the service was started again and answers correctly"),
    (False, False, "the cycle failed at the sweep: killed; the service was never stopped and answers correctly"),
    (True, True, "lab1: the service was brought back, but the sweep: killed"),
    (False, True, "lab1: the service was brought back, but the sweep: killed"),
])
def test_the_last_words_say_whether_this_job_started_the_service_again(touched, recovery, says):
    assert cycle_verdict("the sweep: killed", touched, recovery, "lab1") == says


# the first failure is the one reported (the lab's refused.unit fault: a unit that fails systemd-analyze verify, the
# never-stopped server's readiness after it), whatever the failure's own words hold
@pytest.mark.parametrize(("failure", "touched", "says"), [
    ("Verify, install and enable the unit: fails systemd-analyze verify", False,
     "the cycle failed at Verify, install and enable the unit: fails systemd-analyze verify; the service was never stopped "
     "and answers correctly"),
    ("Run the sweep: exit 3", True, "the cycle failed at Run the sweep: exit 3; the service was started again and answers correctly"),
])
def test_the_verdict_names_the_first_failure_and_what_became_of_the_service(failure, touched, says):
    assert cycle_verdict(failure, touched, False, "lab1") == says


def test_a_cycle_that_lost_its_lock_says_it_brought_nothing_back():
    """Fenced (its controller woke after another cycle took the host over): whatever it had stopped, it started
    nothing again; its verdict must not say the service was started again and answers (#44 review)."""
    said = cycle_verdict("Sweep: this cycle (t1) no longer owns the host", True, False, "lab1", True)
    assert "it no longer owns lab1: it started nothing and put nothing back in the router" in said
    assert "answers correctly" not in said
    assert "was started again" in cycle_verdict("the sweep: killed", True, False, "lab1", "true")  # only a real true


KEYS = ["old-key", "older-key"]


@pytest.mark.parametrize(("why", "record", "accepted"), [
    ("beside: never stopped, never restarted", {}, KEYS),
    ("resumed in place: never stopped", {"released": False, "restarted": False}, KEYS),
    ("stopped and started with the new unit", {"stopped": True}, []),
    ("restarted (a release it could not resume)", {"released": False, "restarted": True}, []),
    ("a dead cycle stopped it (carried over); this one started it", DEAD_STOPPED, []),
    ("a dead cycle released it; its restart came before this cycle's unit", dict(DEAD_RELEASED, released=False), KEYS),
    ("rolled back to the previous unit after the stop", {"stopped": True, "rolled_back": True}, KEYS),
    ("a stop flag it cannot read: fewer keys", {"stopped": "maybe"}, []),
    ("a restart flag it cannot read: fewer keys", {"restarted": "1"}, []),
    ("a rollback flag it cannot read: never more keys", {"stopped": True, "rolled_back": "yes"}, []),
    ("false as words", {"stopped": "false", "restarted": "no"}, KEYS),
    ("a record that is not a mapping: none", "stopped", []),
])
def test_readiness_accepts_the_servers_old_keys_only_from_a_server_not_started_with_the_new_unit(why, record, accepted):
    assert readiness_keys(KEYS, record) == accepted, why


@pytest.mark.parametrize("keys", [None, "old-key", {"k": "v"}, [], ["", None, 3]])
def test_server_keys_that_are_not_a_list_of_keys_give_none(keys):
    assert readiness_keys(keys, {}) == []
    assert readiness_keys(["k", *([] if keys is None or not isinstance(keys, list) else keys)]) == ["k"]
