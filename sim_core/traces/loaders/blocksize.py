"""The block size a hash trace was written at, checked against its token counts.

A format documents its block size (Mooncake: 512), but a file written at another size
says so through its own numbers: a request of ``input_length`` tokens in blocks of B
tokens has ``ceil(input_length / B)`` hashes (``floor`` where only full blocks are
hashed, as LMCache's lookup log does). When more than :data:`MISMATCH_SHARE` of the
requests that give a length contradict the documented size, the size is inferred: the
usual size (a power of two, :data:`USUAL`) nearest, on a log scale, to the median of
``input_length / len(hash_ids)``, kept when its hash counts are nearer the file's than
the documented size's (the sum of ``|expected - len(hash_ids)|`` is smaller: at 34
tokens a hash, 32-token blocks are off by a block or two, 512-token ones by nearly all). ``trace.file_block_tokens`` overrides both. Input lengths are never
changed: the requests that still disagree at the size used are counted and reported
(``meta["block_size"]``).
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("sim_core.traces.loaders")

USUAL = tuple(1 << k for k in range(13))  # 1 .. 4096 tokens
#: share of requests whose hash count contradicts the documented size before it is
#: inferred: a few odd requests (a length counted with a template the hashes skip) are
#: not a wrong size
MISMATCH_SHARE = 0.05


def expected_blocks(input_tokens: np.ndarray, bt: int, partial_last: bool) -> np.ndarray:
    return -(-input_tokens // bt) if partial_last else input_tokens // bt


def resolve(n_blocks: np.ndarray, input_tokens: np.ndarray, given: np.ndarray, documented: int,
            override: int | None, partial_last: bool, where: str) -> tuple[int, dict]:
    """(block size, what was decided) for a file's requests (`given`: the file gave the
    request's input length)."""
    use = given & (n_blocks > 0)
    n, it = n_blocks[use], input_tokens[use]

    def wrong(bt: int) -> int:
        return int((expected_blocks(it, bt, partial_last) != n).sum())

    def distance(bt: int) -> int:
        return int(np.abs(expected_blocks(it, bt, partial_last) - n).sum())

    info: dict = {"documented": int(documented), "requests_with_length": int(use.sum())}
    if override is not None:
        bt, why = int(override), "trace.file_block_tokens"
    else:
        bt, why = int(documented), "the format's"
        if len(n) and wrong(documented) > MISMATCH_SHARE * len(n):
            ratio = float(np.median(it / n))
            guess = min(USUAL, key=lambda u: abs(np.log2(u) - np.log2(max(ratio, 0.5))))
            info.update(median_tokens_per_hash=round(ratio, 2), contradicting_documented=wrong(documented))
            if guess != documented and distance(guess) < distance(documented):
                bt, why = guess, "inferred from input lengths"
                log.warning("%s: hashes cover about %.1f tokens each, not %d (%d of %d requests contradict %d-token "
                            "blocks): read as %d-token blocks; trace.file_block_tokens sets the size",
                            where, ratio, documented, wrong(documented), len(n), documented, bt)
            else:
                log.warning("%s: %d of %d requests contradict %d-token blocks and no usual size fits better "
                            "(about %.1f tokens per hash); trace.file_block_tokens sets the size",
                            where, wrong(documented), len(n), documented, ratio)
    off = wrong(bt) if len(n) else 0
    info.update(block_tokens=bt, why=why, contradicting=off)
    if off:
        beyond = int((it > n * bt).sum())
        log.warning("%s: %d of %d requests give an input length that needs other than their hash count of "
                    "%d-token blocks (%d longer than their blocks); their lengths are kept as written",
                    where, off, len(n), bt, beyond)
        info["longer_than_blocks"] = beyond
    return bt, info
