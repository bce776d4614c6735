# Copyright: benchmark-cycle contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is the server that resumed the server that was released? A pure verdict from what it answered before the
release and after the resume: its weights' checksum per rank (SGLang's POST /weights_checker), the known-answer
completion, and a fixed prompt's fingerprint (the top-k logprobs of its first tokens, /v1/completions `logprobs`).

ok: every check present and equal (the fingerprint within TOLERANCE); mismatch: one differs; unknown: one is
absent, empty or unreadable. Only ok puts the host back in the router; mismatch and unknown restart the server
(a real reload), never back on faith. No imports: the filter plugin and the modules both use it.
"""

from __future__ import annotations

import math
from typing import Any

# Absolute difference allowed between two logprobs (nats) of the same token at the same position. The weights come
# back bit-exact from the CPU backup (torch_memory_saver copies the bytes), so what is left is the kernels' own
# run-to-run noise (split-K reductions, batch composition); 0.02 nats is ~2 % in probability, far below what a
# wrong or garbage weight moves (a garbage model's top tokens are other tokens altogether).
TOLERANCE = 0.02
FINGERPRINT = {"prompt": "The capital of France is", "max_tokens": 4, "logprobs": 5, "temperature": 0}


def rank_checksums(body: Any) -> dict[int, str] | None:
    """{rank: per_gpu_checksum} from a /weights_checker checksum answer (0.5.16 http_server.py:1443-1459:
    {"success", "message", "ranks": [{"per_gpu_checksum", "parallelism_info": {"rank", ...}, ...}]}); None when it
    is not a success, has no ranks, or any rank lacks its number or checksum."""
    if not isinstance(body, dict) or body.get("success") is not True or not isinstance(body.get("ranks"), list):
        return None
    out: dict[int, str] = {}
    for item in body["ranks"]:
        info = item.get("parallelism_info") if isinstance(item, dict) else None
        rank = info.get("rank") if isinstance(info, dict) else None
        value = item.get("per_gpu_checksum") if isinstance(item, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(value, str) or not value or rank in out:
            return None
        out[rank] = value
    return out or None


def fingerprint(body: Any) -> list[dict[str, float]] | None:
    """The top-k logprobs of each generated token, [{token: logprob}, ...], from a /v1/completions answer
    (choices[0].logprobs.top_logprobs, 0.5.16 entrypoints/openai/protocol.py:132-136); None when absent or empty."""
    try:
        tops = body["choices"][0]["logprobs"]["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(tops, list) or not tops:
        return None
    out = []
    for top in tops:
        if not isinstance(top, dict) or not top:
            return None
        if any(not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) for v in top.values()):
            return None  # NaN compares as within any tolerance: not a reading
        out.append({str(k): float(v) for k, v in top.items()})
    return out


def same_fingerprint(before: list[dict[str, float]], after: list[dict[str, float]], tol: float) -> str:
    """"" when the two fingerprints agree, else where they differ. Position by position: the most likely token the
    same, and every token of either top-k within `tol` of the other's logprob; a token in one top-k only is allowed
    only at the edge (its logprob within `tol` of the other's k-th)."""
    if len(before) != len(after):
        return "%d tokens before, %d after" % (len(before), len(after))
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if max(b, key=b.__getitem__) != max(a, key=a.__getitem__):
            return "token %d: %r before, %r after" % (i, max(b, key=b.__getitem__), max(a, key=a.__getitem__))
        for one, other in ((b, a), (a, b)):
            edge = min(other.values())
            for tok, lp in one.items():
                ref = other.get(tok)
                if (ref is None and lp - edge > tol) or (ref is not None and abs(lp - ref) > tol):
                    return "token %d: %r logprob %.4f vs %s (tolerance %g)" % (
                        i, tok, lp, "absent" if ref is None else "%.4f" % ref, tol)
    return ""


def checksum_problem(cb: dict[int, str] | None, ca: dict[int, str] | None) -> tuple[str, str]:
    """(kind, why) of the per-rank checksums before and after (rank_checksums): ("", "") when equal, ("unknown", ...)
    when either is unreadable, ("mismatch", ...) naming the ranks that differ."""
    if cb is None or ca is None:
        return "unknown", "the weights' checksum %s unreadable or absent" % (
            "before the release is" if cb is None else "after the resume is")
    if cb != ca:
        return "mismatch", "the weights' checksum differs on rank(s) %s" % ", ".join(
            str(r) for r in sorted(set(cb) | set(ca)) if cb.get(r) != ca.get(r))
    return "", ""


def unreadable(figures: dict[str, Any]) -> list[str]:
    """Which of the figures read before a release (checksum, fingerprint, answer) cannot be compared later."""
    readable = {"checksum": rank_checksums(figures.get("checksum")) is not None,
                "fingerprint": fingerprint(figures.get("fingerprint")) is not None,
                "answer": isinstance(figures.get("answer"), str) and bool(figures["answer"])}
    return [k for k, ok in readable.items() if not ok]


def identity(before: dict[str, Any], after: dict[str, Any], answer: str, tol: float = TOLERANCE) -> dict[str, Any]:
    """The verdict (ok, mismatch, unknown) and why. `before`/`after`: {"checksum": the /weights_checker answer (parsed
    JSON), "fingerprint": the fixed prompt's /v1/completions answer}; after also "answer": the known-answer completion's
    text; `answer`: the text it must be. Every check runs; a mismatch outranks an unknown."""
    unknown: list[str] = []
    mismatch: list[str] = []
    cb, ca = rank_checksums(before.get("checksum")), rank_checksums(after.get("checksum"))
    kind, why = checksum_problem(cb, ca)
    if kind:
        (mismatch if kind == "mismatch" else unknown).append(why)
    fb, fa = fingerprint(before.get("fingerprint")), fingerprint(after.get("fingerprint"))
    if fb is None or fa is None:
        unknown.append("the fingerprint %s absent or empty" % ("before the release is" if fb is None else "after the resume is"))
    else:
        differs = same_fingerprint(fb, fa, tol)
        if differs:
            mismatch.append("the fingerprint differs: %s" % differs)
    got = after.get("answer")
    if not isinstance(got, str) or not answer:
        unknown.append("the known answer %s" % ("was not given" if not answer else "after the resume is absent"))
    elif got.strip() != answer.strip():
        mismatch.append("the known answer is %r, not %r" % (got[:80], answer[:80]))
    checks = {"checksum": bool(cb and ca and cb == ca), "fingerprint": bool(fb and fa and not same_fingerprint(fb, fa, tol)),
              "answer": isinstance(got, str) and bool(answer) and got.strip() == answer.strip()}
    verdict = "mismatch" if mismatch else "unknown" if unknown else "ok"
    return {"verdict": verdict, "why": "; ".join(mismatch + unknown), "checks": checks, "tolerance": tol}
