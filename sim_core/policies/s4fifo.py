"""S4-FIFO: the eviction heuristic of "Learning-Augmented Heuristics: Simple, yet Smart,
Robust and Interpretable Cache Eviction" (Xia et al., OSDI'26).

S4-FIFO is S3-FIFO (see s3fifo.py: small FIFO S, main FIFO M with 2-bit reinsertion,
ghost FIFO G of ids demoted from S) with its constants turned into five knobs:
  small_ratio              rho_S  0.10  share of the cache held by S
  ghost_ratio              rho_G  0.90  ghost entries, relative to the cache size
  skip_ratio               kappa  0.00  hits on a block among the newest
                                        floor(kappa * |S|) insertions into S do not count
  move_to_main_threshold   tau_S  2     hits taken in S to be moved to M on leaving S
  ghost_to_main_threshold  tau_G  0     ghost hits, besides the current one, a block
                                        needs before a ghost hit admits it straight to M
The skip ratio is the "fourth queue": a burst of correlated references right after
insertion cannot buy a promotion. The ghost threshold resists cyclic scans: with
tau_G = 1 the first ghost hit only sends the block back through S, and the second
one (counted across cache lifetimes) admits it to M. At the defaults (the paper's)
S4-FIFO is exactly S3-FIFO; tests check it equals libcachesim.S3FIFO.

The paper's control plane - a GBDT trained offline on 4,140 production traces that
picks one of 18 configurations from 73 cache-level features collected during warm-up -
is not reproduced: its model (MBs of generated trees) and production training traces
are out of scope here. `preset` = 0..17 selects one of those 18 configurations (the
table of the artifact's S4FIFO_predictor.c, as (rho_S, tau_S, tau_G, rho_G, kappa));
-1 uses the five knobs as given. Sweeping the presets and keeping the best per trace
is the paper's "offline S4-FIFO" upper bound.

Open choices, as parameters:
  ghost_mode  how tau_G counts (the paper only says "ghost hits needed"):
    "carry"    (default; upstream libCacheSim S4FIFO.c): a ghost hit always removes the
               ghost entry; count = previous ghost hits + 1; the block goes to M if
               count > tau_G, else to S carrying the count, which a later demotion
               writes back into its new ghost entry.
    "artifact" (the paper artifact's S4FIFO_base.c): the ghost entry starts at the
               number of hits the block took in S; a ghost hit with entry >= tau_G
               removes it and admits to M, otherwise it increments the entry, which
               stays in G (also while the block is resident; a later demotion
               overwrites it, a hit in M also checks it) and the block goes to S.
  The skip window counts insertions into S (blocks have unit size, so this equals the
  byte count of upstream and the insertion count of the artifact).
Shared with s3fifo.py (libCacheSim behaviour): blocks leave S for M with freq 0; S's
scan does not evict from M; before the first eviction new blocks go to M once S is
full; in block mode the ghost look-up happens before the eviction it triggers (evict
reads the incoming block from the trace); S has at least one slot (libCacheSim admits
nothing into S below two slots).

Request mode: as s3fifo.py (r's ghost hits are resolved when its missing blocks are
inserted, after r's evictions; pinned blocks are skipped in S and rotated in M).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit
from ..structures.fifoq import S3FIFO_DEFAULTS, evict_queues, queue_sizes
from ..structures.mlist import leave, new_links, push_head, tail
from .api import PolicySpec, register_hooks

S, M, G = 0, 1, 2  # sentinels U + S, U + M (family L) and U + G (family GL)
L, GL, WHERE, IN_G, FREQ, GHOST, INS, META = 0, 2, 4, 5, 6, 7, 8, 9  # rows of lk
NONE, IN_S, IN_M, PEND_M, PEND_S = 0, 1, 2, 3, 4  # lk[WHERE]; PEND_*: looked up, bound for M / S
S_CAP, M_CAP, G_CAP, THR, G_THR, SKIP, ARTIFACT, HAS_EVICTED, N_INS, N_S, N_M, N_G = range(12)  # lk[META]
N_SENT, N_META = 3, 12
FREQ_MAX = 1 << 30
INS_MASK = 0x7FFFFFFF  # insertion stamps are kept modulo 2^31 (a stay in S is far shorter)
GHOST_MODES = ("carry", "artifact")

# (rho_S, tau_S, tau_G, rho_G, kappa) of the 18 classes of the paper's learned selector
PRESETS = (
    (0.20, 1, 0, 3.0, 0.25), (0.05, 1, 0, 0.9, 0.25), (0.50, 1, 0, 0.9, 0.25),
    (0.20, 1, 0, 0.9, 0.25), (0.05, 2, 0, 6.0, 0.25), (0.10, 2, 1, 3.0, 0.25),
    (0.30, 2, 0, 3.0, 0.25), (0.05, 2, 0, 3.0, 0.25), (0.10, 2, 0, 0.9, 0.25),
    (0.70, 1, 1, 0.9, 0.25), (0.20, 1, 1, 0.9, 0.25), (0.05, 1, 1, 0.9, 0.25),
    (0.30, 1, 0, 6.0, 0.25), (0.20, 2, 0, 0.9, 0.25), (0.90, 2, 0, 3.0, 0.25),
    (0.10, 2, 0, 6.0, 0.25), (0.30, 2, 1, 3.0, 0.25), (0.05, 2, 0, 0.9, 0.25),
)
KNOBS = ("small_ratio", "move_to_main_threshold", "ghost_to_main_threshold", "ghost_ratio", "skip_ratio")


class S4FIFOState(NamedTuple):
    lk: np.ndarray  # int32[10, U+3+N_META]: links of S/M and of G, where, in G, freq, ghost count, stamp, scalars
    blocks: np.ndarray  # the trace's blocks (block mode: the incoming block of evict)
    cur: np.ndarray  # int64[2]: eviction cursor in S (request, last pinned block skipped)


def resolve_params(params: dict) -> dict:
    """The five knobs after applying `preset`, validated."""
    preset = int(params["preset"])
    knobs = {k: params[k] for k in KNOBS}
    if preset >= 0:
        if preset >= len(PRESETS):
            raise ValueError(f"s4fifo: preset must be -1 or 0..{len(PRESETS) - 1}, got {preset}")
        knobs = dict(zip(KNOBS, PRESETS[preset]))
    if not 0.0 < float(knobs["small_ratio"]) < 1.0:
        raise ValueError(f"s4fifo: small_ratio must be in (0, 1), got {knobs['small_ratio']}")
    if float(knobs["ghost_ratio"]) < 0.0:
        raise ValueError(f"s4fifo: ghost_ratio must be >= 0, got {knobs['ghost_ratio']}")
    if not 0.0 <= float(knobs["skip_ratio"]) < 1.0:
        raise ValueError(f"s4fifo: skip_ratio must be in [0, 1), got {knobs['skip_ratio']}")
    if int(knobs["move_to_main_threshold"]) < 1 or int(knobs["ghost_to_main_threshold"]) < 0:
        raise ValueError("s4fifo: move_to_main_threshold must be >= 1 and ghost_to_main_threshold >= 0")
    if params["ghost_mode"] not in GHOST_MODES:
        raise ValueError(f"s4fifo: ghost_mode must be one of {GHOST_MODES}, got {params['ghost_mode']!r}")
    return knobs


def make_state(ctx) -> S4FIFOState:
    k = resolve_params(ctx.params)
    lk = new_links(ctx.trace.n_unique, N_SENT, 10, families=(L, GL), n_meta=N_META)
    s_cap, m_cap, g_cap = queue_sizes(ctx.capacity, float(k["small_ratio"]), float(k["ghost_ratio"]))
    lk[META, S_CAP], lk[META, M_CAP], lk[META, G_CAP] = s_cap, m_cap, g_cap
    lk[META, THR] = int(k["move_to_main_threshold"])
    lk[META, G_THR] = int(k["ghost_to_main_threshold"])
    lk[META, SKIP] = int(s_cap * float(k["skip_ratio"]))
    lk[META, ARTIFACT] = int(ctx.params["ghost_mode"] == "artifact")
    return S4FIFOState(lk, ctx.trace.blocks, np.full(2, -1, np.int64))


# ------------------------------------------------------------------ ghost
@njit
def _g_remove(lk, b):
    leave(lk, GL, b, IN_G, META, N_G)


@njit
def _g_put(lk, v, count):
    """Demote v's id to G with counter `count` (an id already in G keeps its place)."""
    g = lk.shape[1] - N_SENT - N_META + G
    g_cap = lk[META, G_CAP]
    if g_cap <= 0:
        return
    if not lk[IN_G, v]:
        while lk[META, N_G] >= g_cap:
            _g_remove(lk, tail(lk, GL, g))
        push_head(lk, GL, g, v)
        lk[IN_G, v] = 1
        lk[META, N_G] += 1
    lk[GHOST, v] = count


