"""Exact offline optimum of compute savings (paper sec. 5.2), solved with HiGHS.

The paper frames the optimum as an ILP with reuse intervals as variables and the
capacity as constraint. This module solves exactly that, for the replay semantics of
sim_core.replay.engine with *block* hits (every resident block is reused):

mode="request" (residency constraint, the engine's default)
  * requests with more blocks than the capacity are served without the cache (all their
    blocks recomputed) and are neither uses nor time points: they are skipped;
  * time points are the remaining requests; request r needs its D_r distinct blocks
    resident during its prefill;
  * a reuse interval is a pair of consecutive (non-skipped) requests a < b that both
    contain block k. Variable x in {0,1}: k stays resident from a through b, gaining
    cost[d] where d is k's depth at its first occurrence in b (its hit);
  * an interval occupies one slot at every request strictly between a and b; at its ends
    the block is one of the request's own D blocks. Capacity: for every request r,
        sum(x over intervals with a < r < b) + D_r <= capacity;
  * always-hits are constants: a block repeated inside a request (computed once), and
    intervals with b = a + 1 (nothing can evict a block between two consecutive requests
    that both pin it).
mode="block" (libCacheSim semantics, no residency constraint)
  * time points are accesses; every access needs its block resident (D = 1); intervals
    are consecutive accesses of a block; b = a + 1 is a free hit.

Any replay of the engine gives a feasible solution (a block hit at b was resident
continuously since its previous use a, so it occupied a slot at every time point in
between), and every feasible solution is realised by evicting, at each time point, the
blocks whose current interval is not kept first; so the optimum is the best compute
savings any policy -- online or offline, Belady and BeladyCompute included -- can reach
in the same mode with block hits. Holes, prefix hits and the engine's eviction order are
not modelled.

Solving: the occupancy at time i is written as a flow y_i = y_{i-1} + (intervals starting
to occupy at i) - (intervals stopping at i), 0 <= y_i <= capacity - D_i, so each interval
has two nonzeros and the model stays linear in the trace size. The constraint matrix is a
network matrix (totally unimodular), hence the simplex optimum of the LP relaxation is
integral: by default we solve the LP, check that x is integral, and fall back to HiGHS'
MIP solver if it is not (integral=True forces the MIP). Costs are scaled by their
maximum before solving.

Size limit: traces with more than `max_intervals` non-trivial reuse intervals are refused
with a ValueError; raise it knowingly. The default, 1,000,000, comes from timing `solve`
on this project's 2-core machine: the measured solve times are the table of
docs/analysis.md ("The exact optimum"). `time_limit_s` bounds HiGHS' run; on a time-out
the best solution found is reported with its status and gap.

This is not a replay policy (it has no eviction hooks and needs the whole trace): the
registered policy `ilp` (sim_core/policies/ilp.py) calls `results`, which `simulate` and
the sweep use like any policy's replay; `check` refuses a trace above the limit before
any work.
"""
from __future__ import annotations

import time

import numpy as np

from ..catalog.capacity import saturation_capacity
from ..catalog.cost import cost_per_depth
from ..jit import njit
from ..result import Mode

MODES = tuple(m.value for m in Mode)
DEFAULT_MAX_INTERVALS = 1_000_000


@njit
def _intervals(offsets, blocks, n_unique, capacity, cost, per_access):
    """Reuse intervals (see module docstring). Time points are the requests that fit in
    the cache (request mode), or every access when `per_access` (block mode: D = 1)."""
    R = offsets.shape[0] - 1
    N = blocks.shape[0]
    D = np.zeros(N if per_access else R, np.int64)  # distinct blocks per time point
    a_out = np.empty(N, np.int64)
    b_out = np.empty(N, np.int64)
    g_out = np.empty(N, np.float64)
    last = np.full(n_unique, -1, np.int64)
    seen = np.full(n_unique, -1, np.int64)
    const_gain = 0.0
    const_hits = 0
    n_int = 0
    T = 0
    for r in range(R):
        s = offsets[r]
        e = offsets[r + 1]
        if not per_access and (e - s == 0 or e - s > capacity):
            continue
        t = T
        T += 0 if per_access else 1
        for j in range(s, e):
            if per_access:
                t = T
                T += 1
            k = blocks[j]
            c = cost[j - s]
            if seen[k] == t:  # repeat inside the request: computed once, then hits
                const_gain += c
                const_hits += 1
                continue
            seen[k] = t
            D[t] += 1
            a = last[k]
            last[k] = t
            if a < 0:
                continue
            if a == t - 1:
                const_gain += c
                const_hits += 1
            else:
                a_out[n_int] = a
                b_out[n_int] = t
                g_out[n_int] = c
                n_int += 1
    return a_out[:n_int], b_out[:n_int], g_out[:n_int], D[:T], const_gain, const_hits, T


