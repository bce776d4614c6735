"""Shape validation, byte/FLOP accounting and the memory estimate of the sweep."""

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_sweepstats import (
    GIB,
    ShapeError,
    estimate_peak_bytes,
    expected_experts_touched,
    knee,
    merge_reference,
    per_token,
    point_cost,
    roofline,
    shard,
    sweep_compare,
    sweep_table,
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


# (these were the tests of filters no playbook used: the functions themselves)
def pts(ms_by_m, touched=None):
    return [{"m": m, "ms": ms, "experts_touched": (touched or {}).get(m, 0)} for m, ms in ms_by_m.items()]


def test_stats_knee_is_first_point_within_ten_percent_of_the_streaming_plateau():
    p = pts({1: 0.1, 16: 0.9, 64: 2.0, 128: 2.9, 256: 3.2, 1024: 4.8},
            {1: 8, 16: 110, 64: 280, 128: 360, 256: 382.5, 1024: 384})
    k = knee(p, 384)
    assert k == {"knee_m": 128, "plateau_m": 256, "plateau_ms": 3.2}


def test_stats_knee_without_expert_counts_uses_the_largest_m():
    k = knee(pts({1: 1.0, 2: 1.9, 4: 2.0}))
    assert k["plateau_m"] == 4 and k["knee_m"] == 2


def test_stats_knee_of_empty_sweep_is_none():
    assert knee([], 384) == {"knee_m": None, "plateau_m": None, "plateau_ms": None}


def test_stats_per_token_divides_by_m_and_rejects_zero():
    out = per_token([{"m": 4, "ms": 2.0}])
    assert out[0]["us_per_token"] == 500.0
    with pytest.raises(ValueError, match="m=0"):
        per_token([{"m": 0, "ms": 1.0}])


def test_stats_roofline_floor_and_efficiency():
    out = roofline([{"m": 256, "ms": 3.0, "bytes_moved": 9.51e9}], 4230.0)
    assert out[0]["floor_ms"] == pytest.approx(2.2482, abs=1e-3)
    assert out[0]["efficiency"] == pytest.approx(2.2482 / 3.0, abs=1e-3)
    with pytest.raises(ValueError, match="bandwidth_gbs"):
        roofline([], 0)


def test_stats_compare_ratio_only_for_common_m():
    rows = sweep_compare([{"m": 1, "ms": 1.0}, {"m": 2, "ms": 3.0}], [{"m": 2, "ms": 2.0}, {"m": 4, "ms": 1.0}])
    assert rows == [{"m": 2, "current": 3.0, "previous": 2.0, "ratio": 1.5}]


def test_stats_table_has_a_row_per_point_and_reference_columns_when_merged():
    point = {"m": 1, "ms": 0.0851, "ms_min": 0.08, "ms_max": 0.09, "us_per_token": 85.1, "experts_touched": 8.0,
             "gbs": 2333.0, "tflops": 8.2, "floor_ms": 0.0469, "efficiency": 0.55}
    plain = sweep_table({"points": [point]})
    assert plain.count("\n") == 2 and "| 1 | 0.0851 |" in plain and "speed-up" not in plain
    merged = merge_reference([point], [{"m": 1, "ms": 0.34}])
    table = sweep_table({"points": merged})
    assert "INT4 speed-up" in table and "| 3.995 |" in table