@njit
def _ghost_lookup(lk, b):
    """Ghost look-up of b (not resident, in G); sets its where to PEND_M or PEND_S."""
    if lk[META, ARTIFACT]:
        if lk[GHOST, b] >= lk[META, G_THR]:
            _g_remove(lk, b)
            lk[WHERE, b] = PEND_M
        else:
            lk[GHOST, b] += 1
            lk[WHERE, b] = PEND_S
    else:
        count = lk[GHOST, b] + 1
        _g_remove(lk, b)
        if count > lk[META, G_THR]:
            lk[WHERE, b] = PEND_M
        else:
            lk[GHOST, b] = count
            lk[WHERE, b] = PEND_S


# ------------------------------------------------------------------ eviction
@njit
def _to_main(lk, v):
    push_head(lk, L, lk.shape[1] - N_SENT - N_META + M, v)
    lk[META, N_M] += 1
    lk[WHERE, v] = IN_M
    lk[FREQ, v] = 0


@njit
def on_hit(st, b, j, r, d):
    lk = st.lk
    if lk[WHERE, b] == IN_S:
        if (lk[META, N_INS] - lk[INS, b]) & INS_MASK >= lk[META, SKIP] and lk[FREQ, b] < FREQ_MAX:
            lk[FREQ, b] += 1
        return
    if lk[META, ARTIFACT] and lk[IN_G, b]:  # the artifact checks G before M
        if lk[GHOST, b] >= lk[META, G_THR]:
            _g_remove(lk, b)
        else:
            lk[GHOST, b] += 1
    if lk[FREQ, b] < FREQ_MAX:
        lk[FREQ, b] += 1