def _feasible(a, b, kept, D, capacity) -> bool:
    """Does keeping the `kept` intervals respect the capacity at every time point?"""
    T = len(D)
    delta = np.zeros(T + 1, np.int64)
    np.add.at(delta, a[kept] + 1, 1)
    np.add.at(delta, b[kept], -1)
    occupancy = np.cumsum(delta[:T])
    return bool(np.all(occupancy + D <= capacity))


def reuse_intervals(trace, capacity: int, cost: np.ndarray, mode: str = "request"):
    """(a, b, gain, D, const_gain, const_hits, n_time_points) of the model above."""
    if mode in (Mode.REQUEST, Mode.BLOCK):
        return _intervals(trace.req_offsets, trace.blocks, trace.n_unique, int(capacity), cost,
                          mode == Mode.BLOCK)
    raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")


def solve(trace, capacity: int, cost_model: str = "uniform", mode: str = "request", *,
          model=None, time_limit_s: float = 600.0, max_intervals: int = DEFAULT_MAX_INTERVALS,
          integral: bool | str = "auto", threads: int | None = None) -> dict:
    """Best compute savings any policy can reach on `trace` at `capacity` (blocks).

    Returns dict(compute_savings, hit_ratio, hits, status, gap, bound_compute_savings,
    n_intervals, n_time_points, runtime_s, capacity_blocks, cost_model, mode).
    `hit_ratio` is that of the optimal solution for `cost_model` (not the best hit ratio
    unless the cost model is uniform). `bound_compute_savings` is HiGHS' upper bound
    (equal to compute_savings when status is "Optimal").

    integral="auto" (default) solves the LP relaxation with the simplex method, whose
    vertex optimum is integral because the matrix is totally unimodular (checked; if a
    fractional value ever appears the model is re-solved as a MIP); integral=True solves
    it as a MIP from the start (same optimum, about 3x slower).
    """
    import highspy

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"capacity must be at least one block, got {capacity}")
    if trace.n_accesses == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    depths = trace.depths()
    max_depth = max(trace.max_request_blocks, 1)
    cost = cost_per_depth(cost_model, max_depth, trace.block_tokens, model)
    total = float(cost[depths].sum())
    scale = float(cost.max())
    cs = cost / scale
    a, b, g, D, const_gain, const_hits, T = reuse_intervals(trace, capacity, cs, mode)
    n = len(a)
    if n > max_intervals:
        raise ValueError(
            f"trace {trace.name!r} has {n:,} reuse intervals at capacity {capacity} ({mode} mode), "
            f"more than max_intervals={max_intervals:,}; solve a subset (trace.subset) or raise "
            f"max_intervals knowingly (HiGHS time and memory grow with it)")
    t0 = time.perf_counter()
    N = trace.n_accesses
    result = dict(capacity_blocks=capacity, cost_model=cost_model, mode=mode,
                  n_intervals=int(n), n_time_points=int(T))
    if n == 0:
        savings = const_gain * scale / total
        return dict(result, compute_savings=savings, bound_compute_savings=savings,
                    hit_ratio=const_hits / N, hits=int(const_hits), status="Optimal", gap=0.0,
                    runtime_s=time.perf_counter() - t0)

    # columns: x_0..x_{n-1}, then y_0..y_{T-1}; rows: 1..T-1 (flow balance at time i)
    # x_k: -1 in row a_k+1 (starts occupying), +1 in row b_k (stops); y_i: +1 in row i,
    # -1 in row i+1. Row index i maps to i-1.
    rows_x = np.stack([a + 1, b], axis=1).ravel() - 1
    vals_x = np.tile(np.array([-1.0, 1.0]), n)
    yi = np.arange(T, dtype=np.int64)
    ry = np.stack([yi, yi + 1], axis=1)
    vy = np.tile(np.array([1.0, -1.0]), (T, 1))
    keep = (ry >= 1) & (ry <= T - 1)
    counts_y = keep.sum(axis=1)
    rows_y = ry[keep] - 1
    vals_y = vy[keep]
    starts = np.concatenate([[0], np.cumsum(np.concatenate([np.full(n, 2), counts_y]))]).astype(np.int32)
    index = np.concatenate([rows_x, rows_y]).astype(np.int32)
    value = np.concatenate([vals_x, vals_y])

    lp = highspy.HighsLp()
    lp.num_col_ = n + T
    lp.num_row_ = T - 1
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.concatenate([g, np.zeros(T)])
    lp.col_lower_ = np.zeros(n + T)
    y_upper = (capacity - D).astype(np.float64)
    y_upper[0] = 0.0  # nothing is kept across the first time point
    lp.col_upper_ = np.concatenate([np.ones(n), y_upper])
    lp.row_lower_ = np.zeros(T - 1)
    lp.row_upper_ = np.zeros(T - 1)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = starts
    lp.a_matrix_.index_ = index
    lp.a_matrix_.value_ = value

    def run(as_mip: bool, limit: float):
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("time_limit", max(float(limit), 1e-3))
        if threads:
            h.setOptionValue("threads", int(threads))
        if as_mip:
            lp.integrality_ = [highspy.HighsVarType.kInteger] * n + [highspy.HighsVarType.kContinuous] * T
        else:
            lp.integrality_ = []
            h.setOptionValue("solver", "simplex")  # a vertex: integral, the matrix being TU
        h.passModel(lp)
        h.run()
        info = h.getInfo()
        sol = np.asarray(h.getSolution().col_value[:n]) if info.primal_solution_status else np.zeros(n)
        return h.modelStatusToString(h.getModelStatus()), info, sol

    as_mip = integral is True
    status, info, x = run(as_mip, time_limit_s)
    if not as_mip and status == "Optimal" and not np.allclose(x, np.round(x), atol=1e-6):
        # cannot happen for a TU matrix up to numerics; then let branch and bound finish
        as_mip = True
        status, info, x = run(True, time_limit_s - (time.perf_counter() - t0))
    kept = x > 0.5
    feasible = _feasible(a, b, kept, D, capacity)
    if not feasible:  # only an LP stopped before optimality: no usable solution
        kept[:] = False
    obj = float(g[kept].sum())
    if as_mip:
        bound = float(info.mip_dual_bound) if np.isfinite(info.mip_dual_bound) else float(g.sum())
        gap = float(info.mip_gap) if np.isfinite(info.mip_gap) else np.inf
    elif status == "Optimal":
        bound = float(info.objective_function_value)
        gap = (bound - obj) / max(bound, 1e-300)
    else:
        bound = float(g.sum())
        gap = np.inf
    if not feasible:
        status += " (no feasible solution found; keeping nothing reported)"
    hits = int(kept.sum()) + int(const_hits)
    return dict(result,
                compute_savings=(obj + const_gain) * scale / total,
                bound_compute_savings=(max(bound, obj) + const_gain) * scale / total,
                hit_ratio=hits / N, hits=hits, status=status, gap=max(gap, 0.0),
                runtime_s=time.perf_counter() - t0)


