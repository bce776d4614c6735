"""bc_strategy's decisions as tables: whether a sweep may run on its own (--tags sweep), which never frees the GPU."""

from __future__ import annotations

import pytest
from ansible.module_utils.bc_strategy import sweep_alone

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
