"""The measured step model's compiled side: one step's time from tables of aiconfigurator-core.

A step is timed from its parts, each interpolated in a table built once from the package
(sim_core.serving.measured.tables):
  S(T)          the pass's work outside attention (GEMMs, MoE, norms, ...) at T tokens;
  CA(k, n, c)   the context attention of k prefill chunks, each n new tokens after c cached
                (the package prices k chunks together: a batch shares the kernel launches);
  DA(b, L)      the decode attention of b decodes at mean context L;
  Dn(b)         a decode-only pass's work outside attention (the two-pass composition).
fused  (default) one forward pass per step, as vLLM runs a mixed batch:
          S(all tokens) + sum over chunks CA(k, n_i, c_i) / k + DA(decodes, mean context),
          and a step of decodes alone Dn(b) + DA(b, mean context). This is the package's
          own per-step estimate (estimate_forward_pass_time_ms) when the k chunks are
          equal; unequal chunks keep each its own shape instead of their mean.
dynamo    Dynamo's mocker with the package: a prefill pass at the chunks' mean shape plus a
          separate decode pass, S(prefill tokens) + CA(k, mean n, mean c) +
          max(1 ms, Dn(b) + DA(b, mean context)).
Everything is packed in one float64 array (`pack`): a header of offsets, then the tables.
"""
from __future__ import annotations

import numpy as np

from ...jit import hook_njit, inline_njit

(H_MODE, H_NS, H_S, H_NSX, H_SX, H_SY, H_NK, H_NN, H_NC, H_K, H_N, H_C, H_CA, H_NB, H_NL, H_B, H_L, H_DA, H_NDN,
 H_DNX, H_DNY, H_TOK, H_NCB, H_CB, H_CL, H_NGB, H_GB, H_GL, H_FLOOR) = range(29)
HEADER = 32
MODES = ("fused", "dynamo")
# flags of a step that left the measured data
OUT_TOKENS, OUT_PREFILL, OUT_DECODE = 1, 2, 4


def pack(t: dict, mode: str, floor_ms: float = 1.0) -> np.ndarray:
    """One flat float64 array from the tables `t` (sim_core.serving.measured.TABLES)."""
    h = np.zeros(HEADER)
    parts = [h]
    pos = HEADER

    def put(slot, a):
        nonlocal pos
        a = np.ascontiguousarray(a, np.float64).ravel()
        h[slot] = pos
        parts.append(a)
        pos += len(a)

    h[H_MODE] = MODES.index(mode)
    h[H_NS] = len(t["s_dense"])
    put(H_S, t["s_dense"])
    h[H_NSX] = len(t["s_x"])
    put(H_SX, t["s_x"])
    put(H_SY, t["s_y"])
    h[H_NK], h[H_NN], h[H_NC] = t["ca"].shape
    put(H_K, t["ca_k"])
    put(H_N, t["ca_n"])
    put(H_C, t["ca_c"])
    put(H_CA, t["ca"])
    h[H_NB], h[H_NL] = t["da"].shape
    put(H_B, t["da_b"])
    put(H_L, t["da_l"])
    put(H_DA, t["da"])
    h[H_NDN] = len(t["dn_x"])
    put(H_DNX, t["dn_x"])
    put(H_DNY, t["dn_y"])
    h[H_TOK] = float(t["grid_tokens"])
    h[H_NCB] = len(t["grid_ctx_batch"])
    put(H_CB, t["grid_ctx_batch"])
    put(H_CL, t["grid_ctx_len"])
    h[H_NGB] = len(t["grid_gen_batch"])
    put(H_GB, t["grid_gen_batch"])
    put(H_GL, t["grid_gen_len"])
    h[H_FLOOR] = floor_ms
    return np.concatenate(parts)


@inline_njit
def _find(x, p, off, n):
    """(i, f): x lies between axis points i and i + 1 at fraction f; f = 0 below the axis,
    f > 1 above it (linear extrapolation from the last cell)."""
    if n < 2 or x <= p[off]:
        return 0, 0.0
    lo = 0
    hi = n - 1
    if x >= p[off + hi]:
        lo = n - 2
    else:
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if p[off + mid] <= x:
                lo = mid
            else:
                hi = mid
    return lo, (x - p[off + lo]) / (p[off + lo + 1] - p[off + lo])


@inline_njit
def _lin(x, p, ox, oy, n):
    i, f = _find(x, p, ox, n)
    if n < 2:
        return p[oy]
    return p[oy + i] + f * (p[oy + i + 1] - p[oy + i])


@inline_njit
def _shared(p, T):
    """S(T) ms: the dense table for T <= its length, the coarse one beyond."""
    n = int(p[H_NS])
    if T <= n:
        return p[int(p[H_S]) + max(int(T), 1) - 1]
    return _lin(T, p, int(p[H_SX]), int(p[H_SY]), int(p[H_NSX]))


