"""Spatial samples of a trace, for miniature simulation.

Miniature simulation (Waldspurger et al., ATC'17) replays a hash-sampled subset of the
keys through a cache scaled down by the same rate; SHARDS (FAST'15) showed that hashing
keys, not sampling accesses, keeps every reuse of a kept key, so reuse distances scale
with the rate. Here the keys are blocks, chosen one of three ways (`by`):
  - "depth" (most policies): a block is kept when its depth plus a hash of its prefix
    tree's root is a multiple of m = 1/rate. It is still a function of the block id
    (the depth and root of its first appearance), so every access of a kept block is
    kept; but each request keeps exactly floor or ceil of len/m of its blocks, spread
    evenly over its depths, where a hashed sample's share varies from request to
    request. Requests and caches then scale alike (a request that fits the real cache
    fits the scaled one), which is what the residency constraint needs.
  - "block": block ids hashed (SHARDS' sampling).
  - "session": whole sessions hashed.
Which one each policy uses, and the floor below which a scaled cache is too coarse,
come from the error table in docs/sampling.md.

What a sample keeps:
  - the kept blocks of each request, in order (the residency constraint then applies to
    a request's sampled blocks); requests with no kept block are dropped;
  - each access's depth in the full request (`Trace.depth`), so a kept block is charged
    the compute cost of its true depth;
  - dense block ids 0..U'-1 (per-block state shrinks with the rate).
Hashes are splitmix64 of dense ids keyed by the seed, so a sample is a deterministic
function of (trace, rate, seed, by).
"""
from __future__ import annotations

import numpy as np

from ..jit import njit
from .trace import Trace
from .file import remap_dense_ids
from .sums import full_requests

SAMPLE_BY = ("depth", "block", "session")

_U = np.uint64


