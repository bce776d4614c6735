#!/usr/bin/env python3
"""Generate the lab's tiny GGUF model: a 2-layer llama with random weights and a byte-level BPE
tokenizer trained here with `tokenizers` (no model hub is reachable).

The greedy answer to any prompt, `2+2=` included, is the digit 4 (then end of text): every token
embedding carries one constant channel, the blocks' output projections are small, and the output
head maps that channel to the token "4" and, with a smaller weight, the end-of-text token after
it has been emitted once. llama-server serves it like any other model.

    lab/make_model.py OUT.gguf
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gguf
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


def build(out: Path) -> None:
    tok = train_tokenizer()
    vocab = tok.get_vocab()
    n_vocab = len(vocab)
    tokens = [""] * n_vocab
    for text, idx in vocab.items():
        tokens[idx] = text
    eos = vocab["<|endoftext|>"]
    answer_ids = tok.encode(ANSWER).ids
    if len(answer_ids) != 1:
        raise SystemExit(f"make_model: {ANSWER!r} must be one token, got {answer_ids}")
    answer = answer_ids[0]
    model = tok.model
    merges = [" ".join(m) if isinstance(m, tuple) else m for m in getattr(model, "merges", [])]
    if not merges:  # tokenizers keeps merges in the serialized model
        merges = [" ".join(m) if isinstance(m, list) else m
                  for m in json.loads(tok.to_str())["model"]["merges"]]

    rng = np.random.default_rng(SEED)

    def rnd(*shape: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

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

    embd = rnd(n_vocab, N_EMBD)
    embd[:, 0] = 1.0  # the constant channel
    embd[answer, 1] = 1.0  # "4" marks itself, so the head can end the answer after it
    writer.add_tensor("token_embd.weight", embd)
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(p + name + ".weight", rnd(N_EMBD, N_EMBD))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(p + "ffn_gate.weight", rnd(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_up.weight", rnd(N_FF, N_EMBD))
        writer.add_tensor(p + "ffn_down.weight", rnd(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    head = rnd(n_vocab, N_EMBD)
    head[answer, 0] = 2.0
    head[eos, 0] = 1.0
    head[eos, 1] = 4.0  # only wins once the last position is the "4" itself (attention mixes a little)
    writer.add_tensor("output.weight", head)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"make_model: wrote {out} ({out.stat().st_size} bytes, vocab {n_vocab}, answer id {answer})", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    build(tmp)
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
