"""trace.sessions (sim_core/traces/config.py): auto | given | inferred, applied at load, and
the sweep's session-level policies on a trace without sessions (sweep/plan.py).

Expected sessions are worked out by hand from the heuristic's rule (a request continues
the latest earlier request whose whole block sequence is a prefix of its own)."""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pytest

from sim_core import Trace
from sim_core.config_checks import ConfigError
from sim_core.digest import trace_digest
from sim_core.traces.sessions import INFERRED_NOTE, sessions_source
from sim_core.traces.config import SESSIONS, check_trace_config, load, week_maker

# r1 extends r0, r3 extends r2, r4 stands alone: inferred sessions 0 0 1 1 2
REQUESTS = [[1, 2], [1, 2, 3], [4, 5], [4, 5, 6, 7], [8]]
INFERRED = [0, 0, 1, 1, 2]
GIVEN = [7, 7, 3, 9, 9]  # deliberately unlike the inferred ones


def _file(tmp_path, session) -> str:
    t = Trace.from_requests(REQUESTS, arrival_s=[0, 1, 2, 3, 4], session=session, name="tiny", source="real")
    return str(t.save(tmp_path / "tiny.npz"))


def _load(path, sessions, **kw):
    return load({"path": path, "sessions": sessions, **kw}, "file")


@pytest.mark.parametrize("mode,want,source", [
    ("auto", INFERRED, "inferred"), (None, INFERRED, "inferred"),  # null = auto
    ("given", [-1] * 5, "none"), ("inferred", INFERRED, "inferred")])
def test_a_trace_without_sessions(tmp_path, mode, want, source):
    t = _load(_file(tmp_path, [-1] * 5), mode)
    assert t.session.tolist() == want
    assert t.meta["sessions_source"] == source == sessions_source(t)
    assert (t.meta.get("sessions") == INFERRED_NOTE) == (source == "inferred")


@pytest.mark.parametrize("mode,want,source", [
    ("auto", GIVEN, "given"), ("given", GIVEN, "given"), ("inferred", INFERRED, "inferred")])
def test_a_trace_with_sessions(tmp_path, mode, want, source):
    t = _load(_file(tmp_path, GIVEN), mode)
    assert t.session.tolist() == want and t.meta["sessions_source"] == source


def test_a_saved_inferred_trace_still_says_inferred(tmp_path):
    t = _load(_file(tmp_path, [-1] * 5), "auto")
    again = _load(str(t.save(tmp_path / "again.npz")), "auto")
    assert again.session.tolist() == INFERRED and again.meta["sessions_source"] == "inferred"


def test_the_key_absent_is_auto(tmp_path):
    t = load({"path": _file(tmp_path, [-1] * 5)}, "file")
    assert t.session.tolist() == INFERRED and t.meta["sessions_source"] == "inferred"


def test_sessions_are_inferred_after_max_requests(tmp_path):
    # the first 3 requests only: r2 starts the second session
    t = _load(_file(tmp_path, [-1] * 5), "auto", max_requests=3)
    assert t.session.tolist() == [0, 0, 1]


def test_the_digest_sees_inferred_sessions_and_keeps_given_ones(tmp_path):
    given = _file(tmp_path, GIVEN)
    plain = trace_digest(Trace.load(given))
    assert trace_digest(_load(given, "auto")) == trace_digest(_load(given, "given")) == plain  # resume keys stay
    assert trace_digest(_load(given, "inferred")) != plain
    none = str(Trace.from_requests(REQUESTS, arrival_s=[0, 1, 2, 3, 4], name="t").save(tmp_path / "none.npz"))
    assert trace_digest(_load(none, "auto")) != trace_digest(_load(none, "given"))


def test_a_synthetic_trace_keeps_its_sessions_and_its_generator_digest():
    tc = {"profile": "chutes", "scale": 0.005, "seed": 1}
    auto = load(dict(tc, sessions="auto"), "chutes")
    given = load(dict(tc, sessions="given"), "chutes")
    assert auto.meta["sessions_source"] == "given"
    assert trace_digest(auto) == trace_digest(given) and trace_digest(auto).startswith("synth-")
    inferred = load(dict(tc, sessions="inferred"), "chutes")
    assert inferred.meta["sessions_source"] == "inferred" and not trace_digest(inferred).startswith("synth-")
    # the other weeks of trace.weeks get the same treatment
    assert week_maker(dict(tc, sessions="inferred"))(1).meta["sessions_source"] == "inferred"