@njit
def on_insert(st, b, j, r, d):
    lk = st.lk
    if lk[WHERE, b] == NONE:
        if lk[IN_G, b]:  # ghost hit with no eviction due (or request mode)
            _ghost_lookup(lk, b)
        else:
            lk[GHOST, b] = 0
    if lk[WHERE, b] == PEND_M:
        lk[GHOST, b] = 0
        _to_main(lk, b)
    elif lk[META, HAS_EVICTED] == 0 and lk[META, N_S] >= lk[META, S_CAP]:
        _to_main(lk, b)
    else:
        push_head(lk, L, lk.shape[1] - N_SENT - N_META + S, b)
        lk[META, N_S] += 1
        lk[WHERE, b] = IN_S
        lk[FREQ, b] = 0
        n = (lk[META, N_INS] + 1) & INS_MASK
        lk[META, N_INS] = n
        lk[INS, b] = n


@njit
def evict(st, j, r, pin):
    lk = st.lk
    if r < 0:  # block mode: resolve the incoming block's ghost hit before evicting
        x = st.blocks[j]
        if lk[WHERE, x] == NONE and lk[IN_G, x]:
            _ghost_lookup(lk, x)
    lk[META, HAS_EVICTED] = 1
    U = lk.shape[1] - N_SENT - N_META
    v, small = evict_queues(lk, L, U + S, U + M, FREQ, WHERE, META, N_S, N_M, IN_M,
                            lk[META, M_CAP], lk[META, THR], pin, r, st.cur)
    if small and v >= 0:  # quick demotion: remember the id (and its count) in G
        lk[WHERE, v] = NONE
        _g_put(lk, v, lk[FREQ, v] if lk[META, ARTIFACT] else lk[GHOST, v])
    return v


register_hooks(S4FIFOState, on_hit, on_insert, evict)

SPEC = PolicySpec(
    "s4fifo", make_state,
    "S4-FIFO (OSDI'26) heuristic - S3-FIFO plus a skip window and a ghost-hit "
    "threshold (static knobs, no learned selector).",
    defaults={**S3FIFO_DEFAULTS, "skip_ratio": 0.0, "ghost_to_main_threshold": 0,
              "ghost_mode": "carry", "preset": -1},
    family="quick_demotion",
    identical_to={"s3fifo": "S4-FIFO at its default knobs, without its learned selector, is S3-FIFO"},
    weight=2.0)
