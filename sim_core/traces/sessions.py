"""Sessions inferred from prefix chains, for traces that carry no session ids (Mooncake).

Heuristic (:func:`infer_sessions`). A multi-turn chat resends its previous turn's prompt
followed by the reply and the new message, so request r continues the session of the
earlier request P whose whole block sequence is a prefix of r's: the deepest such P, the
most recent one among equally deep ones (an identical earlier request counts). Two
refinements:

* **Re-hashed partial last block** (``partial_last``). An engine hashes a request's
  partial last block as it is; once the next turn fills that block it hashes
  differently. So P also matches when all of P but its last block is a prefix of r and
  P's last block is partial (its ``input_tokens`` end inside it: see
  :meth:`Trace.partial_tails`); at equal depth an exact match is preferred. The bundled
  Mooncake trace (512-token blocks) needs this: with it 3,984 of its 12,031 requests
  continue an earlier one, with exact prefixes only 130. The generated FreeInference
  trace keeps a turn's last block id when the next turn extends it, so exact matches
  find its turns either way.
* **A shared prompt alone does not join sessions** (``max_fanout``). A *hub* is a block
  that more than ``max_fanout`` distinct blocks follow somewhere in the trace, counting
  only followers that are not the last block of their request: a Mooncake chat whose
  turns add less than a block each ends several turns in one block, each re-hashed, so
  counting last blocks would make its own history a hub. A system prompt or template
  shared by many requests ends in a hub. A match counts only when it reaches deeper
  than every hub on r's path (r's last block excepted), so sharing a prompt, or a part
  of one, never links two requests, while a request that is itself a context many
  later requests continue still joins its own predecessor. The default, 3: on the
  generated traces at scale 0.05 (``python -m benchmarks.sessions``) pair precision is
  at least 0.9996 up to 3 on FreeInference and falls at 16, on Chutes it falls from 4
  (0.9964 at 1-3); Mooncake links 3,924 requests at 1, 3,984 at 3, 4,003 at 8.

Sessions are the chains of these links: r gets the session of its matched P, else a new
one; ids are numbered in order of first request (0, 1, ...).

Cost: one pass counts followers (an array over dense block ids: with prefix-chained ids
a block's predecessor is the same wherever it occurs), one pass over the requests keeps
two arrays indexed by block id in place of a hash map (the latest request whose whole
sequence ends at b, with its length, and the latest whose sequence without a partial
last block ends at b): a request looks each of its positions up at most once, deepest
first, and the chosen candidate is verified block by block, which always holds for
prefix-chained ids. O(total blocks) time, O(unique blocks + requests) memory, numba.

Known failure modes:

* A context that more than ``max_fanout`` later requests continue (parallel sub-agents
  forking one context, many regenerations of one answer) is treated like a shared
  prompt: the continuations become sessions of their own (the request that built the
  context stays in its session).
* A rarely shared prompt (at most ``max_fanout`` continuing followers) is no hub: a
  request made of that prompt alone, or of the prompt plus one partial block, is joined
  by the next request that extends it. Requests of a template plus one partial block
  never make their template a hub (their followers are last blocks), so with
  ``partial_last`` they chain into one session: the generated Chutes trace at scale
  0.05 has 19 such false links among 5,250 (its longest single-turn prompts are clipped
  to the context window right after a shared template), pair precision 0.9964.
* A chat whose client rewrites the history (compaction or summarisation, truncation of
  old turns, a reasoning model's thoughts dropped from it) no longer contains its
  previous turn: the session is cut there. The generated FreeInference trace compacts
  a few long sessions this way (pair recall 0.997-0.999, but ARI 0.85-0.88: a cut
  session is a large one).
* Requests that share a long context without containing one another are not linked: a
  session is a chain of turns, not a group of requests about one document. Many
  Mooncake requests are of this kind (one 6-13-block context, then different
  continuations of 20-40 blocks).
* Hub counts use the whole trace, requests after r included.
* Block ids that are not prefix-chained (one id at several depths) may miss matches: a
  candidate that fails verification is skipped.

:func:`pair_scores` and :func:`partition_scores` compare an inferred partition with a
known one; ``python -m benchmarks.sessions`` prints both for the generated traces.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..jit import njit
from .file import remap_dense_ids

INFERRED_NOTE = "sessions inferred from prefix chains (sim_core/traces/sessions.py)"
PARTIAL_LAST = ("auto", "always", "never")
DEFAULT_MAX_FANOUT = 3


# ------------------------------------------------------------------ compiled passes
@njit
def _follower_counts(offsets, blocks, n_unique):
    """int32[U]: distinct blocks that follow each block at a position that is not the
    last of its request (a follower is counted once, after the first block it follows)."""
    fan = np.zeros(n_unique, np.int32)
    seen = np.zeros(n_unique, np.bool_)
    for r in range(offsets.shape[0] - 1):
        s = offsets[r]
        e = offsets[r + 1]
        for j in range(s + 1, e - 1):
            c = blocks[j]
            if not seen[c]:
                seen[c] = True
                fan[blocks[j - 1]] += 1
    return fan


@njit
def _is_prefix(blocks, a, b, k):
    """blocks[a:a+k] == blocks[b:b+k]."""
    for i in range(k):
        if blocks[a + i] != blocks[b + i]:
            return False
    return True


@njit
def _link(offsets, blocks, n_unique, hub, cut_ok):
    """(parent, session), int64[R]: each request's matched earlier request (-1: none)
    and its session id. hub: bool[U]; cut_ok: bool[R], True where a request's last block
    may be re-hashed once extended (it then also ends at its second-to-last block)."""
    R = offsets.shape[0] - 1
    end_req = np.full(n_unique, -1, np.int64)  # latest request whose whole sequence ends at b
    end_len = np.zeros(n_unique, np.int64)
    cut_req = np.full(n_unique, -1, np.int64)  # latest request that, without its last block, ends at b
    cut_len = np.zeros(n_unique, np.int64)
    parent = np.full(R, -1, np.int64)
    session = np.empty(R, np.int64)
    n_sessions = 0
    for r in range(R):
        s = offsets[r]
        n = offsets[r + 1] - s
        deepest_hub = -1  # deepest hub on r's path, r's last block excepted
        for i in range(n - 2, -1, -1):
            if hub[blocks[s + i]]:
                deepest_hub = i
                break
        p = -1
        for k in range(n, deepest_hub + 1, -1):  # match = r's first k blocks; k - 1 > deepest_hub
            b = blocks[s + k - 1]
            q = end_req[b]
            if q >= 0 and end_len[b] == k and _is_prefix(blocks, offsets[q], s, k):
                p = q
                break
            q = cut_req[b]
            if q >= 0 and cut_len[b] == k and _is_prefix(blocks, offsets[q], s, k):
                p = q
                break
        parent[r] = p
        if p >= 0:
            session[r] = session[p]
        else:
            session[r] = n_sessions
            n_sessions += 1
        if n > 0:
            last = blocks[s + n - 1]
            end_req[last] = r
            end_len[last] = n
            if n > 1 and cut_ok[r]:
                b = blocks[s + n - 2]
                cut_req[b] = r
                cut_len[b] = n - 1
    return parent, session


# ------------------------------------------------------------------ API
def _check(trace) -> None:
    if trace.depth is not None or trace.tail_first or trace.full_blocks is not None:
        raise ValueError(f"trace {trace.name!r}: sessions are inferred from a whole trace in forward order, not "
                         f"from a sample or a tail-first view (infer them before sampling)")


def _cut_ok(trace, partial_last: str) -> np.ndarray:
    if partial_last not in PARTIAL_LAST:
        raise ValueError(f"partial_last must be one of {PARTIAL_LAST}, got {partial_last!r}")
    R = trace.n_requests
    if partial_last == "never":
        return np.zeros(R, np.bool_)
    if partial_last == "always":
        return np.ones(R, np.bool_)
    return trace.partial_tails()[0] >= 0


def hubs(trace, max_fanout: int = DEFAULT_MAX_FANOUT) -> np.ndarray:
    """bool[U]: blocks followed by more than `max_fanout` distinct blocks that are not
    the last block of their request (shared prompts and templates end in one)."""
    if int(max_fanout) < 1:
        raise ValueError(f"max_fanout must be at least 1, got {max_fanout!r}")
    return _follower_counts(trace.req_offsets, trace.blocks, trace.n_unique) > int(max_fanout)


def infer_links(trace, *, partial_last: str = "auto",
                max_fanout: int = DEFAULT_MAX_FANOUT) -> tuple[np.ndarray, np.ndarray]:
    """(parent, session), int64[R]: the earlier request each request continues (-1: it
    starts a session) and the inferred session ids. See the module docstring.

    partial_last: "auto" (a request's last block may be re-hashed once extended when its
    input tokens end inside that block), "always" (every last block may be), "never"
    (exact prefixes only). max_fanout: a block more than this many distinct blocks
    follow is a hub (a shared prompt) that no match may end at or before.
    """
    _check(trace)
    cut_ok = _cut_ok(trace, partial_last)
    return _link(trace.req_offsets, trace.blocks, trace.n_unique, hubs(trace, max_fanout), cut_ok)


def infer_sessions(trace, *, partial_last: str = "auto", max_fanout: int = DEFAULT_MAX_FANOUT) -> np.ndarray:
    """int64[R]: a session id per request, inferred from shared prefix chains (module
    docstring: the heuristic and where it fails). Ids are 0.. in order of first request."""
    return infer_links(trace, partial_last=partial_last, max_fanout=max_fanout)[1]


def rehash_partial_tails(trace):
    """The trace as an engine that hashes a partial last block as it is would log it:
    every request whose last block is partial (:meth:`Trace.partial_tails`) gets a fresh
    id for that block, while a later request that holds the block full keeps its id.
    For measuring ``partial_last`` on generated traces, whose turns keep the id."""
    _check(trace)
    tail_depth = trace.partial_tails()[0]
    idx = np.nonzero(tail_depth >= 0)[0]
    raw = trace.blocks.astype(np.int64)
    raw[trace.req_offsets[idx + 1] - 1] = trace.n_unique + np.arange(len(idx))
    blocks, _ = remap_dense_ids(raw)
    return dataclasses.replace(trace, blocks=blocks, source_ids=None,
                               meta=dict(trace.meta, partial_tails_rehashed=True))


def has_session_ids(trace) -> bool:
    """Does the trace say which requests form a session (any id >= 0)?"""
    return bool((np.asarray(trace.session) >= 0).any())


def sessions_source(trace) -> str:
    """Where the trace's session ids came from: "given" (the trace's own), "inferred"
    (:func:`with_inferred_sessions`) or "none" (no ids). ``meta["sessions_source"]`` as
    sim_core.traces.config.load records it; a trace made another way is read as it is."""
    src = trace.meta.get("sessions_source")
    if src is not None:
        return str(src)
    if trace.meta.get("sessions") == INFERRED_NOTE:
        return "inferred"
    return "given" if has_session_ids(trace) else "none"


def with_inferred_sessions(trace, *, force: bool = False, **kwargs):
    """The trace with inferred session ids (meta["sessions"] = INFERRED_NOTE), or the
    trace itself when it has session ids of its own (unless `force`)."""
    if has_session_ids(trace) and not force:
        return trace
    return dataclasses.replace(trace, session=infer_sessions(trace, **kwargs),
                               meta=dict(trace.meta, sessions=INFERRED_NOTE))


# ------------------------------------------------------------------ scores
def turn_index(trace) -> np.ndarray:
    """int64[R]: each request's turn in its session (0 = the session's first request, in
    arrival order); -1 for a request without a session."""
    s = np.asarray(trace.session)
    out = np.full(len(s), -1, np.int64)
    has = np.flatnonzero(s >= 0)
    order = has[np.argsort(s[has], kind="stable")]  # by session, arrival order inside
    if len(order):
        first = np.r_[True, s[order][1:] != s[order][:-1]]
        starts = np.flatnonzero(first)
        out[order] = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    return out


def next_in_session(trace) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): every request a that has a next request in its session, and that request b
    (requests without a session have none)."""
    s = np.asarray(trace.session)
    has = np.flatnonzero(s >= 0)
    order = has[np.argsort(s[has], kind="stable")]  # by session, then by index
    same = s[order][1:] == s[order][:-1]
    return order[:-1][same], order[1:][same]