@pytest.mark.parametrize("bad", ["inferd", "yes", True, 1, "Auto"])
def test_a_bad_value_names_the_key_and_the_valid_ones(tmp_path, bad):
    with pytest.raises(ConfigError) as e:
        check_trace_config({"path": _file(tmp_path, GIVEN), "sessions": bad}, "file")
    assert "trace.sessions" in str(e.value) and all(v in str(e.value) for v in SESSIONS)


def test_a_bad_value_on_the_command_line_is_bad_input(capsys):
    from analysis.__main__ import main

    assert main(["characterize", "trace=mooncake_conversation", "trace.sessions=bogus",
                 "tracking.offline=true"]) == 2
    assert "trace.sessions" in capsys.readouterr().err


def continuing_requests(rows: list[dict], block_tokens: int = 512, max_fanout: int = 3) -> list[bool]:
    """Whether each request of a Mooncake file continues an earlier one, by brute force
    from the rule the docstring of sim_core/traces/sessions.py states: some earlier
    request P is a prefix of it, whole or without its last block when P's input tokens end
    inside that block, and the match reaches deeper than every hub on its path (its last
    block excepted; a hub: a block followed by more than max_fanout distinct blocks that
    are not the last of their request)."""
    reqs = [tuple(r["hash_ids"]) for r in rows]
    followers: dict = {}
    for r in reqs:
        for i in range(1, len(r) - 1):
            followers.setdefault(r[i - 1], set()).add(r[i])
    hubs = {b for b, f in followers.items() if len(f) > max_fanout}
    whole, cut, out = set(), set(), []
    for r, row in zip(reqs, rows):
        n = len(r)
        deepest_hub = max((i for i in range(n - 1) if r[i] in hubs), default=-1)
        out.append(any(r[:k] in whole or r[:k] in cut for k in range(n, deepest_hub + 1, -1)))
        whole.add(r)
        if n > 1 and (n - 1) * block_tokens < row["input_length"] < n * block_tokens:
            cut.add(r[:-1])
    return out


def test_mooncake_gets_the_sessions_the_heuristic_documents():
    import json

    from tests.helpers import SHARED_MOONCAKE

    tc = {"bundled": "mooncake_conversation.jsonl", "format": "mooncake"}
    t = load(tc, "mooncake_conversation")
    rows = [json.loads(line) for line in SHARED_MOONCAKE.open() if line.strip()]
    linked = continuing_requests(rows)
    # the module docstring of sim_core/traces/sessions.py says 3,984 of 12,031 requests
    # continue an earlier one: so many do by the brute force
    assert t.meta["sessions_source"] == "inferred" and t.n_requests == len(rows) == 12_031
    assert t.n_requests - len(np.unique(t.session)) == sum(linked) == 3_984
    # and the same requests start a session (ids are numbered in order of first request)
    starts = np.r_[True, t.session[1:] > np.maximum.accumulate(t.session)[:-1]]
    assert starts.tolist() == [not x for x in linked]
    g = load(dict(tc, sessions="given"), "mooncake_conversation")
    assert g.meta["sessions_source"] == "none" and (g.session == -1).all()


# ------------------------------------------------------------------ sweep
@dataclass(frozen=True)
class _Spec:  # the two fields of sweep.spec.SweepSpec that without_sessions reads
    policies: list
    selected_all: bool


def _choices(*names):
    from sweep.spec import PolicyChoice

    return [PolicyChoice(n, {}) for n in names]


def test_policy_all_skips_session_policies_on_a_trace_without_sessions(tmp_path, caplog):
    from sweep.plan import without_sessions

    none = _load(_file(tmp_path, [-1] * 5), "given")
    sp = _Spec(_choices("lru", "lru_session", "random_compute_session", "s3fifo"), True)
    with caplog.at_level(logging.WARNING, logger="sweep"):
        kept = without_sessions(sp, none)
    assert [p.name for p in kept.policies] == ["lru", "s3fifo"]
    assert "skips lru_session, random_compute_session" in caplog.text and "trace.sessions" in caplog.text
    assert without_sessions(sp, _load(_file(tmp_path, [-1] * 5), "auto")) is sp  # inferred: they run


def test_a_session_policy_named_on_a_trace_without_sessions_is_refused(tmp_path):
    from sweep.plan import without_sessions

    none = _load(_file(tmp_path, [-1] * 5), "given")
    with pytest.raises(ConfigError, match=r"lru_session evicts whole sessions.*trace.sessions=auto or leave it out"):
        without_sessions(_Spec(_choices("lru", "lru_session"), False), none)
    sp = _Spec(_choices("lru"), False)
    assert without_sessions(sp, none) is sp
