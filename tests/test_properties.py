"""Property tests over every registered policy (hypothesis): optimality bounds and
engine invariants on random prefix-chained traces."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim_core import REGISTRY, Trace, simulate

ONLINE = sorted(n for n, s in REGISTRY.items() if not s.offline)
REPLAYED = sorted(n for n, s in REGISTRY.items() if s.solve is None)  # the ILP is solved: tests/test_policies_compute.py


@st.composite
def prefix_traces(draw):
    """Requests that extend a prefix of an earlier request with fresh blocks (a trie)."""
    n = draw(st.integers(2, 14))
    reqs, next_id = [], 0
    for _ in range(n):
        base = []
        if reqs and draw(st.booleans()):
            parent = reqs[draw(st.integers(0, len(reqs) - 1))]
            base = parent[: draw(st.integers(0, len(parent)))]
        k = draw(st.integers(0 if base else 1, 4))
        reqs.append(base + list(range(next_id, next_id + k)))
        next_id += k
    sessions = [draw(st.integers(-1, 3)) for _ in reqs]
    cap = draw(st.integers(1, max(2, next_id)))
    return Trace.from_requests(reqs, session=sessions), cap


PROPS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("policy", ONLINE)
@PROPS
@given(data=prefix_traces())
def test_no_online_policy_beats_belady(policy, data):
    trace, cap = data
    for mode in ("block", "request"):
        opt = simulate(trace, "belady", cap, mode=mode)[0].hits
        got = simulate(trace, policy, cap, mode=mode, cost_models=["linear"])[0]
        assert got.hits <= opt, (mode, got.hits, opt)


@pytest.mark.parametrize("policy", REPLAYED)
@PROPS
@given(data=prefix_traces())
def test_engine_invariants(policy, data):
    trace, cap = data
    for mode in ("block", "request"):
        # the engine raises if a policy evicts a block of the request being served
        blk = simulate(trace, policy, cap, mode=mode, cost_models=["uniform", "linear"])[0]
        pre = simulate(trace, policy, cap, mode=mode, hits="prefix", cost_models=["uniform", "linear"])[0]
        assert blk.max_resident_blocks <= cap
        assert pre.hits <= blk.hits
        assert pre.holes_per_request_max <= 1
        if not REGISTRY[policy].cost_aware:
            assert blk.compute_savings["uniform"] == pytest.approx(blk.hit_ratio, abs=1e-12)
