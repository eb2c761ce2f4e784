"""Curves read off another curve of the same sweep instead of simulated.

A cost-aware policy may decide exactly like another policy under the uniform cost model
(`PolicySpec.uniform_same_as`: BeladyCompute is Belady there, tested in
tests/test_belady_compute.py). When a sweep runs both, the cost-aware policy's uniform
curve takes the other's results, point for point, under its own keys: the same numbers
its own replay would give, without the replay.
"""
from __future__ import annotations

import dataclasses

from sim_core import get_policy

UNIFORM = "uniform"


def mirrors(st) -> list[tuple]:
    """(target curve, source curve) pairs: the sweep's curves that can be read off another."""
    pols = {p.name: p for p in st.spec.policies}
    by_policy = {(c.policy, c.cost_model): c for c in st.curves}
    out = []
    for c in st.curves:
        same_as = get_policy(c.policy).uniform_same_as
        if c.cost_model != UNIFORM or same_as is None:
            continue
        name, params = same_as(dict(pols[c.policy].params))
        src = by_policy.get((name, UNIFORM))
        if src is None or dict(pols[name].params) != dict(params):
            continue
        # both exact, or sampled alike (rate, seed, unit, floor)
        if src.identity.sample != c.identity.sample or get_policy(name).sample_floor != get_policy(c.policy).sample_floor:
            continue
        out.append((c, src))
    return out


def copy_row(result):
    """The source's result as the target's: only the uniform model's savings."""
    return dataclasses.replace(result, compute_savings={UNIFORM: result.compute_savings[UNIFORM]})


def fill(target, src, indices) -> list[int]:
    """The target takes the source's results at `indices` where it has none; the indices
    it took."""
    took = [i for i in indices if i in src.rows and i not in target.rows]
    for i in took:
        target.rows[i] = copy_row(src.rows[i])
        if i in src.times:
            target.times[i] = src.times[i]
    return took