def next_arrival_s(trace) -> np.ndarray:
    """float64[R]: arrival of the next request of the same session (inf for a session's
    last request and for requests without a session): what an agent framework knows of
    when a session comes back."""
    out = np.full(trace.n_requests, np.inf)
    a, b = next_in_session(trace)
    out[a] = trace.arrival_s[b]
    return out


def _dense(labels) -> np.ndarray:
    """Dense ids 0..K-1; a label < 0 (unknown) is a class of its own."""
    a = np.asarray(labels, dtype=np.int64)
    out = np.empty(len(a), np.int64)
    known = a >= 0
    _, inv = np.unique(a[known], return_inverse=True)
    out[known] = inv
    n = int(inv.max()) + 1 if len(inv) else 0
    out[~known] = n + np.arange(int((~known).sum()))
    return out


def _consecutive(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b): each pair of requests that are consecutive (in trace order) within a class."""
    order = np.argsort(labels, kind="stable")
    same = labels[order[1:]] == labels[order[:-1]]
    return order[:-1][same], order[1:][same]


def pair_scores(truth, inferred) -> dict[str, float]:
    """Precision and recall of "same session" over consecutive-turn pairs.

    recall: share of true consecutive pairs (two requests of one true session with no
    request of that session between them) that are in one inferred session; precision:
    share of inferred consecutive pairs that are in one true session. A label < 0 is a
    session of its own. NaN where there is no pair. Also the pair counts and F1.
    """
    t, i = _dense(truth), _dense(inferred)
    if len(t) != len(i):
        raise ValueError(f"{len(t)} true labels, {len(i)} inferred")
    ta, tb = _consecutive(t)
    ia, ib = _consecutive(i)
    recall = float((i[ta] == i[tb]).mean()) if len(ta) else float("nan")
    precision = float((t[ia] == t[ib]).mean()) if len(ia) else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else float("nan")
    return {"precision": precision, "recall": recall, "f1": f1, "true_pairs": int(len(ta)),
            "inferred_pairs": int(len(ia))}


def _entropy(counts: np.ndarray, n: int) -> float:
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def partition_scores(truth, inferred) -> dict[str, float]:
    """Adjusted Rand index, homogeneity, completeness and V-measure of the inferred
    partition against the true one (a label < 0 is a session of its own), from the
    contingency table, computed here in numpy.

    homogeneity = 1 - H(true | inferred) / H(true): each inferred session holds one true
    session; completeness = 1 - H(inferred | true) / H(inferred): each true session is
    one inferred session (1 where the entropy in the denominator is 0).
    """
    t, i = _dense(truth), _dense(inferred)
    if len(t) != len(i):
        raise ValueError(f"{len(t)} true labels, {len(i)} inferred")
    n = len(t)
    if n == 0:
        return {"ari": float("nan"), "homogeneity": float("nan"), "completeness": float("nan"),
                "v_measure": float("nan")}
    _, cell = np.unique(t * (int(i.max()) + 1) + i, return_counts=True)
    a = np.bincount(t).astype(np.float64)
    b = np.bincount(i).astype(np.float64)
    cell = cell.astype(np.float64)

    def pairs(x):
        return float((x * (x - 1) / 2).sum())

    index, sa, sb, total = pairs(cell), pairs(a), pairs(b), n * (n - 1) / 2
    expected = sa * sb / total if total else 0.0
    top = (sa + sb) / 2
    ari = 1.0 if top == expected else (index - expected) / (top - expected)
    h_t, h_i, h_ti = _entropy(a, n), _entropy(b, n), _entropy(cell, n)  # H(T), H(I), H(T, I)
    homogeneity = 1.0 if h_t == 0 else 1.0 - (h_ti - h_i) / h_t
    completeness = 1.0 if h_i == 0 else 1.0 - (h_ti - h_t) / h_i
    v = 2 * homogeneity * completeness / (homogeneity + completeness) if homogeneity + completeness > 0 else 0.0
    return {"ari": float(ari), "homogeneity": float(homogeneity), "completeness": float(completeness),
            "v_measure": float(v)}
