"""Trace loaders (Mooncake, Qwen Bailian, FreeInference, native), load cache and summary().

Expected numbers come from hand-written inputs or from an independent plain-json pass
over the bundled Mooncake file, never from the loaders themselves.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from sim_core.traces import loaders
from sim_core.traces.loaders import (
    DEFAULT_CONTEXT_TOKENS, FORMATS, TraceFormatError, bundled_path, detect_format,
    load_freeinference, load_mooncake, load_native, load_qwen_bailian, load_trace,
)
from sim_core.traces.summary import format_summary, summary
from sim_core.traces.trace import Trace

MOONCAKE_SHA256 = "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df"


def write_lines(path: Path, lines) -> Path:
    """Write JSONL: dicts/lists are json-dumped, strings written verbatim."""
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def first_appearance(raw):
    """Independent dense remap: id of each hash = rank of its first appearance."""
    ids = {}
    return [ids.setdefault(h, len(ids)) for h in raw]


# ------------------------------------------------------------ bundled trace
@pytest.fixture(scope="module")
def mooncake_lines():
    with open(bundled_path("mooncake_conversation.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def mooncake():
    return load_trace(bundled_path("mooncake_conversation"))


def test_bundled_file_and_notice():
    p = bundled_path("mooncake_conversation.jsonl")
    assert p == bundled_path("mooncake_conversation") and p.is_file()
    assert p.parent.name == "data" and p.parent.parent.name == "sim_core"
    assert hashlib.sha256(p.read_bytes()).hexdigest() == MOONCAKE_SHA256  # unmodified upstream file
    notice = bundled_path("NOTICE").read_text()
    for needle in ("Mooncake", "FAST", "kvcache-ai/Mooncake", "Apache", "2.0", "12,031", "512",
                   "timestamp", "hash_ids", "UNMODIFIED"):
        assert needle in notice, needle
    with pytest.raises(FileNotFoundError, match="no bundled file 'nope'"):
        bundled_path("nope")
    with pytest.raises(ValueError):
        bundled_path("../trace.py")


def test_mooncake_bundled_counts(mooncake, mooncake_lines):
    lines = mooncake_lines
    raw = [h for d in lines for h in d["hash_ids"]]
    assert len(lines) == 12031
    t = mooncake
    assert t.n_requests == len(lines)
    assert t.n_accesses == sum(len(d["hash_ids"]) for d in lines)
    assert t.n_unique == len(set(raw))
    assert t.arrival_s[-1] == pytest.approx(max(d["timestamp"] for d in lines) / 1000)
    assert t.arrival_s[0] == pytest.approx(min(d["timestamp"] for d in lines) / 1000)
    assert t.block_tokens == 512 and t.source == "real" and t.name == "mooncake_conversation"
    assert t.dropped_requests == 0 and t.meta["dropped_requests"] == 0
    assert (t.session == -1).all()
    # file is in arrival order, so requests keep file order; check every column and block
    order = sorted(range(len(lines)), key=lambda i: lines[i]["timestamp"])
    assert t.request_lengths.tolist() == [len(lines[i]["hash_ids"]) for i in order]
    assert t.input_tokens.tolist() == [lines[i]["input_length"] for i in order]
    assert t.output_tokens.tolist() == [lines[i]["output_length"] for i in order]
    assert t.blocks.tolist() == first_appearance([h for i in order for h in lines[i]["hash_ids"]])


def test_mooncake_summary_matches_independent_count(mooncake, mooncake_lines):
    lines = mooncake_lines
    accesses = sum(len(d["hash_ids"]) for d in lines)
    unique = len({h for d in lines for h in d["hash_ids"]})
    ts = [d["timestamp"] for d in lines]
    s = summary(mooncake)
    assert s["requests"] == len(lines) == 12031
    assert s["block_accesses"] == accesses
    assert s["unique_blocks"] == unique
    assert s["compulsory_miss_ratio"] == pytest.approx(unique / accesses)
    assert s["span_s"] == pytest.approx((max(ts) - min(ts)) / 1000)
    assert s["sessions"] == 0 and s["multi_turn_request_share"] == 0.0
    assert s["mean_tokens_per_request"] == pytest.approx(sum(d["input_length"] for d in lines) / len(lines))
    assert (s["dropped_requests"], s["block_tokens"], s["source"], s["name"]) == \
           (0, 512, "real", "mooncake_conversation")


# ---------------------------------------------------------------- Mooncake
def test_mooncake_sorts_drops_and_defaults(tmp_path):
    p = write_lines(tmp_path / "mc.jsonl", [
        {"timestamp": 3000, "input_length": 600, "output_length": 4, "hash_ids": [9, 8]},
        "",
        {"timestamp": 1000, "input_length": 100, "output_length": 1, "hash_ids": [9]},
        {"timestamp": 3000, "hash_ids": [9, 8, 7]},                # no lengths: 3*512, 0
        {"timestamp": 2000.5, "input_length": 2000, "hash_ids": [1, 2, 3, 4]},  # over context
        "   ",
        {"timestamp": 500, "input_length": 1024, "output_length": 2, "hash_ids": [5, 9]},
    ])
    t = load_mooncake(p, context_tokens=1536, rechain=False)  # the raw ids: 9 follows 5 and starts requests
    # kept (file order): A(3000) C(1000) D(3000) F(500); sorted stable: F C A D
    assert t.arrival_s.tolist() == [0.5, 1.0, 3.0, 3.0]
    assert t.request_lengths.tolist() == [2, 1, 2, 3]
    assert t.blocks.tolist() == first_appearance([5, 9, 9, 9, 8, 9, 8, 7])
    assert t.input_tokens.tolist() == [1024, 100, 600, 1536]  # 1536 == limit: kept
    assert t.output_tokens.tolist() == [2, 1, 4, 0]
    assert t.dropped_requests == 1 and t.meta["dropped_requests"] == 1
    assert t.meta["reordered"] is True
    assert t.name == "mc" and t.block_tokens == 512
    # without a limit nothing is dropped; an explicit name wins
    t2 = load_mooncake(p, context_tokens=None, name="custom", rechain=False)
    assert t2.n_requests == 5 and t2.dropped_requests == 0 and t2.name == "custom"
    assert t2.arrival_s.tolist() == pytest.approx([0.5, 1.0, 2.0005, 3.0, 3.0], rel=0, abs=1e-12)


def test_mooncake_input_length_default_counts_for_context(tmp_path):
    p = write_lines(tmp_path / "m.jsonl", [{"timestamp": 0, "hash_ids": list(range(513))},  # 262656
                                           {"timestamp": 1, "hash_ids": list(range(512))}])  # 262144
    t = load_mooncake(p)
    assert DEFAULT_CONTEXT_TOKENS == 262144
    assert t.n_requests == 1 and t.dropped_requests == 1 and t.input_tokens.tolist() == [262144]


def test_unsigned_64bit_hashes_are_accepted(tmp_path):
    big = [2**64 - 1, 2**63, 2**63 - 1, 5]
    p = write_lines(tmp_path / "u.jsonl", [{"timestamp": 0, "hash_ids": big},
                                           {"timestamp": 1, "hash_ids": big[::-1] + [7]}])
    t = load_mooncake(p, rechain=False)  # the file's ids, unchained on purpose
    assert t.blocks.tolist() == [0, 1, 2, 3, 3, 2, 1, 0, 4]


def test_gzip_input(tmp_path):
    import gzip

    p = tmp_path / "z.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps({"timestamp": 0, "hash_ids": [1, 2]}) + "\n")
    t = load_trace(p)
    assert t.n_accesses == 2 and t.name == "z" and t.meta["loader"] == "mooncake"


# ------------------------------------------------------------ Qwen Bailian
QWEN_LINES = [
    # chat 11's parent 10 appears later in the file; 2 is over the context and dropped,
    # 3 still reaches root 1 through it; 30's parent 999 is unknown -> own root.
    {"chat_id": 11, "parent_chat_id": 10, "timestamp": 50.0, "input_length": 64, "output_length": 5,
     "type": "text", "turn": 2, "hash_ids": [100, 101, 102, 103]},
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 10.0, "input_length": 30, "output_length": 7,
     "type": "text", "turn": 1, "hash_ids": [100, 200]},
    {"chat_id": 2, "parent_chat_id": 1, "timestamp": 20.0, "input_length": 5000, "output_length": 1,
     "type": "text", "turn": 2, "hash_ids": [100, 200, 201]},
    "",
    {"chat_id": 3, "parent_chat_id": 2, "timestamp": 30.0, "input_length": 60, "output_length": 2,
     "type": "search", "turn": 3, "hash_ids": [100, 200, 201, 202]},
    {"chat_id": 10, "timestamp": 40.0, "input_length": 40, "type": "image", "hash_ids": [100, 101, 102]},
    {"chat_id": 30, "parent_chat_id": 999, "timestamp": 30.0, "output_length": 3,
     "hash_ids": [300]},
    {"chat_id": 31, "parent_chat_id": None, "timestamp": 5.5, "input_length": 16, "hash_ids": [300]},
]


def test_qwen_sessions_order_and_drops(tmp_path):
    p = write_lines(tmp_path / "qwen.jsonl", QWEN_LINES)
    t = load_qwen_bailian(p, context_tokens=4096)
    # kept: 11(50) 1(10) 3(30) 10(40) 30(30) 31(5.5); sorted stable by arrival:
    #   31(5.5) 1(10) 3(30) 30(30) 10(40) 11(50)
    assert t.arrival_s.tolist() == [5.5, 10.0, 30.0, 30.0, 40.0, 50.0]
    assert t.session.tolist() == [31, 1, 1, 30, 10, 10]
    assert t.input_tokens.tolist() == [16, 30, 60, 16, 40, 64]  # chat 30: 1 block * 16
    assert t.output_tokens.tolist() == [0, 7, 2, 3, 0, 5]
    assert t.request_lengths.tolist() == [1, 2, 4, 1, 3, 4]
    assert t.blocks.tolist() == first_appearance(
        [300, 100, 200, 100, 200, 201, 202, 300, 100, 101, 102, 100, 101, 102, 103])
    assert t.dropped_requests == 1 and t.meta["dropped_requests"] == 1
    assert t.block_tokens == 16 and t.source == "real" and t.name == "qwen"
    assert t.meta["types"] == {"text": 3, "search": 1, "image": 1}
    s = summary(t)
    assert s["sessions"] == 4  # roots 31, 1, 30, 10
    assert s["multi_turn_request_share"] == pytest.approx(4 / 6)  # sessions 1 and 10


def test_qwen_default_context_keeps_all(tmp_path):
    t = load_trace(write_lines(tmp_path / "q.jsonl", QWEN_LINES))
    assert t.meta["loader"] == "qwen_bailian" and t.n_requests == 7 and t.dropped_requests == 0
    assert sorted(t.session.tolist()) == [1, 1, 1, 10, 10, 30, 31]


# ----------------------------------------------------------- FreeInference
def req(start_ms, block_ids, **kw):
    return {"start_ms": start_ms, "block_ids": block_ids, **kw}


FI_LINES = [
    {"session_id": "A", "week": "w1", "requests": [
        req(1000, [1, 2], input_tokens=20, output_tokens=3, tool_calls=[
            {"name": "terminal", "subagent": None},
            {"name": "task", "subagent": {"session_id": "A.sub", "requests": [
                req(1500, [1, 9], tool_calls=[{"name": "task", "subagent": {"id": 77, "requests": [
                    req(1600, [8]),
                ]}}]),
                req(2500, [1, 9, 10], input_length=40, output_length=6),
            ]}},
        ]),
        req(3000, [1, 2, 3], input_length=48, provider_tokens={"prompt": 999}),
    ]},
    "",
    {"id": "B", "requests": [
        req(500, [5]),
        req(2500, [5, 6], input_tokens=5000, tool_calls=[  # over the context: dropped
            {"name": "task", "subagent": {"session_id": "B.sub", "requests": [req(2600, [5, 7])]}}]),
    ]},
    {"session_id": "C", "requests": []},
]


def test_freeinference_flattens_subagents(tmp_path):
    p = write_lines(tmp_path / "fi.jsonl", FI_LINES)
    t = load_freeinference(p, context_tokens=4096)
    # session ids depth first: A=0, A.sub=1, 77=2, B=3, B.sub=4, C=5 (no requests)
    # kept by arrival: B@0.5 A@1.0 A.sub@1.5 77@1.6 A.sub@2.5 B.sub@2.6 A@3.0 (B@2.5 dropped)
    assert t.arrival_s.tolist() == [0.5, 1.0, 1.5, 1.6, 2.5, 2.6, 3.0]
    assert t.session.tolist() == [3, 0, 1, 2, 1, 4, 0]
    assert t.request_lengths.tolist() == [1, 2, 2, 1, 3, 2, 3]
    assert t.blocks.tolist() == first_appearance([5, 1, 2, 1, 9, 8, 1, 9, 10, 5, 7, 1, 2, 3])
    # input: explicit tokens/length, else 16 per block; output: explicit, else 0
    assert t.input_tokens.tolist() == [16, 20, 32, 16, 40, 32, 48]
    assert t.output_tokens.tolist() == [0, 3, 0, 0, 6, 0, 0]
    assert t.dropped_requests == 1
    assert t.meta["sessions"] == 6 and t.meta["subagent_sessions"] == 3
    assert t.block_tokens == 16 and t.name == "fi" and t.source == "real"
    s = summary(t)
    assert s["sessions"] == 5  # C has no request
    assert s["multi_turn_request_share"] == pytest.approx(4 / 7)  # A and A.sub


def test_freeinference_equal_arrivals_keep_depth_first_order(tmp_path):
    p = write_lines(tmp_path / "tie.jsonl", [
        {"session_id": "x", "requests": [req(0, [1], tool_calls=[
            {"subagent": {"session_id": "y", "requests": [req(0, [2])]}}]), req(0, [3])]},
        {"session_id": "z", "requests": [req(0, [4])]},
    ])
    t = load_trace(p)
    assert t.meta["loader"] == "freeinference"
    assert t.session.tolist() == [0, 1, 0, 2]
    assert t.blocks.tolist() == [0, 1, 2, 3]


# ------------------------------------------------------- malformed inputs
GOOD = {
    "mooncake": {"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [1]},
    "qwen_bailian": {"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 16,
                     "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1]},
    "freeinference": {"session_id": "s", "requests": [req(1, [1])]},
}
LOADERS = {"mooncake": load_mooncake, "qwen_bailian": load_qwen_bailian,
           "freeinference": load_freeinference}


def without(d, key):
    return {k: v for k, v in d.items() if k != key}


def mk(fmt, **changes):
    d = dict(GOOD[fmt])
    d.update(changes)
    return d


def fi_req(**changes):
    r = req(1, [1])
    r.update(changes)
    return {"session_id": "bad", "requests": [r]}


def fi_without(key):
    return {"session_id": "bad", "requests": [without(req(1, [1]), key)]}


MALFORMED = [
    # (format, bad line, field named in the message or None, message fragment)
    *[(f, '{"timestamp": 1,', None, "invalid JSON") for f in LOADERS],
    *[(f, "[1, 2]", None, "expected a JSON object, got list") for f in LOADERS],
    *[(f, '"text"', None, "expected a JSON object, got str") for f in LOADERS],
    ("mooncake", without(GOOD["mooncake"], "timestamp"), "timestamp", "missing required field"),
    ("mooncake", without(GOOD["mooncake"], "hash_ids"), "hash_ids", "missing required field"),
    ("mooncake", mk("mooncake", timestamp=None), "timestamp", "null"),
    ("mooncake", mk("mooncake", hash_ids="x"), "hash_ids", "expected a list of integers, got 'x'"),
    ("mooncake", mk("mooncake", hash_ids=[1, "x"]), "hash_ids", "expected a list of integers, got 'x'"),
    ("mooncake", mk("mooncake", hash_ids=[1, 2.5]), "hash_ids", "got 2.5"),
    ("mooncake", mk("mooncake", hash_ids=[1, True]), "hash_ids", "got True"),
    ("mooncake", mk("mooncake", hash_ids=[2**64]), "hash_ids", "64 bits"),
    ("mooncake", mk("mooncake", hash_ids={"a": 1}), "hash_ids", "expected a list of integers"),
    ("mooncake", mk("mooncake", timestamp="12x"), "timestamp", "expected a number or a numeric string, got '12x'"),
    ("mooncake", mk("mooncake", timestamp=True), "timestamp", "expected a number"),
    ("mooncake", '{"timestamp": NaN, "hash_ids": [1]}', "timestamp", "finite"),
    ("mooncake", mk("mooncake", input_length=-5), "input_length", ">= 0, got -5"),
    ("mooncake", mk("mooncake", output_length=-1), "output_length", ">= 0"),
    ("mooncake", mk("mooncake", input_length=1.5), "input_length", "expected an integer, got 1.5"),
    ("mooncake", mk("mooncake", input_length="10"), "input_length", "expected an integer"),
    ("qwen_bailian", without(GOOD["qwen_bailian"], "chat_id"), "chat_id", "missing required field"),
    ("qwen_bailian", without(GOOD["qwen_bailian"], "timestamp"), "timestamp", "missing required field"),
    ("qwen_bailian", without(GOOD["qwen_bailian"], "hash_ids"), "hash_ids", "missing required field"),
    ("qwen_bailian", mk("qwen_bailian", chat_id="a"), "chat_id", "expected an integer"),
    ("qwen_bailian", mk("qwen_bailian", chat_id=-3), "chat_id", ">= 0"),
    ("qwen_bailian", mk("qwen_bailian", chat_id=0), "chat_id", "duplicate chat_id 0 (first seen on line 1)"),
    ("qwen_bailian", mk("qwen_bailian", chat_id=5, parent_chat_id=5), "parent_chat_id", "cycle"),
    ("qwen_bailian", mk("qwen_bailian", parent_chat_id="x"), "parent_chat_id", "expected an integer"),
    ("qwen_bailian", mk("qwen_bailian", timestamp=[1]), "timestamp", "expected a number"),
    ("qwen_bailian", mk("qwen_bailian", hash_ids=["x"]), "hash_ids", "expected a list of integers, got 'x'"),
    ("qwen_bailian", mk("qwen_bailian", hash_ids=7), "hash_ids", "expected a list of integers, got 7"),
    ("qwen_bailian", mk("qwen_bailian", input_length=-1), "input_length", ">= 0"),
    ("qwen_bailian", mk("qwen_bailian", output_length="many"), "output_length", "expected an integer"),
    ("qwen_bailian", mk("qwen_bailian", type=5), "type", "expected a string"),
    ("qwen_bailian", mk("qwen_bailian", turn=-1), "turn", ">= 0"),
    ("freeinference", without(GOOD["freeinference"], "session_id"), "session_id", "missing required field"),
    ("freeinference", {"session_id": [1], "requests": []}, "session_id", "expected a string or integer"),
    ("freeinference", {"session_id": "s"}, "requests", "missing required field"),
    ("freeinference", {"session_id": "s", "requests": {}}, "requests", "expected a list"),
    ("freeinference", {"session_id": "s", "requests": [3]}, "requests[0]", "expected a request object"),
    ("freeinference", fi_without("start_ms"), "requests[0].start_ms", "missing required field"),
    ("freeinference", fi_without("block_ids"), "requests[0].block_ids", "missing required field"),
    ("freeinference", fi_req(start_ms="soon"), "requests[0].start_ms", "expected a number"),
    ("freeinference", fi_req(block_ids=["a"]), "requests[0].block_ids", "expected a list of integers, got 'a'"),
    ("freeinference", fi_req(input_tokens=-1), "requests[0].input_tokens", ">= 0"),
    ("freeinference", fi_req(input_length=2.5), "requests[0].input_length", "expected an integer"),
    ("freeinference", fi_req(output_tokens=-2), "requests[0].output_tokens", ">= 0"),
    ("freeinference", fi_req(tool_calls="x"), "requests[0].tool_calls", "expected a list"),
    ("freeinference", fi_req(tool_calls=[3]), "requests[0].tool_calls[0]", "expected a tool-call object"),
    ("freeinference", fi_req(tool_calls=[{"subagent": 5}]), "requests[0].tool_calls[0].subagent",
     "expected a session object"),
    ("freeinference", fi_req(tool_calls=[{"subagent": {"requests": []}}]),
     "requests[0].tool_calls[0].subagent.session_id", "missing required field"),
    ("freeinference", fi_req(tool_calls=[{"subagent": fi_without("block_ids")}]),
     "requests[0].tool_calls[0].subagent.requests[0].block_ids", "missing required field"),
]


@pytest.mark.parametrize("fmt, bad, field, fragment", MALFORMED,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_malformed_line_names_file_line_and_field(tmp_path, fmt, bad, field, fragment):
    good = mk(fmt, chat_id=0) if fmt == "qwen_bailian" else GOOD[fmt]
    tail = mk(fmt, chat_id=2) if fmt == "qwen_bailian" else GOOD[fmt]
    # good record on line 1, a blank line 2, the bad record on physical line 3
    p = write_lines(tmp_path / f"{fmt}_bad.jsonl", [good, "", bad, tail])
    for load in (LOADERS[fmt], lambda q: load_trace(q, fmt=fmt)):
        with pytest.raises(TraceFormatError) as ei:
            load(p)
        msg = str(ei.value)
        assert f"{p}:3: " in msg, msg
        assert f"{fmt}_bad.jsonl:3: " in msg
        if field is not None:
            assert f"field '{field}'" in msg, msg
        assert fragment in msg, msg
    assert isinstance(ei.value, ValueError)


@pytest.mark.parametrize("fmt", list(LOADERS))
@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_has_no_requests(tmp_path, fmt, content):
    p = tmp_path / "empty.jsonl"
    p.write_text(content)
    with pytest.raises(TraceFormatError, match="empty.jsonl: no requests"):
        LOADERS[fmt](p)
    with pytest.raises(TraceFormatError, match="no requests"):
        load_trace(p)  # auto detection fails the same way


def test_deep_nesting_and_damaged_gzip_are_format_errors(tmp_path):
    import gzip

    deep = tmp_path / "deep.jsonl"
    deep.write_text(json.dumps(GOOD["mooncake"]) + "\n" + "[" * 200_000 + "\n")
    with pytest.raises(TraceFormatError, match=r"deep.jsonl:2: invalid JSON: nested too deeply"):
        load_mooncake(deep)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress((json.dumps(GOOD["mooncake"]) + "\n").encode() * 2000)[:300])
    with pytest.raises(TraceFormatError, match=r"cut.jsonl.gz:\d+: unreadable gzip data"):
        load_mooncake(cut)


def test_all_requests_dropped_is_an_error(tmp_path):
    p = write_lines(tmp_path / "big.jsonl", [{"timestamp": 0, "input_length": 10**6, "hash_ids": [1]}])
    with pytest.raises(TraceFormatError, match="no requests left: all 1 exceed context_tokens=262144"):
        load_mooncake(p)


# --------------------------------------------------------------- dispatch
def test_detect_format_and_dispatch(tmp_path):
    mc = write_lines(tmp_path / "a.jsonl", ["", GOOD["mooncake"]])
    qw = write_lines(tmp_path / "b.jsonl", [GOOD["qwen_bailian"]])
    fi = write_lines(tmp_path / "c.jsonl", [GOOD["freeinference"]])
    assert (detect_format(mc), detect_format(qw), detect_format(fi)) == \
           ("mooncake", "qwen_bailian", "freeinference")
    assert load_trace(mc).block_tokens == 512
    assert load_trace(qw).meta["loader"] == "qwen_bailian"
    assert load_trace(fi, fmt="freeinference").meta["loader"] == "freeinference"
    native = load_trace(mc).save(tmp_path / "a.npz")
    assert detect_format(native) == "native"
    back = load_trace(native)
    assert back.meta["loader"] == "mooncake" and back.blocks.tolist() == [0]
    assert load_trace(native, fmt="native", name="renamed").name == "renamed"
    with pytest.raises(TypeError, match="context_tokens"):
        load_trace(native, context_tokens=10)
    unknown = write_lines(tmp_path / "d.jsonl", [{"foo": 1}])
    with pytest.raises(TraceFormatError, match=r"d.jsonl:1: cannot detect the trace format"):
        load_trace(unknown)


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(ValueError) as ei:
        load_trace(tmp_path / "x.jsonl", fmt="csv")
    for f in FORMATS:
        assert f in str(ei.value)
    missing = tmp_path / "missing.jsonl"
    for call in (lambda: load_trace(missing), lambda: load_mooncake(missing),
                 lambda: load_qwen_bailian(missing), lambda: load_freeinference(missing),
                 lambda: load_native(tmp_path / "missing.npz")):
        with pytest.raises(FileNotFoundError, match="missing"):
            call()
    with pytest.raises(FileNotFoundError) as ei:
        load_trace(missing)
    assert ei.value.filename == str(missing)


# ------------------------------------------------------------------ cache
def test_load_cache_round_trip_and_invalidation(tmp_path, monkeypatch):
    src = write_lines(tmp_path / "trace.jsonl", QWEN_LINES)
    cache = tmp_path / "cache"
    fresh = load_trace(src, cache_dir=cache, context_tokens=4096)
    files = list(cache.glob("*.npz"))
    assert len(files) == 1 and files[0].name.startswith("trace.qwen_bailian.")

    def boom(*a, **k):
        raise AssertionError("re-parsed although cached")

    monkeypatch.setitem(loaders.REGISTRY, "qwen_bailian",
                        dataclasses.replace(loaders.REGISTRY["qwen_bailian"], read=boom))
    cached = load_trace(src, cache_dir=cache, context_tokens=4096)
    for name in ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(cached, name), getattr(fresh, name))
    assert (cached.dropped_requests, cached.name, cached.meta) == (1, "trace", fresh.meta)
    # another context window or another name is another cache entry
    with pytest.raises(AssertionError, match="re-parsed"):
        load_trace(src, cache_dir=cache, context_tokens=8192)
    with pytest.raises(AssertionError, match="re-parsed"):
        load_trace(src, cache_dir=cache, context_tokens=4096, name="other")
    monkeypatch.undo()

    # editing the file (size and mtime change) invalidates the entry
    write_lines(src, QWEN_LINES[:2])
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    edited = load_trace(src, cache_dir=cache, context_tokens=4096)
    assert edited.n_requests == 2 and len(list(cache.glob("*.npz"))) == 2

    # a corrupt cache entry is re-parsed and rewritten, never fatal
    entry = max(cache.glob("*.npz"), key=lambda f: f.stat().st_mtime_ns)
    entry.write_bytes(b"garbage")
    again = load_trace(src, cache_dir=cache, context_tokens=4096)
    assert again.n_requests == 2
    assert Trace.load(entry).n_requests == 2
    assert not [f for f in cache.iterdir() if f.name.startswith(".")]  # no temp files left


# ---------------------------------------------------------------- summary
def test_summary_hand_computed():
    t = Trace.from_requests([[1, 2, 3], [1, 2, 4], [5], [1, 6]], arrival_s=[10.0, 12.5, 13.0, 20.0],
                            session=[7, 7, -1, 9], block_tokens=16, input_tokens=[40, 45, 10, 25],
                            name="hand", source="synthetic", dropped_requests=2)
    assert summary(t) == {
        "name": "hand", "source": "synthetic",
        "requests": 4, "block_accesses": 9, "unique_blocks": 6, "compulsory_miss_ratio": 6 / 9,
        "span_s": 10.0, "sessions": 2, "multi_turn_request_share": 0.5,
        "mean_tokens_per_request": 30.0, "dropped_requests": 2, "block_tokens": 16,
    }


def test_summary_unknown_sessions_and_types():
    t = Trace.from_requests([[1], [1]], arrival_s=[3.0, 3.0])
    s = summary(t)
    assert s["sessions"] == 0 and s["multi_turn_request_share"] == 0.0 and s["span_s"] == 0.0
    assert s["compulsory_miss_ratio"] == 0.5 and s["mean_tokens_per_request"] == 16.0
    assert all(type(v) in (int, float, str) for v in s.values())


def test_format_summary_is_aligned():
    d = {"name": "hand", "source": "real", "requests": 12031, "compulsory_miss_ratio": 2 / 3,
         "span_s": 3537.0, "extra": "x"}
    text = format_summary(d)
    lines = text.splitlines()
    assert [ln.split()[0] for ln in lines] == ["name", "source", "requests", "compulsory_miss_ratio",
                                              "span_s", "extra"]
    assert len({len(ln) for ln in lines}) == 1  # right-aligned values: equal widths
    assert "12,031" in text and "0.6667" in text and "3,537.00" in text
    assert format_summary({}) == ""
