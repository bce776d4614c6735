"""bc_identity as a table: the resumed server is the released one only when its weights' checksum per rank, its
known answer and a fixed prompt's top-k logprobs (within the stated tolerance) are what they were; anything absent,
empty or unreadable is unknown, and unknown restarts it as a mismatch does."""

from __future__ import annotations

import pytest

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_identity import TOLERANCE, identity


def checksum(*sums: str, success: bool = True) -> dict:
    """A 0.5.16 /weights_checker answer (http_server.py:1443-1459; tokenizer_control_mixin.py:773-796)."""
    return {"success": success, "message": "Success.", "per_engine_checksum": "e" * 64,
            "ranks": [{"checksums": {"w": "0" * 16}, "per_gpu_checksum": s, "parallelism_info": {
                "tp_rank": r, "tp_size": len(sums), "dp_rank": 0, "dp_size": 1, "pp_rank": 0, "pp_size": 1, "rank": r,
                "size": len(sums)}} for r, s in enumerate(sums)]}


def fp(*tops: dict) -> dict:
    """A /v1/completions answer with logprobs (0.5.16 entrypoints/openai/protocol.py:132-136)."""
    return {"choices": [{"index": 0, "text": "x", "logprobs": {"tokens": [max(t, key=t.get, default="") for t in tops],
                                                               "token_logprobs": [max(t.values(), default=None) for t in tops],
                                                               "top_logprobs": list(tops), "text_offset": [0] * len(tops)}}]}


TOP = ({" Paris": -0.01, " the": -5.2, " a": -6.0}, {".": -0.3, ",": -1.5, " and": -3.0})
GOOD = {"checksum": checksum("a" * 64, "b" * 64), "fingerprint": fp(*TOP), "answer": "4"}


def near(d: float, *, edge: str | None = None) -> dict:
    first = {k: v + d for k, v in TOP[0].items()}
    if edge:
        del first[" a"]
        first[edge] = -6.0 + d
    return fp(first, TOP[1])


@pytest.mark.parametrize(("after", "verdict", "words"), [
    (GOOD, "ok", ""),
    (dict(GOOD, fingerprint=near(TOLERANCE / 2)), "ok", ""),                       # kernels' noise, within tolerance
    (dict(GOOD, fingerprint=near(0, edge=" an")), "ok", ""),                       # a tie at the k-th edge swapped
    (dict(GOOD, fingerprint=near(TOLERANCE * 2)), "mismatch", "tolerance 0.02"),
    (dict(GOOD, fingerprint=fp({" the": -0.1, " Paris": -2.0}, TOP[1])), "mismatch", "' the' after"),
    (dict(GOOD, fingerprint=fp(TOP[0])), "mismatch", "2 tokens before, 1 after"),
    (dict(GOOD, checksum=checksum("a" * 64, "c" * 64)), "mismatch", "differs on rank(s) 1"),
    (dict(GOOD, checksum=checksum("a" * 64)), "mismatch", "rank(s) 1"),             # a rank gone
    (dict(GOOD, answer="\x00garbage"), "mismatch", "known answer is"),
    # absent, empty, unreadable: unknown
    (dict(GOOD, checksum=None), "unknown", "checksum after the resume"),
    (dict(GOOD, checksum=checksum("a" * 64, "b" * 64, success=False)), "unknown", "checksum after"),
    (dict(GOOD, checksum={"success": True, "message": "Success."}), "unknown", "checksum after"),  # 0.5.10's shape
    (dict(GOOD, checksum={"success": True, "ranks": [{"per_gpu_checksum": "a"}]}), "unknown", "checksum after"),
    (dict(GOOD, checksum={"success": True, "ranks": []}), "unknown", "checksum after"),
    (dict(GOOD, fingerprint={"choices": [{"text": "x", "logprobs": None}]}), "unknown", "fingerprint after"),
    (dict(GOOD, fingerprint=fp({})), "unknown", "fingerprint after"),
    (dict(GOOD, fingerprint="<html>502</html>"), "unknown", "fingerprint after"),
    (dict(GOOD, fingerprint=fp({" Paris": float("nan"), " the": float("nan")}, TOP[1])), "unknown", "fingerprint after"),
    ({k: v for k, v in GOOD.items() if k != "answer"}, "unknown", "known answer after the resume is absent"),
    # a mismatch outranks an unknown, and both are said
    (dict(GOOD, checksum=None, answer="5"), "mismatch", "checksum after the resume"),
])
def test_the_resumed_server_is_the_released_one_only_when_every_check_agrees(after, verdict, words):
    got = identity(GOOD, after, "4")
    assert got["verdict"] == verdict and words in got["why"], got
    assert got["tolerance"] == TOLERANCE


def test_what_was_not_read_before_the_release_is_unknown_too():
    assert identity(dict(GOOD, checksum=None), GOOD, "4")["verdict"] == "unknown"
    assert identity(dict(GOOD, fingerprint=None), GOOD, "4")["verdict"] == "unknown"
    assert "was not given" in identity(GOOD, GOOD, "")["why"]


@pytest.mark.parametrize(("figures", "missing"), [
    (GOOD, []),
    (dict(GOOD, answer=""), ["answer"]),                                  # an empty answer compares with nothing
    (dict(GOOD, answer=None), ["answer"]),
    (dict(GOOD, checksum={"success": True, "message": "Success."}), ["checksum"]),  # 0.5.10's shape: no ranks
    (dict(GOOD, fingerprint=fp({" Paris": float("nan")})), ["fingerprint"]),
    ({}, ["checksum", "fingerprint", "answer"]),
])
def test_what_cannot_be_compared_after_a_resume_is_named_before_the_release(figures, missing):
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_identity import unreadable
    assert unreadable(figures) == missing
