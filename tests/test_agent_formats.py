"""Agentic trace layouts as published: LMCache's agent traces (a directory of per-session
JSONL files of prompt text), WEKA's kv-cache-tester conversations (JSON files with nested
sub-agents) and Dynamo's agentic Mooncake rows (wait_for, branches, tool_wait_ms).
Hand-written files in each layout; expectations worked out by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from sim_core.traces.loaders import TraceFormatError, detect_format, load_trace

WORDS = "fix the bug in parser then run tests again ok done".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([" ".join(WORDS)], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ------------------------------------------------------- LMCache agent traces
def test_lmcache_agent_directory(tmp_path, tokenizer):
    d = tmp_path / "miniswe"
    d.mkdir()
    t0 = 1760428436442742  # µs, as the published files
    # session a: turn 2 repeats turn 1's 4 words and adds 4; session b shares the first 2 words
    jsonl(d / "a.jsonl", [
        {"timestamp": t0, "input": "fix the bug in", "output": "ok", "session_id": "a"},
        {"timestamp": str(t0 + 2_500_000), "input": "fix the bug in parser then run tests", "output": "done ok",
         "session_id": "a"}])
    jsonl(d / "b.jsonl", [{"timestamp": t0 + 1_000_000, "input": "fix the again ok", "output": ""}])  # no session_id
    (d / "notes.txt").write_text("not a trace file")
    assert detect_format(d) == "lmcache_agent"
    t = load_trace(d, tokenizer=tokenizer, block_tokens=2)
    assert t.meta["loader"] == "lmcache_agent" and t.meta["time"]["unit"] == "us"
    assert t.arrival_s.tolist() == [0.0, 1.0, 2.5]
    assert t.input_tokens.tolist() == [4, 4, 8] and t.output_tokens.tolist() == [1, 0, 2]
    assert t.session.tolist() == [0, 1, 0]  # a by its id, b by its file name
    # 2-token blocks: [fix the][bug in] | [fix the][again ok] | [fix the][bug in][parser then][run tests]
    assert t.blocks.tolist() == [0, 1, 0, 2, 0, 1, 3, 4]
    one = load_trace(d / "a.jsonl", tokenizer=tokenizer, block_tokens=2)  # one file works too
    assert one.n_requests == 2 and one.blocks.tolist() == [0, 1, 0, 1, 2, 3]


def test_lmcache_agent_errors_name_file_and_line(tmp_path, tokenizer):
    d = tmp_path / "s"
    d.mkdir()
    jsonl(d / "a.jsonl", [{"timestamp": 1, "input": "fix"}])
    jsonl(d / "b.jsonl", [{"timestamp": 2, "input": "fix"}, {"timestamp": 3, "input": 7}])
    with pytest.raises(TraceFormatError, match=rf"^{d / 'b.jsonl'}:2: field 'input': expected a string"):
        load_trace(d, tokenizer=tokenizer)
    with pytest.raises(TypeError, match="needs a tokenizer"):
        load_trace(d)
    with pytest.raises(IsADirectoryError, match="format mooncake reads one file"):
        load_trace(d, fmt="mooncake")


# --------------------------------------------------------- kv-cache-tester
def conversation(ids, scope="local", think=None):
    sub = {"t": 10.0, "type": "subagent", "agent_id": "agent_001", "requests": [
        {"t": 0.0, "type": "n", "in": 130, "out": 3, "hash_ids": [ids[0], 9]},
        {"t": 4.0, "type": "n", "in": 200, "out": 3, "hash_ids": [ids[0], 9, 10]}]}
    return {"id": "c", "block_size": 64, "hash_id_scope": scope, "requests": [
        {"t": 0.0, "type": "n", "in": 150, "out": 5, "hash_ids": ids},
        sub,
        {"t": 12.5, "type": "s", "in": 260, "out": 7, "hash_ids": ids + [3, 4], "think_time": think}]}


def test_kvcache_tester_conversations(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    (d / "trace_0001.json").write_text(json.dumps(conversation([1, 2], think=2.5)))
    (d / "trace_0002.json").write_text(json.dumps(conversation([1, 2])))  # the same ids, its own namespace
    assert detect_format(d) == "kvcache_tester"
    t = load_trace(d)
    assert t.block_tokens == 64 and t.meta["block_size"]["contradicting"] == 0  # floor(in / 64) hashes
    # per file: 0 s, sub-agent at 10 s and 14 s, 12.5 s; both files start at 0
    assert t.arrival_s.tolist() == [0, 0, 10, 10, 12.5, 12.5, 14, 14]
    assert t.session.tolist() == [0, 2, 1, 3, 0, 2, 1, 3]
    assert t.meta["sessions"] == 4 and t.meta["subagent_sessions"] == 2
    assert t.tool_wait_s.tolist() == [0, 0, 0, 0, 2.5, 0, 0, 0]
    assert t.n_unique == 2 * 6  # ids 1, 2, 9, 10, 3, 4 in each file, none shared across files
    shared = tmp_path / "g.json"
    shared.write_text(json.dumps(conversation([1, 2], scope="global")) + "\n"
                      + json.dumps(conversation([1, 2], scope="global")) + "\n")
    assert load_trace(shared).n_unique == 6  # global ids: the second conversation reuses the first's


def test_kvcache_tester_bad_field(tmp_path):
    c = conversation([1, 2])
    c["requests"][1]["requests"][1]["hash_ids"] = "x"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(c))
    with pytest.raises(TraceFormatError, match=r":1: field 'requests\[1\]\.requests\[1\]\.hash_ids'"):
        load_trace(p)


# ------------------------------------------------------ Dynamo agentic rows
def test_dynamo_agentic_rows(tmp_path):
    p = jsonl(tmp_path / "agentic.jsonl", [
        {"request_id": "r1", "session_id": "root", "timestamp": 0, "input_length": 1, "output_length": 5,
         "hash_ids": [11], "prefix_reset": True, "branches": ["c1"]},
        {"request_id": "c1", "session_id": "child", "input_length": 2, "output_length": 5, "hash_ids": [33],
         "wait_for": ["r1"], "delay": 100},
        {"request_id": "r2", "session_id": "root", "input_length": 2, "output_length": 5, "hash_ids": [11, 22],
         "wait_for": ["r1", "c1"], "delay": 100, "tool_wait_ms": 250},
        {"request_id": "r3", "session_id": "root", "timestamp": 2000, "input_length": 3, "output_length": 5,
         "hash_ids": [11, 22, 44], "wait_for": ["r2"], "tool_wait_ms": 40}])
    assert detect_format(p) == "dynamo"
    t = load_trace(p, file_block_tokens=1)
    # c1: r1 + 0.1 s; r2: max(r1, c1) + 0.1 + 0.25 s; r3: its timestamp wins
    assert t.arrival_s.tolist() == pytest.approx([0.0, 0.1, 0.45, 2.0])
    assert t.tool_wait_s.tolist() == pytest.approx([0.0, 0.0, 0.25, 0.04])
    assert t.session.tolist() == [0, 1, 0, 0]
    assert t.meta["agentic"] and t.meta["rows_with_branches"] == 1
    bad = jsonl(tmp_path / "bad.jsonl", [{"request_id": "a", "output_length": 1, "hash_ids": [1],
                                          "wait_for": ["zz"]}])
    with pytest.raises(TraceFormatError, match=r"bad.jsonl:1: field 'wait_for': request_id 'zz' is not on an earlier"):
        load_trace(bad)
    plain = jsonl(tmp_path / "plain.jsonl", [{"session_id": "s", "timestamp": 0, "output_length": 1, "hash_ids": [1]}])
    assert load_trace(plain).tool_wait_s is None  # a trace without tool waits says nothing about them


def test_tool_waits_survive_save_subset_and_reblock(tmp_path):
    from sim_core.traces.reblock import reblock
    from sim_core.traces.trace import Trace

    t = Trace.from_requests([[1, 2], [1, 2, 3, 4]], tool_wait_s=[0.5, 1.5])
    back = Trace.load(t.save(tmp_path / "t.npz"))
    assert back.tool_wait_s.tolist() == [0.5, 1.5]
    assert t.subset(1).tool_wait_s.tolist() == [0.5]
    assert np.array_equal(reblock(t, 32).tool_wait_s, t.tool_wait_s)


def test_trace_config_reads_a_directory(tmp_path):
    from sim_core.config_checks import ConfigError
    from sim_core.traces.config import load

    d = tmp_path / "traces"
    d.mkdir()
    (d / "trace_0001.json").write_text(json.dumps(conversation([1, 2])))
    t = load({"path": str(d), "format": "auto", "sessions": "given"}, "file")
    assert t.meta["loader"] == "kvcache_tester" and t.n_requests == 4 and t.name == "traces"
    with pytest.raises(ConfigError, match="is a directory; give a trace file"):
        load({"path": str(d), "format": "mooncake"}, "file")


def test_turns_and_next_arrivals_by_hand():
    from sim_core.traces.sessions import next_arrival_s, turn_index
    from sim_core.traces.trace import Trace

    t = Trace.from_requests([[1], [2], [1, 3], [4], [2, 5], [1, 3, 6]], arrival_s=[0, 1, 2, 3, 4, 5],
                            session=[0, 1, 0, -1, 1, 0])
    assert turn_index(t).tolist() == [0, 0, 1, -1, 1, 2]
    assert next_arrival_s(t).tolist() == [2, 4, 5, np.inf, np.inf, np.inf]


def test_tool_waits_are_part_of_the_trace_digest():
    from sim_core.digest import trace_digest
    from sim_core.traces.trace import Trace

    plain = Trace.from_requests([[1, 2], [1, 3]])
    a = Trace.from_requests([[1, 2], [1, 3]], tool_wait_s=[0.0, 1.0])
    b = Trace.from_requests([[1, 2], [1, 3]], tool_wait_s=[0.0, 2.0])
    assert len({trace_digest(plain), trace_digest(a), trace_digest(b)}) == 3
    assert trace_digest(plain) == trace_digest(Trace.from_requests([[1, 2], [1, 3]]))
