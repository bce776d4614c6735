"""bc_strategy's decisions as tables: whether a sweep may run on its own (--tags sweep), which never frees the GPU."""

from __future__ import annotations

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import (
    batches,
    budget,
    choose,
    roll_problem,
    sweep_alone,
)

GPU_FITS = {"has_gpu": True, "fits": True, "need_mib": 17000, "free_mib": 60000}
GPU_FULL = {"has_gpu": True, "fits": False, "need_mib": 17000, "free_mib": 9000}
NO_GPU = {"has_gpu": False, "fits": True, "need_mib": 200, "free_mib": 0}


@pytest.mark.parametrize(("main_pid", "sizing", "refused_with"), [
    ("0", GPU_FULL, None),            # the unit runs nothing: the GPU is the sweep's
    ("0\n", NO_GPU, None),            # systemctl's own line end
    ("4242", GPU_FITS, None),         # it fits in what is free beside the live server
    ("4242", GPU_FULL, "the sweep needs 17000 MiB and 9000 MiB are free beside it"),
    ("4242", NO_GPU, "no GPU: the sweep would share the host's memory and CPU with it"),
    ("4242", {}, "no GPU"),           # a sizing that says nothing is not a fit
    ("", GPU_FITS, "whether sglang-k26 runs is not known"),           # the read gave nothing (absent)
    ("[not read]", GPU_FITS, "whether sglang-k26 runs is not known"),  # unknown is not "not running"
    ("-1", GPU_FULL, "is not known"),
    (None, GPU_FITS, "is not known"),
])
def test_a_sweep_on_its_own_runs_only_on_a_gpu_that_is_free_already(main_pid, sizing, refused_with):
    why = sweep_alone(main_pid, "sglang-k26", sizing)
    if refused_with is None:
        assert why == ""
    else:
        assert refused_with in why
        assert "is not known" in why or "run the whole cycle (no --tags), or stop sglang-k26 first" in why


# -- the whole-GPU release (#47): chosen from measured numbers, every fall-back with its why ------------------------
WHOLE = {"supported": True, "tags": ["kv_cache", "weights"], "releasable_gib": 76.58, "resident": {
    "cuda_graph": "sglang 0.5.16 does not back it up (from 0.5.21): a release would discard it"},
    "host_backup_mib": 60000, "host_available_mib": 900000, "checker": "/weights_checker", "timeout_s": 58.6, "why": ""}
KV = {"supported": True, "releasable_gib": 17.58, "why": "", "whole": WHOLE}  # 18001 MiB in a KV release, 78417 whole
NO_BACKUP = dict(WHOLE, supported=False, releasable_gib=None, why="weights: it runs without enable_weights_cpu_backup "
                 "(set bc_engine_settings.enable_weights_cpu_backup: true; it applies at the unit's next restart)")
NO_PINNED = dict(WHOLE, supported=False, releasable_gib=None, why="the weights' pinned host copy needs 480000 MiB and "
                 "the host has 300000 MiB available (90% of it usable)")
FULL = {"has_gpu": True, "fits": False, "free_mib": 3000}


@pytest.mark.parametrize(("policy", "need", "sup", "strategy", "words"), [
    ("auto", 9900, KV, "release", "fits once the KV cache is released"),          # a KV release is enough: never more
    ("auto", 21001, KV, "release", "3000 MiB free + 18001"),                      # the edge: exactly what a KV release frees
    ("auto", 21002, KV, "release_all", "fits only once the whole GPU is released"),
    ("auto", 81417, KV, "release_all", "78417 MiB in a whole release: kv_cache, weights"),  # the edge of a whole release
    ("auto", 81418, KV, "stop", "does not fit even after a whole-GPU release"),
    ("auto", 40000, dict(KV, whole=NO_BACKUP), "stop", "runs without enable_weights_cpu_backup"),
    ("auto", 40000, dict(KV, whole=NO_PINNED), "stop", "pinned host copy needs 480000 MiB"),
    # an older support() (no whole) or a whole that says nothing: unknown, never a whole release
    ("auto", 40000, {"supported": True, "releasable_gib": 17.58, "why": ""}, "stop", "whole GPU cannot be released"),
    ("auto", 40000, dict(KV, whole=dict(WHOLE, releasable_gib=None)), "stop", "whole GPU cannot be released"),
    ("auto", 40000, dict(KV, whole={}), "stop", "whole GPU cannot be released: unknown"),
    # no saver: nothing can be released, the whole release neither
    ("auto", 40000, {"supported": False, "releasable_gib": None, "why": "sglang runs without enable_memory_saver",
                     "whole": NO_BACKUP}, "stop", "without enable_memory_saver"),
    ("release_all", 1, KV, "release_all", "bc_stop_policy=release_all"),        # asked for, and it can
    ("always", 40000, KV, "stop", "always"),
])
def test_a_whole_release_is_chosen_only_when_a_kv_release_is_not_enough_and_the_server_can(policy, need, sup, strategy, words):
    got = choose(policy, dict(FULL, need_mib=need), sup)
    assert got["strategy"] == strategy and words in got["why"], got
    if strategy == "release_all":
        assert got["tags"] == ["kv_cache", "weights"] and got["move_timeout_s"] == 58.6 and got["checker"] == "/weights_checker"
        assert "cuda_graph" in got["resident"]  # left on the GPU, and said why


