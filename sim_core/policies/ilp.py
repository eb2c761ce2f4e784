"""ILP: the exact offline optimum of compute savings (paper sec. 5.2), solved, not replayed.

sim_core/oracles/ilp.py holds the model and the solver (HiGHS); this module registers it as the
policy `ilp`, so `simulate(trace, "ilp", ...)` and `python -m sweep policy=[lru,belady,ilp]`
give its curve like any policy's. It is an oracle (offline, family "oracle", drawn dashed
like Belady), optimises each cost model separately (cost-aware), is never sampled, and is
left out of `policy=all` (`in_all=False`): traces with more reuse intervals than
`max_intervals` are refused before any work (`check`).
"""
from __future__ import annotations

from ..oracles import ilp
from .api import PolicySpec


def _not_replayed(ctx):
    raise TypeError("policy ilp is solved (sim_core.oracles.ilp.results), not replayed: it has no replay state")


def _solve(trace, capacities, *, cost_models, mode, hits, model, params):
    return ilp.results(trace, capacities, cost_models=cost_models, mode=mode, hits=hits, model=model,
                       params=params)


SPEC = PolicySpec(
    "ilp", _not_replayed,
    "Exact offline optimum of compute savings (integer program over reuse intervals, solved "
    "with HiGHS); only for traces up to max_intervals reuse intervals.",
    defaults={"max_intervals": ilp.DEFAULT_MAX_INTERVALS, "time_limit_s": 600.0},
    cost_aware=True, offline=True, family="oracle", sample_ok=False,
    solve=_solve, check=ilp.check, in_all=False,
    # planning estimate: ~16 us per block access at the size limit under the FLOPs cost model
    # (solve times: docs/analysis.md), against FIFO's ~0.005 us
    weight=3000.0)
