"""advise and characterize on the sessions of the loaded trace (trace.sessions): they say
when sessions were inferred, and advise leaves session-level eviction out, with the
reason, on a trace without any."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sim_core import QWEN3_CODER_30B, Trace
from sim_core.traces.sessions import INFERRED_NOTE
from sim_core.traces.config import apply_sessions
from tests.helpers import session_trace


@pytest.fixture(scope="module")
def sessionless(tmp_path_factory):
    """A small generated trace of prefix-chained sessions, its session ids removed."""
    t = session_trace(n_sessions=30, seed=3)
    t = dataclasses.replace(t, session=np.full(t.n_requests, -1, np.int64), name="nosess")
    return str(t.save(tmp_path_factory.mktemp("advise") / "nosess.npz"))


def _advise(path, sessions, out, capsys):
    from analysis.__main__ import main

    assert main(["advise", "trace=file", f"trace.path={path}", f"trace.sessions={sessions}", "cost=[uniform,linear]",
                 "capacity=custom", "capacity.sizes=[40,120]", "tracking.offline=true", f"analysis.out={out}"]) == 0
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text(), capsys.readouterr()


def test_advise_on_a_trace_without_sessions_leaves_the_session_step_out(sessionless, tmp_path, capsys):
    from analysis.advise import NO_SESSIONS

    rep, md, io = _advise(sessionless, "given", tmp_path / "out", capsys)
    assert rep["trace"]["sessions"] == "none"
    assert "lru_session" not in rep["results"] and "lru" in rep["results"]
    assert [r["topic"] for r in rep["recommendations"]] == ["baseline", "compute_awareness", "quick_demotion"]
    assert all("session_loss_points" not in d for d in rep["diagnostics"])
    assert NO_SESSIONS in rep["notes"] and NO_SESSIONS in md and "LRU-session" not in md
    assert "granularity: left out: the trace has no session ids" in io.out  # said where the advice is printed
    assert "session-level" not in "".join(r["action"] for r in rep["recommendations"])


def test_advise_says_when_its_sessions_were_inferred(sessionless, tmp_path, capsys):
    rep, md, io = _advise(sessionless, "auto", tmp_path / "out", capsys)
    assert rep["trace"]["sessions"] == "inferred" and "lru_session" in rep["results"]
    gran = {r["topic"]: r for r in rep["recommendations"]}["granularity"]
    assert INFERRED_NOTE in gran["because"] and INFERRED_NOTE in io.out
    assert any(INFERRED_NOTE in n for n in rep["notes"]) and md.count(INFERRED_NOTE) >= 3  # intro, step, note


def test_recommend_on_given_sessions_names_no_heuristic():
    from analysis.advise import recommend

    row = {"capacity": "24GiB", "capacity_blocks": 1, "capacity_gib": 24, "regime": "HBM", "compute_gap_points": 0.0,
           "partial_node_gain_points": 0.0, "quick_demotion_gain_points": {"hit_ratio": 0.0, "compute_savings": 0.0},
           "session_loss_points": {"hit_ratio": 0.0, "compute_savings": 0.0}, "belady_headroom_points": 0.0,
           "holes_per_request_mean": {"lru": 1.0, "partial_node": 1.0}, "hit_ratio": {"lru": 0.5}}
    work = {"one_hit_block_share": 0.5, "one_hit_access_share": 0.1, "single_turn_request_share": 0.3}
    given = recommend([row], work, "linear", "given")
    inferred = recommend([row], work, "linear", "inferred")
    assert all(INFERRED_NOTE not in r["because"] for r in given)
    assert INFERRED_NOTE in inferred[2]["because"] and INFERRED_NOTE in inferred[3]["because"]  # single-turn share
    no_loss = {k: v for k, v in row.items() if k != "session_loss_points"}
    assert [r["topic"] for r in recommend([no_loss], work, "linear", "none")][-1] == "quick_demotion"


def test_characterize_says_when_its_sessions_were_inferred():
    """The hand trace of test_analysis_cli without its session ids: r1 and r3 extend r0's
    chain, r2 ([1,5]) and r4 ([7,8]) contain no earlier request, so the inferred sessions
    are the true ones (0 0 1 0 2): 3 sessions, 1 multi-turn, 3 of 5 requests in it."""
    from analysis.characterize import markdown, measure

    t = Trace.from_requests([[1, 2, 3], [1, 2, 3, 4], [1, 5], [1, 2, 3, 4, 6], [7, 8]],
                            arrival_s=[0, 10, 15, 30, 40], name="hand")
    t = apply_sessions(t, "auto")
    assert t.session.tolist() == [0, 0, 1, 0, 2]
    rep, _ = measure(t, QWEN3_CODER_30B)
    sec = rep["sections"]
    ses = sec["sessions"]["values"]
    assert (ses["sessions"], ses["multi_turn_sessions"], ses["multi_turn_request_share"]) == (3, 1, 0.6)
    assert rep["trace"]["sessions"] == "inferred" and any(INFERRED_NOTE in n for n in rep["notes"])
    for k in ("sessions", "footprints", "categories", "reuse"):
        assert INFERRED_NOTE in sec[k]["note"], k
    assert INFERRED_NOTE not in (sec["frequency"]["note"] or "")  # needs no sessions
    assert markdown(rep, {}, None).count(INFERRED_NOTE) >= 5
    given, _ = measure(Trace.from_requests([[1, 2], [1, 2, 3]], session=[0, 0], name="g"), QWEN3_CODER_30B)
    assert given["trace"]["sessions"] == "given" and not given["notes"]
    assert given["sections"]["sessions"]["note"] is None


def test_characterize_mooncake_measures_sessions_inferred_by_default(tmp_path):
    from analysis.__main__ import main

    out = tmp_path / "out"
    assert main(["characterize", "trace=mooncake_conversation", "trace.max_requests=1500",
                 "tracking.offline=true", f"analysis.out={out}"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["trace"]["sessions"] == "inferred" and rep["trace"]["has_sessions"] is True
    assert rep["sections"]["sessions"]["status"] == "measured"
    assert INFERRED_NOTE in rep["sections"]["sessions"]["note"]
    assert INFERRED_NOTE in (out / "report.md").read_text()