@inline_njit
def _ctx_attn(p, k, n, c):
    """CA ms: the context attention of k chunks of n new tokens after c cached (trilinear)."""
    nk, nn, nc = int(p[H_NK]), int(p[H_NN]), int(p[H_NC])
    i, fi = _find(k, p, int(p[H_K]), nk)
    j, fj = _find(n, p, int(p[H_N]), nn)
    m, fm = _find(c, p, int(p[H_C]), nc)
    base = int(p[H_CA])
    v = 0.0
    for di in range(2):
        wi = fi if di else 1.0 - fi
        ii = min(i + di, nk - 1)
        for dj in range(2):
            wj = fj if dj else 1.0 - fj
            jj = min(j + dj, nn - 1)
            for dm in range(2):
                wm = fm if dm else 1.0 - fm
                mm = min(m + dm, nc - 1)
                v += wi * wj * wm * p[base + (ii * nn + jj) * nc + mm]
    return v if v > 0.0 else 0.0


@inline_njit
def _dec_attn(p, b, L):
    """DA ms: the decode attention of b decodes at mean context L (bilinear)."""
    nb, nl = int(p[H_NB]), int(p[H_NL])
    i, fi = _find(b, p, int(p[H_B]), nb)
    j, fj = _find(L, p, int(p[H_L]), nl)
    base = int(p[H_DA])
    i1, j1 = min(i + 1, nb - 1), min(j + 1, nl - 1)
    lo = p[base + i * nl + j] + fj * (p[base + i * nl + j1] - p[base + i * nl + j])
    hi = p[base + i1 * nl + j] + fj * (p[base + i1 * nl + j1] - p[base + i1 * nl + j])
    v = lo + fi * (hi - lo)
    return v if v > 0.0 else 0.0


@inline_njit
def _beyond(b, need, p, ob, ol, n):
    """Whether `need` exceeds the grid's longest length at batch b (held to the smallest
    measured batch >= b); beyond the largest batch measured, always."""
    if n == 0:
        return False
    for i in range(n):
        if p[ob + i] >= b:
            return need > p[ol + i]
    return True


@inline_njit
def prefill_ms(p, n):
    """A pass of one prefill chunk of n new tokens, nothing cached (the fused composition's)."""
    return _shared(p, float(n)) + _ctx_attn(p, 1.0, float(n), 0.0)


# compiled once as its own function: inlined into each scheduler's step_time, its nested
# table look-ups made that function's compile take a minute
@hook_njit
def measured_seconds(p, reqs, queues, q):
    """(seconds, flags) of replica q's scheduled step. A request is a decode when it has
    generated, is given one token (none: its prompt's KV came by transfer) and ends the
    step caught up; anything else is a prefill
    chunk (new tokens after its computed ones, recomputation after preemption included)."""
    ns = queues.ns[q]
    k = 0
    T = 0
    nd = 0
    dctx = 0.0
    pn = 0
    pc = 0.0
    for i in range(ns):
        r = queues.sr[q, i]
        n = queues.sn[q, i]
        c0 = reqs.comp[r]
        T += n
        if reqs.gen[r] > 0 and n <= 1 and c0 + n == reqs.ntok[r]:
            nd += 1
            dctx += c0 + n
        else:
            k += 1
            pn += n
            pc += c0
    ocb, ocl, ncb = int(p[H_CB]), int(p[H_CL]), int(p[H_NCB])
    flags = 0
    ms = 0.0
    if p[H_MODE] == 1.0:  # dynamo: a prefill pass at the mean chunk, then a decode pass
        if k:
            nbar = pn / k
            cbar = pc / k
            ms += _shared(p, float(pn)) + _ctx_attn(p, float(k), nbar, cbar)
            if pn > p[H_TOK]:
                flags |= OUT_TOKENS
            if _beyond(float(k), nbar + cbar, p, ocb, ocl, ncb):
                flags |= OUT_PREFILL
        if nd:
            d = _lin(float(nd), p, int(p[H_DNX]), int(p[H_DNY]), int(p[H_NDN])) + _dec_attn(p, float(nd), dctx / nd)
            ms += d if d > p[H_FLOOR] else p[H_FLOOR]
            if nd > p[H_TOK]:
                flags |= OUT_TOKENS
    elif k == 0:  # decodes alone: the package's decode pass (its own non-attention ops)
        ms += _lin(float(nd), p, int(p[H_DNX]), int(p[H_DNY]), int(p[H_NDN])) + _dec_attn(p, float(nd), dctx / nd)
        if nd > p[H_TOK]:
            flags |= OUT_TOKENS
    else:
        ms += _shared(p, float(T))
        if T > p[H_TOK]:
            flags |= OUT_TOKENS
        if k:
            for i in range(ns):
                r = queues.sr[q, i]
                n = queues.sn[q, i]
                c0 = reqs.comp[r]
                if reqs.gen[r] > 0 and n <= 1 and c0 + n == reqs.ntok[r]:
                    continue
                ms += _ctx_attn(p, float(k), float(n), float(c0)) / k
                if _beyond(float(k), float(n + c0), p, ocb, ocl, ncb):
                    flags |= OUT_PREFILL
        if nd:
            ms += _dec_attn(p, float(nd), dctx / nd)
    if nd and _beyond(float(nd), dctx / nd, p, int(p[H_GB]), int(p[H_GL]), int(p[H_NGB])):
        flags |= OUT_DECODE
    return ms * 1e-3, flags