# ---------------------------------------------------------------- as a policy
def _distinct_counts(trace, capacities, mode: str) -> dict[int, int]:
    """capacity -> the number of reuse intervals the model has there. In request mode it
    depends only on which requests are too large to cache, so capacities from the largest
    request up share one count; in block mode it does not depend on the capacity."""
    ones = np.ones(max(trace.max_request_blocks, 1))
    biggest = max(trace.max_request_blocks, 1)
    keys = {c: (min(int(c), biggest) if mode == Mode.REQUEST else 1) for c in capacities}
    counted = {k: len(reuse_intervals(trace, k, ones, mode)[0]) for k in set(keys.values())}
    return {c: counted[k] for c, k in keys.items()}


def requests_within(trace, capacity: int, mode: str, limit: int) -> int:
    """The largest n such that the first n requests have at most `limit` reuse intervals
    at `capacity` (trace.max_requests=n then fits under the limit)."""
    ones = np.ones(max(trace.max_request_blocks, 1))
    b = reuse_intervals(trace, capacity, ones, mode)[1]
    if len(b) <= limit:
        return trace.n_requests
    cut = int(b[limit])  # the first time point whose intervals would pass the limit
    if mode == Mode.BLOCK:  # time points are accesses: keep the requests before its request
        return int(np.searchsorted(trace.req_offsets, cut, side="right") - 1)
    lengths = trace.request_lengths
    timed = np.flatnonzero((lengths > 0) & (lengths <= capacity))  # request of each time point
    return int(timed[cut])