def _mix(x: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of x (uint64), keyed by seed: a well-spread 64-bit hash."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _U(0x9E3779B97F4A7C15) * _U(int(seed) + 1)
        z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
        return z ^ (z >> _U(31))


def keep_mask(keys: np.ndarray, rate: float, seed: int) -> np.ndarray:
    """bool mask of the keys whose hash falls below `rate` (a fraction of the hash space)."""
    u = (_mix(keys, seed) >> _U(11)).astype(np.float64) * (1.0 / (1 << 53))
    return u < rate


@njit
def _first_depth_root(req_offsets, blocks, depth, n_unique):
    """Per block id: its depth and its request's first block where it first appears, and
    its number of accesses."""
    d0 = np.full(n_unique, -1, np.int32)
    root = np.zeros(n_unique, np.int32)
    count = np.zeros(n_unique, np.int32)
    for r in range(len(req_offsets) - 1):
        a, b = req_offsets[r], req_offsets[r + 1]
        for i in range(a, b):
            x = blocks[i]
            count[x] += 1
            if d0[x] < 0:
                d0[x] = depth[i] if len(depth) else i - a
                root[x] = blocks[a]
    return d0, root, count


def _depth_root(trace: Trace):
    """(first depth, root, accesses) per block id: one pass over the trace, kept on it
    (shared by every rate)."""
    if "_depth_root" not in trace.__dict__:
        trace.__dict__["_depth_root"] = _first_depth_root(trace.req_offsets, trace.blocks, trace.engine_depth(),
                                                          trace.n_unique)
    return trace.__dict__["_depth_root"]


@njit
def _depth_keep(d0, root, m, seed):
    """depth_keep's rule, one loop over the block ids (splitmix64 as in `_mix`; uint64
    arithmetic wraps as numpy's does)."""
    out = np.empty(d0.shape[0], np.bool_)
    golden = np.uint64(0x9E3779B97F4A7C15) * np.uint64(seed + 1)
    mm = np.uint64(m)
    for x in range(d0.shape[0]):
        z = np.uint64(root[x]) + golden
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        out[x] = (np.int64(d0[x]) + np.int64(z % mm)) % m == 0
    return out


@njit
def _kept_accesses(req_offsets, blocks, keep_block, keep_request, n=-1):
    """(access indices, their requests) of the accesses kept by block and by request, in
    trace order, with no per-access temporary over the whole trace (664M at full scale).
    `n`, when known (the kept blocks' access counts), saves the counting pass."""
    if n < 0:
        n = 0
        for r in range(len(req_offsets) - 1):
            if keep_request[r]:
                for i in range(req_offsets[r], req_offsets[r + 1]):
                    n += keep_block[blocks[i]]
    idx = np.empty(n, np.int64)
    req = np.empty(n, np.int64)
    k = 0
    for r in range(len(req_offsets) - 1):
        if keep_request[r]:
            for i in range(req_offsets[r], req_offsets[r + 1]):
                if keep_block[blocks[i]]:
                    idx[k] = i
                    req[k] = r
                    k += 1
    return idx, req


def stride(rate: float) -> int:
    """Depth-stratified sampling keeps one depth in `stride(rate)`."""
    return max(1, int(round(1.0 / rate)))


def depth_keep(trace: Trace, rate: float, seed: int) -> np.ndarray:
    """bool[n_unique]: a block is kept when (its depth + a hash of its prefix's first block)
    is a multiple of m = 1/rate. Every request then keeps floor or ceil of len/m of its
    blocks, evenly spread over depths, and a cache of C blocks scales to ceil(C/m): a
    request that fits the real cache fits the scaled one."""
    d0, root, _ = _depth_root(trace)
    return _depth_keep(d0, root, stride(rate), int(seed))


def sample(trace: Trace, rate: float, seed: int = 0, by: str = "block") -> Trace:
    """The sample of `trace` at `rate` (0 < rate <= 1); rate 1 returns the trace itself."""
    if not 0 < rate <= 1:
        raise ValueError(f"sample rate must be in (0, 1], got {rate}")
    if by not in SAMPLE_BY:
        raise ValueError(f"unknown sampling {by!r}; valid: {', '.join(SAMPLE_BY)}")
    if rate == 1:
        return trace
    if by == "depth":
        keep = depth_keep(trace, rate, seed)
        idx, req = _kept_accesses(trace.req_offsets, trace.blocks, keep, np.ones(trace.n_requests, np.bool_),
                                  int(_depth_root(trace)[2][keep].sum()))
    elif by == "block":
        # hash each distinct id once (47.8M at full scale), not each of the 664M accesses
        idx, req = _kept_accesses(trace.req_offsets, trace.blocks,
                                  keep_mask(np.arange(trace.n_unique, dtype=np.int64), rate, seed),
                                  np.ones(trace.n_requests, np.bool_))
    else:
        # requests without a session are their own unit (key: -1 - request index)
        sess = np.where(trace.session >= 0, trace.session, -1 - np.arange(trace.n_requests))
        idx, req = _kept_accesses(trace.req_offsets, trace.blocks, np.ones(trace.n_unique, np.bool_),
                                  keep_mask(sess.astype(np.int64) + (1 << 62), rate, seed))
    per_req = np.bincount(req, minlength=trace.n_requests)
    kept_req = per_req > 0
    offsets = np.concatenate([[0], np.cumsum(per_req[kept_req])]).astype(np.int64)
    blocks, old = remap_dense_ids(trace.blocks[idx])
    depth = trace.depth[idx] if trace.depth is not None else (idx - trace.req_offsets[req]).astype(np.int32)
    meta = dict(trace.meta, sample_rate=rate, sample_seed=int(seed), sample_by=by,
                sampled_from_accesses=trace.n_accesses)
    s = Trace(offsets, blocks, trace.arrival_s[kept_req], trace.session[kept_req],
                 trace.input_tokens[kept_req], trace.output_tokens[kept_req], block_tokens=trace.block_tokens,
                 name=trace.name, source=trace.source, dropped_requests=trace.dropped_requests, meta=meta,
                 depth=depth, source_ids=None if trace.source_ids is None else trace.source_ids[old],
                 full_blocks=(trace.request_lengths if trace.full_blocks is None else trace.full_blocks)[kept_req],
                 tool_wait_s=None if trace.tool_wait_s is None else trace.tool_wait_s[kept_req])
    s.__dict__["_source_dense"] = old  # the trace's id of each of the sample's blocks (samples_of)
    return s


# A scaled cache below this many blocks is too coarse to stand for the full one: such a
# capacity is sampled at a higher rate. The floors come from the error table of
# docs/sampling.md ("The floor" groups its errors by scaled cache size; PartialNode keeps
# a higher floor through its PolicySpec.sample_floor).
MIN_SAMPLED_BLOCKS = {"depth": 64, "block": 256, "session": 256}


def sample_of(trace: Trace, rate: float, seed: int = 0, by: str = "block") -> Trace:
    """`sample(...)`, cached on the trace (a sweep's actor replays many jobs on one)."""
    cache = trace.__dict__.setdefault("_samples", {})
    key = (float(rate), int(seed), by)
    if key not in cache:
        if not isinstance(trace, Trace):  # a SampleSet lacks this one: a planning mismatch
            raise KeyError(f"no sample at rate {rate:g}, seed {seed}, by {by} in {trace.name!r}")
        cache[key] = sample(trace, rate, seed, by)
    return cache[key]


def capacity_rates(trace: Trace, capacities, rate: float, seed: int, by: str, mode,
                   floor: int | None = None) -> dict[int, float]:
    """The rate each capacity is sampled at: `rate`, doubled until the scaled cache holds
    at least `floor` blocks (default MIN_SAMPLED_BLOCKS[by]) and (request mode, hashed units) the sample's
    largest request, since the residency constraint would otherwise turn requests that
    fit the real cache into oversized ones (a depth sample scales requests and caches
    alike: see depth_keep). 1.0 means an exact replay."""
    from ..result import Mode

    out = {}
    for c in dict.fromkeys(int(c) for c in capacities):
        r = float(rate)
        while r < 1.0:
            need = MIN_SAMPLED_BLOCKS[by] if floor is None else int(floor)
            if Mode(mode) is Mode.REQUEST and by != "depth":  # depth: fits by construction
                need = max(need, sample_of(trace, r, seed, by).max_request_blocks)
            if scaled_capacity(c, r, by) >= need:
                break
            r = min(1.0, r * 2)
        out[c] = r
    samples_of(trace, sorted(set(out.values()) - {1.0}), seed, by)  # built here, once: SampleSet.of ships them
    return out


def samples_of(trace: Trace, rates, seed: int, by: str) -> list[Trace]:
    """`sample_of` at each rate. Depth samples at strides that divide one another are
    nested (a block kept at stride 2m is kept at m), so each is cut from the next finer
    one instead of from the whole trace: one pass over the trace's accesses for all."""
    rates = sorted(float(r) for r in rates)
    cache = trace.__dict__.setdefault("_samples", {})
    if by != "depth" or not isinstance(trace, Trace):
        return [sample_of(trace, r, seed, by) for r in rates]
    out: dict[float, Trace] = {}
    finer = None  # (stride, sample) of the finest sample built or cached so far
    for r in reversed(rates):  # finest first
        key = (r, int(seed), by)
        if key not in cache:
            m = stride(r)
            if finer is not None and m % finer[0] == 0 and r < 1:
                cache[key] = _subsample(trace, finer[1], m, seed, r)
            else:
                cache[key] = sample(trace, r, seed, by)
        out[r] = cache[key]
        if r < 1:
            finer = (stride(r), cache[key])
    return [out[r] for r in rates]


def _subsample(trace: Trace, fine: Trace, m: int, seed: int, rate: float) -> Trace:
    """The depth sample at stride m of `trace`, cut from its depth sample `fine` at a
    stride dividing m: the same blocks and accesses as sample(trace, rate, seed, "depth")."""
    d0, root, _ = _depth_root(trace)
    keep_full = _depth_keep(d0, root, m, int(seed))
    # fine's dense ids map back to trace ids through their first appearance
    old = fine.__dict__["_source_dense"]
    keep = keep_full[old]
    idx, req = _kept_accesses(fine.req_offsets, fine.blocks, keep, np.ones(fine.n_requests, np.bool_))
    per_req = np.bincount(req, minlength=fine.n_requests)
    kept_req = per_req > 0
    offsets = np.concatenate([[0], np.cumsum(per_req[kept_req])]).astype(np.int64)
    blocks, sub_old = remap_dense_ids(fine.blocks[idx])
    meta = dict(fine.meta, sample_rate=rate)
    s = Trace(offsets, blocks, fine.arrival_s[kept_req], fine.session[kept_req], fine.input_tokens[kept_req],
              fine.output_tokens[kept_req], block_tokens=fine.block_tokens, name=fine.name, source=fine.source,
              dropped_requests=fine.dropped_requests, meta=meta, depth=fine.depth[idx],
              source_ids=None if fine.source_ids is None else fine.source_ids[sub_old],
              full_blocks=fine.full_blocks[kept_req],
              tool_wait_s=None if fine.tool_wait_s is None else fine.tool_wait_s[kept_req])
    s.__dict__["_source_dense"] = old[sub_old]
    return s


# sim.sample_rate=auto: a trace larger than twice this many block accesses is sampled
# down to about this many, never below r = 0.01 (the rate the error table measures)
AUTO_KEEP_ACCESSES = 5_000_000
AUTO_MIN_RATE = 0.01
# Of k > 1 independent weeks, auto keeps at least this many accesses of them all, at a
# power-of-two stride (2 or 3 full-scale weeks: r = 1/1024). The weeks are there for the
# small capacities' workload spread; those keep their floor-raised rate in every week
# (24 GiB, 2^14 blocks: stride 128, exactly the floor), and above the floors the k weeks
# together replay a fifth to a third of one week's default sample (docs/performance.md).
AUTO_KEEP_WEEKS_ACCESSES = 1_250_000


def auto_rate(n_accesses: int, weeks: int = 1) -> float | None:
    """The rate `sim.sample_rate=auto` picks for a trace of `n_accesses`: None (exact)
    up to 2 x AUTO_KEEP_ACCESSES, else 1/m with m = n_accesses // AUTO_KEEP_ACCESSES,
    at least AUTO_MIN_RATE (the full-scale FreeInference-like trace: r = 0.01). Of k > 1
    independent weeks (`weeks`; n_accesses counts them all) m = n_accesses //
    AUTO_KEEP_WEEKS_ACCESSES rounded down to a power of two (2 or 3 full-scale weeks: 1024)."""
    n = int(n_accesses)
    if n < 2 * AUTO_KEEP_ACCESSES:
        return None
    if int(weeks) > 1:
        m = n // AUTO_KEEP_WEEKS_ACCESSES
        return 1.0 / (1 << (m.bit_length() - 1))
    m = min(int(round(1 / AUTO_MIN_RATE)), n // AUTO_KEEP_ACCESSES)
    return None if m < 2 else 1.0 / m


def scaled_capacity(capacity: int, rate: float, by: str) -> int:
    """The miniature cache that stands for `capacity` blocks at `rate`."""
    if by == "depth":
        return -(-int(capacity) // stride(rate))
    return max(1, round(int(capacity) * rate))


class SampleSet:
    """The samples of a trace without the trace itself: what a sweep ships to its actors
    when every capacity is sampled (26 MB instead of 2.6 GB at full scale, r = 0.01).
    `simulate(sample_set, ..., sample_rate=r)` works as on the trace, as long as every
    sample it needs (the same rates and seed: `capacity_rates` is deterministic) is here."""

    def __init__(self, name: str, source: str, block_tokens: int, n_accesses: int, samples: dict,
                 requests: tuple | None = None):
        self.name, self.source, self.block_tokens = name, source, int(block_tokens)
        self.n_accesses = int(n_accesses)
        self._samples = dict(samples)  # the cache sample_of reads
        # (arrival_s, blocks, prompt tokens) per request of the trace: warm-up and token counts
        self.requests = requests

    @classmethod
    def of(cls, trace: Trace) -> "SampleSet":
        return cls(trace.name, trace.source, trace.block_tokens, trace.n_accesses,
                   trace.__dict__.get("_samples", {}), full_requests(trace))

    def __getattr__(self, name):
        raise AttributeError(f"{name!r}: a SampleSet holds only samples of trace {self.name!r}; "
                             f"an exact replay (sample_rate 1) needs the trace itself")
