"""Shape validation, byte/FLOP accounting and the memory estimate of the sweep."""

import pytest
from ansible.module_utils.bc_sweepstats import (
    GIB,
    ShapeError,
    estimate_peak_bytes,
    expected_experts_touched,
    point_cost,
    shard,
    validate,
    weight_bytes,
)

K26 = {"num_experts": 384, "hidden_size": 7168, "intermediate_size": 2048, "top_k": 8, "group_size": 32, "num_bits": 4}
SIZES = [2 ** i for i in range(11)]


def test_k26_int4_weights_and_scales_are_9_51_gb():
    s = shard(dict(K26, tp_size=1))
    assert weight_bytes(s) / 1e9 == pytest.approx(9.51, abs=0.01)
    assert weight_bytes(shard(dict(K26, tp_size=8))) == pytest.approx(weight_bytes(s) / 8)


def test_tp8_shards_the_intermediate_size():
    assert shard(dict(K26, tp_size=8))["N"] == 256
    with pytest.raises(ShapeError, match="not divisible by tp_size 3"):
        shard(dict(K26, tp_size=3))


@pytest.mark.parametrize(("change", "field"), [
    ({"group_size": 48}, "group_size 48"),
    ({"top_k": 400}, "top_k 400 exceeds num_experts 384"),
    ({"hidden_size": 7100}, "hidden_size 7100 must be a multiple of 128"),
    ({"intermediate_size": 2000}, "must be a multiple of 64"),
    ({"num_bits": 3}, "num_bits must be 4 or 8"),
])
def test_shapes_marlin_cannot_take_are_refused_naming_the_field(change, field):
    with pytest.raises(ShapeError, match=field):
        validate(dict(K26, **change), SIZES, "sglang")


def test_batch_sizes_must_be_positive_and_present():
    with pytest.raises(ShapeError, match="batch_sizes is empty"):
        validate(K26, [], "sglang")
    with pytest.raises(ShapeError, match=r"positive integers, got \[0, -2\]"):
        validate(K26, [1, 0, -2], "sglang")


def test_torch_backend_accepts_shapes_marlin_tiles_would_not():
    assert validate(dict(K26, hidden_size=96, intermediate_size=64, group_size=32), [1], "torch")["K"] == 96


def test_experts_touched_grows_to_all_experts():
    s = shard(dict(K26, tp_size=1))
    assert expected_experts_touched(s, 1) == pytest.approx(8)
    assert expected_experts_touched(s, 1024) == pytest.approx(384, rel=1e-6)


def test_point_cost_flops_count_both_gemms():
    s = shard(dict(K26, tp_size=1))
    cost = point_cost(s, 1, 8)
    assert cost["flops"] == 2 * 8 * (7168 * 4096 + 2048 * 7168)
    assert cost["bytes"] > weight_bytes(s, 8)


def test_estimate_is_weights_plus_working_set_and_fits_the_h200_targets():
    full = estimate_peak_bytes(shard(dict(K26, tp_size=1)), SIZES, "sglang") / GIB
    tp8 = estimate_peak_bytes(shard(dict(K26, tp_size=8)), SIZES, "sglang") / GIB
    dense = estimate_peak_bytes(shard(dict(K26, tp_size=1)), SIZES, "torch") / GIB
    assert 8.86 < full <= 11  # 9.51 GB of weights = 8.86 GiB, target <= 11 GiB
    assert tp8 < 2
    assert dense > 3 * full  # bf16 weights are ~3.5x the INT4 ones
