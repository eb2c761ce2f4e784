"""trace.weeks: independent weeks of a synthetic profile, back to back (sweep/weeks.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core import simulate
from sim_core.traces import synth
from sim_core.traces.sample import auto_rate, sample_of, scaled_capacity
from sim_core.traces.trace import back_to_back

REPO = Path(__file__).resolve().parents[1]
SCALE = 0.002


def _week(w: int, seed: int = 0):
    return synth.generate("freeinference", scale=SCALE, seed=seed, week=w)


def test_back_to_back_is_independent_stretches():
    """Each trace keeps its requests, with fresh block ids and sessions, after the
    previous one; through LRU the hits are each one's alone, since stale blocks never
    hit and a cache full of them is evicted exactly as an empty cache is filled."""
    from tests.helpers import session_trace

    a, b = session_trace(n_sessions=30, seed=1), session_trace(n_sessions=20, seed=2)
    ab = back_to_back([a, b])
    assert ab.n_requests == a.n_requests + b.n_requests and ab.n_accesses == a.n_accesses + b.n_accesses
    assert ab.n_unique == a.n_unique + b.n_unique  # no block shared across the two
    assert np.all(np.diff(ab.arrival_s) >= 0) and ab.arrival_s[a.n_requests] == pytest.approx(a.arrival_s[-1] + 3600)
    assert len(np.unique(ab.session)) == len(np.unique(a.session)) + len(np.unique(b.session))
    assert np.array_equal(ab.blocks[a.n_accesses:], b.blocks + a.n_unique)
    assert ab.depth is None  # positions stay depths
    ra, rb, rab = (simulate(t, "lru", 300)[0] for t in (a, b, ab))
    assert rab.hits == ra.hits + rb.hits


def test_back_to_back_keeps_the_depths_of_samples():
    a, b = _week(0), _week(1)
    sa, sb = sample_of(a, 0.1, 0, "depth"), sample_of(b, 0.1, 0, "depth")
    ab = back_to_back([sa, sb])
    assert np.array_equal(ab.depth, np.concatenate([sa.depth, sb.depth]))
    mixed = back_to_back([sa, b])  # a trace without depths contributes its positions
    assert np.array_equal(mixed.depth[sa.n_accesses:], b.depths())
    with pytest.raises(ValueError, match="forward order"):
        back_to_back([a.tail_first_view()])


def test_weeks_are_independent_draws_and_week_0_is_the_seeds_trace():
    t0, w0, w1, w2 = synth.generate("freeinference", scale=SCALE, seed=0), _week(0), _week(1), _week(2)
    assert np.array_equal(t0.blocks, w0.blocks) and np.array_equal(t0.arrival_s, w0.arrival_s)
    assert w1.meta["week"] == 1 and "week" not in w0.meta
    assert not np.array_equal(w1.request_lengths[:50], w0.request_lengths[:50])
    assert not np.array_equal(w1.request_lengths[:50], w2.request_lengths[:50])
    assert np.array_equal(_week(1).blocks, w1.blocks)  # deterministic
    s1 = synth.generate("freeinference", scale=SCALE, seed=1)
    assert not np.array_equal(s1.request_lengths[:50], w1.request_lengths[:50])  # not another seed's week 0
    with pytest.raises(ValueError, match="week"):
        _week(-1)


def test_auto_rate_of_weeks_is_a_power_of_two_stride():
    assert auto_rate(2 * 671_081_036, weeks=2) == 1 / 1024  # the default study: 24 GiB at stride 128
    assert auto_rate(3 * 671_081_036, weeks=3) == 1 / 1024
    assert auto_rate(4 * 671_081_036, weeks=4) == 1 / 2048
    assert auto_rate(8 * 671_081_036, weeks=8) == 1 / 4096
    assert auto_rate(4 * 663_922_623) == 0.01
    assert auto_rate(4 * 2_000_000, weeks=4) is None  # 8M accesses in all: exact
    assert auto_rate(4 * 3_000_000, weeks=4) == 0.125
    assert auto_rate(2 * 5_000_000, weeks=2) == 0.125


def test_sampled_weeks_replay_as_the_weeks_samples_back_to_back():
    """LRU through the weeks' samples: its hits are the sum of each week's own sampled
    replay (the LRU property above), at every capacity and its raised rate; one week is
    generated at a time; the digest names the weeks in order."""
    from sim_core.digest import trace_digest
    from sweep import weeks

    made = []

    def make(w):
        made.append(w)
        return _week(w)

    caps, rate = [600, 4000, 20000], 0.05
    ws = weeks.sampled(make, 3, caps, rate, 0, "request", [("depth", None), ("depth", 256)],
                       summarize=lambda t: ({"n_requests": t.n_requests}, "week 0"))
    assert made == [0, 1, 2] and ws.weeks == 3 and ws.summary == ({"n_requests": _week(0).n_requests}, "week 0")
    parts = [_week(w) for w in range(3)]
    assert ws.n_accesses == sum(t.n_accesses for t in parts) and ws.n_requests == sum(t.n_requests for t in parts)
    assert ws.n_unique == sum(t.n_unique for t in parts)
    assert ws.max_request_blocks == max(t.max_request_blocks for t in parts)
    assert trace_digest(ws) == weeks.weeks_digest([trace_digest(t) for t in parts])
    assert trace_digest(ws) != weeks.weeks_digest([trace_digest(t) for t in parts[::-1]])
    for floor in (None, 256):
        got = simulate(ws, "lru", caps, sample_rate=rate, sample_floor=floor, cost_models=["uniform", "linear"])
        assert got[0].sample_rate > rate  # 600 blocks: a raised rate
        for c, r in zip(caps, got):
            # each week's own sample replayed alone at the scaled capacity
            alone = [simulate(sample_of(t, r.sample_rate, 0, "depth"), "lru", [scaled_capacity(c, r.sample_rate, "depth")],
                              cost_models=["uniform", "linear"])[0] for t in parts]
            assert r.hit_ratio == pytest.approx(sum(a.hits for a in alone) / sum(a.accesses for a in alone), rel=1e-12)
            assert r.accesses == ws.n_accesses
            lo, hi = (f(a.compute_savings["linear"] for a in alone) for f in (min, max))
            assert lo <= r.compute_savings["linear"] <= hi
    with pytest.raises(KeyError):  # only the planned rates are held
        simulate(ws, "lru", [600], sample_rate=0.01)


def test_weeks_built_in_forked_workers_are_the_same_samples():
    """workers=2: weeks 1..k-1 are generated and sampled in forked processes; the samples,
    sizes and digest are those of one week at a time."""
    from sim_core.digest import trace_digest
    from sweep import weeks

    caps, rules = [600, 4000, 20000], [("depth", None), ("depth", 256)]
    one, two = (weeks.sampled(_week, 4, caps, 0.05, 0, "request", rules, workers=n) for n in (1, 2))
    assert trace_digest(one) == trace_digest(two) and one.n_accesses == two.n_accesses
    assert one.n_unique == two.n_unique and np.array_equal(one.request_lengths, two.request_lengths)
    assert sorted(one._samples) == sorted(two._samples)
    for key, s in one._samples.items():
        assert np.array_equal(s.blocks, two._samples[key].blocks) and np.array_equal(s.depth, two._samples[key].depth)
    assert weeks.week_workers(4, _week(0)) >= 1
    assert weeks.week_workers(1, _week(0)) == 1


def test_sampled_weeks_refuse_a_capacity_that_would_replay_exactly():
    from sweep import weeks

    with pytest.raises(ValueError, match="replayed exactly"):
        weeks.sampled(_week, 2, [50], 0.05, 0, "request", [("depth", None)])


def _sweep(tmp_path, *args, trace=("trace=freeinference", f"trace.scale={SCALE}")):
    cmd = [sys.executable, "-m", "sweep", *trace, "policy=[lru]",
           "cost=[uniform]", "capacity=custom", "capacity.sizes=[4000,20000]", "cluster.num_cpus=1",
           "tracking.offline=true", *args]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_sweep_over_weeks_replays_them_back_to_back(tmp_path):
    """trace.weeks=2, sampled: the journal's results are LRU through the two weeks'
    samples back to back at the scaled capacities; exact: through the two weeks built as one."""
    from sweep.journal import Journal

    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    p = _sweep(tmp_path, "trace.weeks=2", "sim.sample_rate=0.1", "tracking.offline=false", f"tracking.uri={uri}")
    assert p.returncode == 0, p.stderr[-4000:]
    assert "week 2 of 2" in p.stderr and "2 weeks" in p.stderr
    got = {r.capacity_blocks: r for r in Journal(tmp_path / "kvsweep-journal.jsonl").results().values()}
    want = simulate(back_to_back([sample_of(_week(w), 0.1, 0, "depth") for w in range(2)]), "lru", [400, 2000])
    assert [got[c].hit_ratio for c in (4000, 20000)] == [w.hit_ratio for w in want]
    # the run records the weeks and, as its trace summary, the first week's
    c = MlflowClient(uri)
    runs = c.search_runs([c.get_experiment_by_name("freeinference-synthetic").experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.params["trace.weeks"] == "2"
    assert parent.data.metrics["trace.requests"] == _week(0).n_requests
    summary = Path(c.download_artifacts(parent.info.run_id, "trace_summary.txt", str(tmp_path))).read_text()
    assert summary.startswith("week 1 of 2")

    d = tmp_path / "exact"
    d.mkdir()
    p = _sweep(d, "trace.weeks=2", "sim.sample_rate=null")
    assert p.returncode == 0, p.stderr[-4000:]
    got = {r.capacity_blocks: r for r in Journal(d / "kvsweep-journal.jsonl").results().values()}
    want = simulate(back_to_back([_week(0), _week(1)]), "lru", [4000, 20000])
    assert [got[c].hits for c in (4000, 20000)] == [w.hits for w in want]


def test_weeks_need_a_synthetic_profile(tmp_path):
    p = _sweep(tmp_path, "+trace.weeks=2", trace=("trace=mooncake_conversation",))
    assert p.returncode == 2, p.stderr[-3000:]
    assert "needs a synthetic profile" in p.stderr


@pytest.mark.parametrize("args, message", [
    (["trace.weeks=0"], "trace.weeks"),
    (["trace.weeks=2", "trace.max_requests=100"], "max_requests"),
    (["trace.weeks=2", "sim.sample_rate=0.1", "policy=[lru,lhd]"], "lhd replay exactly"),
    (["trace.weeks=2", "sim.sample_rate=0.01", "capacity.sizes=[100]"], "replayed exactly"),
])
def test_weeks_bad_input_is_a_config_error(tmp_path, args, message):
    p = _sweep(tmp_path, *args)
    assert p.returncode == 2, p.stderr[-3000:]
    assert message in p.stderr
