"""The GPU host's tiny Kimi-architecture model (lab/make_kimi_model.py), on the CPU: the INT4 packing
is compressed-tensors' pack-quantized layout, and the known answer holds by construction."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import make_kimi_model as mk


def test_int4_packing_round_trips_and_keeps_zeros_exact():
    w = torch.randn(64, 128) * 0.05
    w[7] = 0
    packed = mk.pack_int4(torch, w, 32)
    assert packed["weight_packed"].shape == (64, 16) and packed["weight_packed"].dtype == torch.int32
    assert packed["weight_scale"].shape == (64, 4) and packed["weight_scale"].dtype == torch.bfloat16
    assert packed["weight_shape"].tolist() == [64, 128]
    back = mk.unpack_int4(torch, packed, 32)
    assert torch.equal(back[7], torch.zeros(128))  # a zero row stays exactly zero: no block writes the answer's channel
    err = (back - w).abs().max() / w.abs().max()
    assert err < 0.15  # one INT4 step at most (7 levels a side)


def test_the_answer_channel_is_written_by_the_embeddings_and_read_only_by_the_answer_token():
    t = mk.tensors(torch, seed=1)
    assert torch.all(t["model.embed_tokens.weight"][:, mk.CONST].float() == mk.CONST_VALUE)
    head = t["lm_head.weight"][:, mk.CONST].float()
    assert head[ord(mk.ANSWER)] == mk.READ_WEIGHT and torch.count_nonzero(head) == 1
    writers = [k for k in t if k.endswith(("o_proj.weight", "down_proj.weight"))]
    assert len(writers) == 2 + 1 + 1  # two attentions, the dense MLP, the shared expert
    assert all(torch.count_nonzero(t[k][mk.CONST]) == 0 for k in writers)
    for e in (0, 191, mk.EXPERTS - 1):  # routed experts, INT4: their down_proj rows too
        p = "model.layers.1.mlp.experts.%d.down_proj." % e
        w = mk.unpack_int4(torch, {k: t[p + k] for k in ("weight_packed", "weight_scale")}, mk.GROUP)
        assert torch.count_nonzero(w[mk.CONST]) == 0


def test_config_takes_sglangs_marlin_moe_path():
    cfg = mk.config()
    q = cfg["quantization_config"]
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["n_routed_experts"] == 384 and cfg["num_experts_per_tok"] == 8
    assert q["quant_method"] == "compressed-tensors" and q["format"] == "pack-quantized"
    assert q["config_groups"]["group_0"]["weights"]["group_size"] == 32 and q["config_groups"]["group_0"]["weights"]["num_bits"] == 4
    # Marlin's tiles: K a multiple of 128, N of 64
    assert mk.HIDDEN % 128 == 0 and mk.MOE_INTER % 64 == 0


def test_tokenizer_maps_bytes_to_their_values(tmp_path):
    pytest.importorskip("tokenizers")
    mk.write_tokenizer(tmp_path)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.encode("2+2=").ids == [50, 43, 50, 61] and tok.decode([52]) == "4"