@pytest.mark.parametrize(("sup", "words"), [
    (dict(KV, whole=NO_BACKUP), "bc_stop_policy=release_all, but the whole GPU cannot be released: weights: it runs "
                                "without enable_weights_cpu_backup"),
    (None, "the server was not asked"),
    (dict(KV, whole=NO_PINNED), "pinned host copy needs"),
])
def test_a_whole_release_asked_for_that_the_server_cannot_do_names_the_missing_piece(sup, words):
    with pytest.raises(ValueError, match="bc_stop_policy=auto to fall back") as err:
        choose("release_all", dict(FULL, need_mib=1), sup)
    assert words in str(err.value)


def test_the_worst_case_holds_the_whole_releases_copy_both_ways():
    n = {"drain_deadline_s": 120, "release": True, "stop_timeout_s": 300, "gpu_wait_s": 60, "has_gpu": True, "sweep_runs": 1,
         "sweep_timeout_s": 600, "readiness_timeout_s": 900, "margin_s": 300}
    assert budget(n)["phases"]["release"] == 90
    assert budget(dict(n, release_move_s=621))["phases"]["release"] == 90 + 4 * 621  # out, back, two checksums
    assert budget(dict(n, release=False, release_move_s=621))["phases"]["release"] == 0


def test_the_filter_hands_the_roles_a_whole_release_with_its_tags_and_deadline():
    from bc_filters import strategy

    got = strategy("auto", dict(FULL, need_mib=40000), KV)
    assert got["strategy"] == "release_all" and got["tags"] and got["error"] == ""
    assert "weights" in got["tags"] and got["move_timeout_s"] == KV["whole"]["timeout_s"]
    assert strategy("release_all", dict(FULL, need_mib=1), KV)["strategy"] == "release_all"
    assert strategy("auto", dict(FULL, need_mib=9900), KV)["strategy"] == "release"


SIZING_FITS = {"fits": True, "has_gpu": True, "need_mib": 100, "free_mib": 1000}
RELEASABLE = {"supported": True, "releasable_gib": 40.0, "why": ""}


@pytest.mark.parametrize(("policy", "strategy", "words"), [
    ("auto", "stop", "a key rotation: the live server refuses the new key until it starts again"),  # it would fit beside
    ("always", "stop", "a key rotation"),
    ("never", None, "bc_stop_policy=never never does: it would go on refusing the new key"),
    ("release", None, "bc_stop_policy=release never does"),
    ("release_all", None, "bc_stop_policy=release_all never does"),
])
def test_a_key_rotation_is_applied_by_a_restart_or_refused(policy, strategy, words):
    """The live server refuses the key the cycle installs: only a restart puts it in force. Beside the server, or
    released in place, the cycle would end green with the new key installed and refused (#44)."""
    from bc_filters import strategy as decide
    got = decide(policy, SIZING_FITS, RELEASABLE, True)
    assert got["strategy"] == strategy and words in (got["why"] if strategy else got["error"]), got
    assert decide(policy, SIZING_FITS, RELEASABLE, "True")["strategy"] != "stop" or policy == "always"  # only a real true
    if strategy is None:
        with pytest.raises(ValueError, match="rotation"):
            choose(policy, SIZING_FITS, RELEASABLE, rotation=True)


@pytest.mark.parametrize(("policy", "strategy", "words"), [
    ("auto", "stop", "whether the live server takes the new key is not known: a restart puts it in force"),
    ("never", None, "may not be the key the live server runs with (asked with it alone, the server did not answer"),
    ("release", None, "bc_stop_policy=release never does"),
])
def test_a_rotation_that_cannot_be_told_is_treated_as_one(policy, strategy, words):
    """The live server was asked with the new key alone and said neither yes nor 401 (a timeout, a 503): unknown is
    not "no rotation" - the cycle would end green with a key the server may refuse."""
    from bc_filters import strategy as decide
    got = decide(policy, SIZING_FITS, RELEASABLE, None)
    assert got["strategy"] == strategy and words in (got["why"] if strategy else got["error"]), got


@pytest.mark.parametrize(("policy", "strategy", "words"), [
    ("auto", "stop", "the live server answers without a key: a restart puts bc_api_key in force"),
    ("always", "stop", "answers without a key"),
    ("never", None, "is not in force: the live server answers a request with no key at all"),
    ("release", None, "never does: it would go on answering anyone without a key"),
    ("release_all", None, "bc_stop_policy=release_all never does"),
])
def test_a_key_that_the_live_server_does_not_enforce_is_put_in_force_or_refused(policy, strategy, words):
    """The server started before a key was set answers anyone with no key: the key this cycle installs is not in force
    until it starts again; beside it, or released in place, the cycle would end green with the host open (#44)."""
    from bc_filters import strategy as decide
    got = decide(policy, SIZING_FITS, RELEASABLE, "keyless")
    assert got["strategy"] == strategy and words in (got["why"] if strategy else got["error"]), got