def check(trace, capacities, *, mode: str = "request", hits: str = "block", params=None) -> None:
    """Refuse, before any work, what `results` cannot do: prefix hits, or a trace with more
    reuse intervals than `max_intervals` at any of `capacities` (the message names the
    limit, the trace's size and the number of requests that would fit)."""
    params = dict(params or {})
    if str(hits) != "block":
        raise ValueError("policy ilp models block hits only (every resident block is reused); "
                         "run it with sim.hits=block")
    mode = str(mode)
    limit = int(params.get("max_intervals", DEFAULT_MAX_INTERVALS))
    if trace.n_accesses > 50 * limit:  # counting intervals would take minutes and GBs: refuse on size alone
        raise ValueError(
            f"policy ilp: trace {trace.name!r} is far too large for the exact optimum ({trace.n_requests:,} "
            f"requests, {trace.n_accesses:,} block accesses, against a limit of {limit:,} reuse intervals); "
            f"replay a prefix of it (trace.max_requests=N) or a smaller trace")
    counts = _distinct_counts(trace, capacities, mode)
    over = {c: n for c, n in counts.items() if n > limit}
    if not over:
        return
    worst = max(over, key=lambda c: (over[c], -c))
    fit = min(requests_within(trace, c, mode, limit) for c in over)
    raise ValueError(
        f"policy ilp: trace {trace.name!r} is too large for the exact optimum: {over[worst]:,} reuse "
        f"intervals ({mode} mode, capacity {worst:,} blocks; {trace.n_requests:,} requests, "
        f"{trace.n_accesses:,} block accesses), above the limit of {limit:,} intervals "
        f"(about 20 s of HiGHS per capacity and cost model at the limit; see sim_core/oracles/ilp.py). "
        f"The first {fit:,} requests fit: trace.max_requests={fit}; or raise "
        f"policy.ilp.params.max_intervals knowingly")


def results(trace, capacities, *, cost_models=("uniform",), mode: str = "request", hits: str = "block",
            model=None, params=None) -> list:
    """One sim_core.Result per capacity: the optimum under each cost model (`solve`).

    hits, hit_ratio (and what follows from them) are those of the first cost model's
    optimal solution, as for a cost-aware replay. The solution is realised by a cache
    that evicts only when it must, and then a block whose interval is not kept (with
    every cost positive, an optimal solution keeps every interval it can, so such a cache
    hits exactly the solution's intervals): it inserts every missed block of a request
    that fits, so evictions = max(0, inserted - capacity) and max_resident_blocks =
    min(capacity, inserted). Holes are not modelled (NaN, like a sample's). A solve that
    stops before optimality (time_limit_s) raises: an oracle curve must be the optimum.
    """
    from ..result import Result, optional_fields

    params = {"max_intervals": DEFAULT_MAX_INTERVALS, "time_limit_s": 600.0, **dict(params or {})}
    check(trace, capacities, mode=mode, hits=hits, params=params)
    sat = saturation_capacity(trace)
    lengths = trace.request_lengths
    N = trace.n_accesses
    solved: dict[int, dict] = {}
    out = []
    for cap in capacities:
        cap = int(cap)
        at = min(cap, sat)  # from saturation up nothing is ever evicted: one solve serves all
        if at not in solved:
            solved[at] = {m: solve(trace, at, m, mode, model=model, time_limit_s=float(params["time_limit_s"]),
                                   max_intervals=int(params["max_intervals"])) for m in cost_models}
            for m, sol in solved[at].items():
                if sol["status"] != "Optimal":
                    raise RuntimeError(f"ilp at {at} blocks, cost model {m}: HiGHS stopped with status "
                                       f"{sol['status']!r} (gap {sol['gap']:.3g}) within time_limit_s="
                                       f"{params['time_limit_s']}; raise policy.ilp.params.time_limit_s")
        sols = solved[at]
        n_hits = int(sols[cost_models[0]]["hits"])
        big = lengths > cap if mode == Mode.REQUEST else np.zeros(len(lengths), bool)
        oversized_blocks = int(lengths[big].sum())
        inserted = N - n_hits - oversized_blocks
        nan = float("nan")
        out.append(Result(
            capacity_blocks=cap, accesses=N, hits=n_hits, hit_ratio=n_hits / N, served_ratio=n_hits / N,
            compute_savings={m: float(s["compute_savings"]) for m, s in sols.items()},
            recomputed_blocks=N - n_hits, **{k: nan for k in optional_fields()},
            evictions=max(0, inserted - cap), oversized_requests=int(big.sum()),
            oversized_blocks=oversized_blocks, max_resident_blocks=min(cap, inserted)))
    return out
