#!/usr/bin/env python3
"""Generate the lab's tiny GGUF model: a 2-layer llama with random weights and a byte-level BPE
tokenizer trained here with `tokenizers` (no model hub is reachable).

The greedy answer to any prompt, `2+2=` included, is the digit 4 (then end of text): every token
embedding carries one constant channel, the blocks' output projections are small, and the output
head maps that channel to the token "4" and, with a smaller weight, the end-of-text token after
it has been emitted once. llama-server serves it like any other model.

    lab/make_model.py OUT.gguf
    lab/make_model.py --hf OUT_DIR     # the same model for vLLM (safetensors)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_FF = 128
N_CTX = 512
VOCAB = 320
ANSWER = "4"
SEED = 20261129
CORPUS = [
    "2+2=4", "1+1=2", "3+3=6", "what is two plus two? four.",
    "The quick brown fox jumps over the lazy dog.", "Hello, world!",
    "benchmark cycle lab model for readiness probes", "0123456789 + - * / = ( ) . , ? !",
]


def train_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


def weights() -> tuple[Tokenizer, dict[str, np.ndarray], dict[str, int]]:
    """The tokenizer, the tensors (GGUF names; each (out, in) as both formats store them) and the ids (eos, answer):
    one model, written as GGUF for llama.cpp (`build`) and as safetensors for vLLM (`build_hf`)."""
    tok = train_tokenizer()
    vocab = tok.get_vocab()
    n_vocab = len(vocab)
    eos = vocab["<|endoftext|>"]
    answer_ids = tok.encode(ANSWER).ids
    if len(answer_ids) != 1:
        raise SystemExit(f"make_model: {ANSWER!r} must be one token, got {answer_ids}")
    answer = answer_ids[0]
    rng = np.random.default_rng(SEED)

    def rnd(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    tensors: dict[str, np.ndarray] = {}
    embd = rnd(n_vocab, N_EMBD)
    embd[:, 0] = 1.0  # the constant channel
    embd[answer, 1] = 1.0  # "4" marks itself, so the head can end the answer after it
    tensors["token_embd.weight"] = embd
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors[p + "attn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensors[p + name + ".weight"] = rnd(N_EMBD, N_EMBD)
        tensors[p + "ffn_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
        tensors[p + "ffn_gate.weight"] = rnd(N_FF, N_EMBD)
        tensors[p + "ffn_up.weight"] = rnd(N_FF, N_EMBD)
        tensors[p + "ffn_down.weight"] = rnd(N_EMBD, N_FF)
    tensors["output_norm.weight"] = np.ones(N_EMBD, dtype=np.float32)
    head = rnd(n_vocab, N_EMBD)
    head[answer, 0] = 2.0
    head[eos, 0] = 1.0
    head[eos, 1] = 4.0  # only wins once the last position is the "4" itself (attention mixes a little)
    tensors["output.weight"] = head
    return tok, tensors, {"eos": eos, "answer": answer}


def build(out: Path) -> None:
    import gguf  # noqa: PLC0415 - the GGUF writer only (the HF export runs in vLLM's venv, which has no gguf)

    tok, tensors, ids = weights()
    vocab = tok.get_vocab()
    n_vocab = len(vocab)
    tokens = [""] * n_vocab
    for text, idx in vocab.items():
        tokens[idx] = text
    eos = ids["eos"]
    merges = [" ".join(m) if isinstance(m, tuple) else m for m in getattr(tok.model, "merges", [])]
    if not merges:  # tokenizers keeps merges in the serialized model
        merges = [" ".join(m) if isinstance(m, list) else m
                  for m in json.loads(tok.to_str())["model"]["merges"]]

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name("benchmark-cycle-lab-tiny")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if i == eos else gguf.TokenType.NORMAL for i in range(n_vocab)])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"make_model: wrote {out} ({out.stat().st_size} bytes, vocab {n_vocab}, answer id {ids['answer']})", file=sys.stderr)


# GGUF's llama tensor names -> Hugging Face LlamaForCausalLM's (blk.N. -> model.layers.N.)
HF_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
            "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


# vLLM's CPU attention has no kernel for a head of 16 (N_EMBD / N_HEAD): "Unsupported CPU attention configuration:
# head_dim=16" (vLLM 0.32 CPU). The same weights read as one head of 64; the answer comes from the constant channel
# and the head, not from how attention splits.
HF_HEADS = 1


def hf_name(gguf_name: str) -> str:
    parts = gguf_name.removesuffix(".weight").split(".")
    if parts[0] == "blk":
        return "model.layers.%s.%s.weight" % (parts[1], HF_NAMES[parts[2]])
    return HF_NAMES[parts[0]] + ".weight"


def build_hf(out: Path) -> None:
    """The same model as a Hugging Face folder (config.json, model.safetensors, tokenizer.json and its config):
    what vLLM loads. GGUF keeps q/k in llama.cpp's rotary order; with these random weights only the constant
    channel and the head decide the answer, which either order keeps."""
    from safetensors.numpy import save_file  # noqa: PLC0415 - only the HF export needs it

    tok, tensors, ids = weights()
    out.mkdir(parents=True, exist_ok=True)
    save_file({hf_name(k): np.ascontiguousarray(v) for k, v in tensors.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": N_EMBD,
              "intermediate_size": N_FF, "num_hidden_layers": N_LAYER, "num_attention_heads": HF_HEADS,
              "num_key_value_heads": HF_HEADS, "max_position_embeddings": N_CTX, "rms_norm_eps": 1e-5,
              "vocab_size": len(tok.get_vocab()), "bos_token_id": ids["eos"], "eos_token_id": ids["eos"],
              "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu", "rope_theta": 10000.0}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>",
        "add_bos_token": False, "model_max_length": N_CTX}, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": ids["eos"], "bos_token_id": ids["eos"]}))
    print(f"make_model: wrote {out} (safetensors, vocab {config['vocab_size']}, answer id {ids['answer']})", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--hf", action="store_true", help="write a Hugging Face folder (for vLLM) instead of a GGUF")
    args = parser.parse_args()
    if args.hf:
        build_hf(args.out)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    build(tmp)
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
