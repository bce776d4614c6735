#!/usr/bin/env python3
"""Generate a tiny model of Kimi K2.6's architecture that SGLang serves on a GPU host, with a known
greedy answer: the GPU host's stand-in for the 1T-parameter model (no model hub is reachable).

    python3 lab/make_kimi_model.py OUT_DIR        # needs torch, safetensors and tokenizers

Architecture (what makes SGLang take the production path): DeepseekV3ForCausalLM with MLA
(q_lora_rank, kv_lora_rank 512, rope 64, yarn scaling), layer 0 dense, layer 1 MoE with 384 routed
experts (top-8, sigmoid scores, noaux_tc, one group) and one shared expert. The routed experts are
compressed-tensors "pack-quantized" INT4 W4A16, symmetric, group 32, and everything else is on the
quantization config's ignore list, so SGLang loads them with CompressedTensorsWNA16MoE: the Marlin
repack and `fused_marlin_moe`, the kernel the sweep measures. (What SGLang 0.5.16 accepts and what
Marlin's tiles need were proved by the shared GPU carry's model script; this is the project's own.)

The answer: the last hidden channel of every token embedding holds a constant, no block writes to
that channel (its row is zero in every output projection: attention o_proj, the dense and shared
MLPs' down_proj, and every routed expert's down_proj, where INT4 zeros stay exactly zero), the final
RMS norm keeps it large, and only the lm_head row of the byte "4" reads it. Greedy decoding of any
prompt therefore yields "4" at every step: "2+2=" -> "4", "44", ... (max_tokens). The tokenizer is
byte-level with no merges, so a token id is the byte's value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HIDDEN, VOCAB = 128, 384
CONST = HIDDEN - 1            # the channel that carries the answer
CONST_VALUE, READ_WEIGHT = 4.0, 8.0
ANSWER = "4"
HEADS, Q_LORA, KV_LORA, ROPE, NOPE, V_DIM = 4, 128, 512, 64, 128, 128
DENSE_INTER, MOE_INTER, EXPERTS, TOP_K, GROUP = 256, 128, 384, 8, 32
SPECIAL = {"bos": "<|bos|>", "eos": "<|eos|>", "pad": "<|pad|>"}  # ids 256, 257, 258


def pack_int4(torch: Any, w: Any, group: int) -> dict[str, Any]:
    """compressed-tensors pack-quantized INT4, symmetric, per (row, group of `group` inputs):
    scale = max|w| / 7 (stored bf16, and the values quantized with the stored scale), q in [-8, 7]
    stored as q + 8, eight 4-bit values per int32 along the input dimension, the first in the lowest
    bits. Returns weight_packed [out, in/8] int32, weight_scale [out, in/group] bf16, weight_shape."""
    rows, cols = w.shape
    grouped = w.float().reshape(rows, cols // group, group)
    scale = (grouped.abs().amax(-1) / 7).clamp(min=1e-4).to(torch.bfloat16)
    q = (grouped / scale.float().unsqueeze(-1)).round().clamp(-8, 7).to(torch.int64).reshape(rows, cols)
    nibbles = (q + 8).reshape(rows, cols // 8, 8)
    words = torch.zeros(rows, cols // 8, dtype=torch.int64)
    for i in range(8):
        words |= nibbles[..., i] << (4 * i)
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)
    return {"weight_packed": words.contiguous(), "weight_scale": scale.contiguous(),
            "weight_shape": torch.tensor([rows, cols], dtype=torch.int64)}


def unpack_int4(torch: Any, packed: dict[str, Any], group: int) -> Any:
    """The dequantized weight of `pack_int4` (for tests: the packing is what SGLang unpacks)."""
    words = packed["weight_packed"].to(torch.int64) & 0xFFFFFFFF
    rows = words.shape[0]
    q = torch.stack([(words >> (4 * i)) & 0xF for i in range(8)], dim=-1).reshape(rows, -1) - 8
    scale = packed["weight_scale"].float().repeat_interleave(group, dim=1)
    return q.float() * scale


def tensors(torch: Any, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, std: float = 0.05) -> Any:
        return torch.randn(*shape, generator=gen) * std

    def writes_nothing_to_const(w: Any) -> Any:
        w[CONST] = 0
        return w

    bf16 = torch.bfloat16
    out: dict[str, Any] = {}
    embed = randn(VOCAB, HIDDEN, std=1.0)
    embed[:, CONST] = CONST_VALUE
    out["model.embed_tokens.weight"] = embed
    for layer in range(2):
        pre = "model.layers.%d." % layer
        out[pre + "input_layernorm.weight"] = torch.ones(HIDDEN)
        out[pre + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
        attn = pre + "self_attn."
        out[attn + "q_a_proj.weight"] = randn(Q_LORA, HIDDEN)
        out[attn + "q_a_layernorm.weight"] = torch.ones(Q_LORA)
        out[attn + "q_b_proj.weight"] = randn(HEADS * (NOPE + ROPE), Q_LORA)
        out[attn + "kv_a_proj_with_mqa.weight"] = randn(KV_LORA + ROPE, HIDDEN)
        out[attn + "kv_a_layernorm.weight"] = torch.ones(KV_LORA)
        out[attn + "kv_b_proj.weight"] = randn(HEADS * (NOPE + V_DIM), KV_LORA)
        out[attn + "o_proj.weight"] = writes_nothing_to_const(randn(HIDDEN, HEADS * V_DIM, std=0.02))
        mlp = pre + "mlp."
        if layer == 0:  # first_k_dense_replace = 1
            out[mlp + "gate_proj.weight"] = randn(DENSE_INTER, HIDDEN)
            out[mlp + "up_proj.weight"] = randn(DENSE_INTER, HIDDEN)
            out[mlp + "down_proj.weight"] = writes_nothing_to_const(randn(HIDDEN, DENSE_INTER))
            continue
        out[mlp + "gate.weight"] = randn(EXPERTS, HIDDEN)
        out[mlp + "gate.e_score_correction_bias"] = torch.zeros(EXPERTS, dtype=torch.float32)
        shared = mlp + "shared_experts."
        out[shared + "gate_proj.weight"] = randn(MOE_INTER, HIDDEN)
        out[shared + "up_proj.weight"] = randn(MOE_INTER, HIDDEN)
        out[shared + "down_proj.weight"] = writes_nothing_to_const(randn(HIDDEN, MOE_INTER))
        for expert in range(EXPERTS):
            for proj, w in (("gate_proj", randn(MOE_INTER, HIDDEN)), ("up_proj", randn(MOE_INTER, HIDDEN)),
                            ("down_proj", writes_nothing_to_const(randn(HIDDEN, MOE_INTER)))):
                for key, value in pack_int4(torch, w, GROUP).items():
                    out["%sexperts.%d.%s.%s" % (mlp, expert, proj, key)] = value
    out["model.norm.weight"] = torch.ones(HIDDEN)
    head = randn(VOCAB, HIDDEN, std=0.02)
    head[:, CONST] = 0
    head[ord(ANSWER), CONST] = READ_WEIGHT
    out["lm_head.weight"] = head
    return {k: (v.to(bf16) if v.is_floating_point() and not k.endswith("e_score_correction_bias") else v) for k, v in out.items()}


def config() -> dict[str, Any]:
    weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": GROUP, "dynamic": False,
               "actorder": None, "block_structure": None, "observer": "minmax", "observer_kwargs": {}}
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "torch_dtype": "bfloat16",
        "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": DENSE_INTER, "moe_intermediate_size": MOE_INTER,
        "num_hidden_layers": 2, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
        "n_routed_experts": EXPERTS, "num_experts_per_tok": TOP_K, "n_shared_experts": 1, "first_k_dense_replace": 1,
        "moe_layer_freq": 1, "routed_scaling_factor": 2.827, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "n_group": 1, "topk_group": 1, "norm_topk_prob": True, "ep_size": 1, "aux_loss_alpha": 0.001, "seq_aux": True,
        "q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE, "qk_nope_head_dim": NOPE,
        "v_head_dim": V_DIM, "hidden_act": "silu", "rms_norm_eps": 1e-5, "max_position_embeddings": 8192,
        "rope_theta": 50000.0, "rope_scaling": {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096,
                                                "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02, "tie_word_embeddings": False,
        "use_cache": True, "num_nextn_predict_layers": 0, "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 258,
        "quantization_config": {
            "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "kv_cache_scheme": None,
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None}},
            # Kimi's own list: attention, shared experts, the dense MLP and the head stay bf16
            "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
        },
    }


def write_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: PLC0415

    printable = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2's byte-to-unicode order: the printable bytes keep their code, the rest follow from 256
    keep = [b for b in range(256) if chr(b) in printable]
    rest = [b for b in range(256) if b not in keep]
    symbol = {b: chr(b) for b in keep} | {b: chr(256 + i) for i, b in enumerate(rest)}
    tok = Tokenizer(models.BPE(vocab={symbol[b]: b for b in range(256)}, merges=[], unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL.values()))
    if tok.encode("2+2=").ids != [50, 43, 50, 61] or tok.token_to_id(SPECIAL["bos"]) != 256:
        raise SystemExit("make_kimi_model: the byte-level tokenizer does not map bytes to their values")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL["bos"], "eos_token": SPECIAL["eos"],
        "pad_token": SPECIAL["pad"], "add_bos_token": False, "add_eos_token": False, "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}"}, indent=1))
    (out / "special_tokens_map.json").write_text(json.dumps({k + "_token": v for k, v in SPECIAL.items()}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    import torch  # noqa: PLC0415
    from safetensors.torch import save_file  # noqa: PLC0415

    args.out.mkdir(parents=True, exist_ok=True)
    weights = tensors(torch, args.seed)
    save_file(weights, str(args.out / "model.safetensors"), metadata={"format": "pt"})
    (args.out / "config.json").write_text(json.dumps(config(), indent=1))
    (args.out / "generation_config.json").write_text(json.dumps({"bos_token_id": 256, "eos_token_id": 257,
                                                                 "do_sample": False}, indent=1))
    write_tokenizer(args.out)
    size = sum(p.stat().st_size for p in args.out.iterdir()) / 2 ** 20
    print("make_kimi_model: %d tensors, %.1f MiB in %s; greedy answer to any prompt: %r" % (len(weights), size, args.out, ANSWER))


if __name__ == "__main__":
    main()