@pytest.mark.parametrize(("with_key", "without_key", "rotation"), [
    ({"ready": True}, {"ready": False, "reason": "the server refused the completion with HTTP 401"}, False),  # in force
    ({"ready": False, "reason": "the server refused the completion with HTTP 401: Unauthorized"}, {"ready": False}, True),
    ({"ready": False, "reason": "HTTP 403"}, {"ready": False}, True),
    ({"ready": True}, {"ready": True}, "keyless"),              # answers anyone: the key is not in force
    ({"ready": False, "reason": "HTTP 401"}, {"ready": True}, "keyless"),
    ({"ready": False, "reason": "timed out after 60 s"}, {"ready": False}, None),  # unknown is not "no rotation"
    ({"ready": False, "reason": "HTTP 503"}, {"ready": False}, None),
    ({"skipped": True}, {"skipped": True}, False),              # no key, or no running server: nothing to rotate
    (None, None, False),
    ({"ready": "true"}, {"ready": "true"}, None),               # only a real true reads as ready
])
def test_what_the_live_server_says_of_the_key_is_read_as_a_rotation_or_not(with_key, without_key, rotation):
    from bc_filters import key_rotation_of

    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import key_rotation
    assert key_rotation(with_key, without_key) == rotation
    assert key_rotation_of({"results": [with_key, without_key]} if with_key is not None else {}) == rotation


@pytest.mark.parametrize(("count", "serial", "sizes"), [
    (1, 1, [1]), (5, 1, [1, 1, 1, 1, 1]), (5, 2, [2, 2, 1]), (5, "2", [2, 2, 1]),
    (4, "50%", [2, 2]), (3, "25%", [1, 1, 1]),  # a share rounds down, at least one host
    (9, [1, "30%", 5], [1, 2, 5, 1]),  # a list's last repeats
    (3, 0, [3]), (3, -1, [3]), (3, [], [3]), (0, 1, []),
])
def test_the_roll_is_cut_into_batches_as_ansible_core_cuts_it(count, serial, sizes):
    assert batches(count, serial) == sizes


@pytest.mark.parametrize(("totals", "serial", "forks", "limit", "elapsed", "words"), [
    ([4815], 1, 5, 0, None, ""),  # no job limit: nothing to refuse, whatever is known
    ([4815], 1, 5, 7200, 0, ""),
    ([4815], 1, 5, 7200, 2000, ""),
    ([4815], 1, 5, 7200, 2386, "the roll's worst case is 7201 s (2386 s already spent in the job, then 1 batch(es)"),
    ([1000, 1000, 1000], 1, 5, 2500, 0, "3000 s (0 s already spent in the job, then 3 batch(es) by bc_serial=1 and 5 "
                                          "forks, each its slowest host's worst case times its waves: 1000 + 1000 + 1000 s), "
                                          "over bc_job_budget_s=2500"),
    ([1000, 1000, 1000], 3, 5, 2500, 0, ""),  # side by side: one batch, its slowest host
    ([1000, 1000, 1000], 3, 2, 1999, 0, "worst case is 2000 s"),  # three hosts on two forks: two waves
    ([1000, 1000, 1000], 3, None, 2500, 0, ""),  # forks not given: one wave
    ([1000, 2000, 1000], 2, 5, 2999, 0, "2000 + 1000 s"),
    ([1000, 2000, 1000], "50%", 5, 3000, 0, "1000 + 2000 + 1000 s"),  # half of three hosts is one
    ([1000, 2000, 1000, 1000], "50%", 5, 3000, 0, ""),
    # a host refused in the preflight (0) still holds its place in the batches ansible-core cuts
    ([0, 100, 100, 10, 10], 2, 5, 150, 0, "100 + 100 + 10 s"),
    ([100], 1, 5, 7200, None, "when the job began is not known"),  # unknown is never read as no time spent
    ([100], 1, 5, 7200, -5, ""),  # a clock a little behind: nothing spent, never a negative credit
])
def test_a_roll_that_may_outlast_the_job_budget_is_refused_counting_the_time_spent_and_the_batches(
        totals, serial, forks, limit, elapsed, words):
    got = roll_problem(totals, serial, limit, elapsed, forks)
    assert (words in got and got) if words else got == "", got
    if got and elapsed is not None:
        assert "raise the job's timeout, roll fewer hosts per job (--limit) or more per batch (bc_serial" in got


def test_the_filter_counts_the_job_from_its_note_and_reads_a_missing_one_as_not_known():
    import time

    from bc_filters import roll_budget_problem

    assert roll_budget_problem([100], 1, 200, time.time() - 50, 5) == ""
    assert "150 s already spent" in roll_budget_problem([100], 1, 200, time.time() - 150, 5)
    assert "2 batch(es)" in roll_budget_problem([100, 100], 1, 150, time.time(), 5)
    for began in (None, "", "soon"):
        assert "when the job began is not known" in roll_budget_problem([100], 1, 200, began)
    assert roll_budget_problem([100], 1, 0, None) == ""
