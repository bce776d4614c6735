"""bc_strategy's decisions as tables: whether a sweep may run on its own (--tags sweep), which never frees the GPU."""

from __future__ import annotations

import pytest
from ansible.module_utils.bc_strategy import choose, sweep_alone

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


SIZING_FITS = {"fits": True, "has_gpu": True, "need_mib": 100, "free_mib": 1000}
RELEASABLE = {"supported": True, "releasable_gib": 40.0, "why": ""}


@pytest.mark.parametrize(("policy", "strategy", "words"), [
    ("auto", "stop", "a key rotation: the live server refuses the new key until it starts again"),  # it would fit beside
    ("always", "stop", "a key rotation"),
    ("never", None, "bc_stop_policy=never never does: it would go on refusing the new key"),
    ("release", None, "bc_stop_policy=release never does"),
])
def test_a_key_rotation_is_applied_by_a_restart_or_refused(policy, strategy, words):
    """The live server refuses the key the cycle installs: only a restart puts it in force. Beside the server, or
    released in place, the cycle would end green with the new key installed and refused (#44)."""
    from bc_filters import strategy as decide
    got = decide(policy, SIZING_FITS, RELEASABLE, True)
    assert got["strategy"] == strategy and words in (got["why"] if strategy else got["error"]), got
    assert decide(policy, SIZING_FITS, RELEASABLE, "True")["strategy"] != "stop" or policy == "always"  # only a real true
    with pytest.raises(ValueError, match="rotation"):
        if policy in ("never", "release"):
            choose(policy, SIZING_FITS, RELEASABLE, rotation=True)
        else:
            raise ValueError("rotation: (no refusal under %s)" % policy)
