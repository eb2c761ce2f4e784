"""Importers of what live systems record: NVIDIA Dynamo's replay rows and request trace,
LMCache's lookup-hash log. Small hand-written samples; expected arrays by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim_core.traces.loaders import (FORMATS, TraceFormatError, detect_format, load_dynamo, load_dynamo_request,
                              load_lmcache, load_trace)


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def first_appearance(raw):
    ids = {}
    return [ids.setdefault(h, len(ids)) for h in raw]


# ----------------------------------------------------------------- Dynamo rows
DYNAMO_ROWS = [
    {"session_id": "s1", "timestamp": 1000, "input_length": 1100, "output_length": 52, "hash_ids": [0, 1, 2]},
    {"timestamp": 500, "input_tokens": 300, "output_tokens": 9, "hash_ids": [7]},          # independent
    {"session_id": "s1", "delay": 2500, "input_length": 9999, "output_length": 40,        # kept, counted
     "hash_ids": [0, 1, 2, 3]},
    {"session_id": "s2", "created_time": 1200.5, "output_length": 1, "hash_ids": [0, 5]},  # no input: 2*512
    {"session_id": "s2", "delay_ms": 100, "timestamp": 9000, "output_length": 2, "hash_ids": [0, 5, 6]},
    {"session_id": "s1", "output_length": 3, "hash_ids": [0, 1, 2, 3, 4]},                # no delay: +0
]


def test_dynamo_rows(tmp_path):
    p = write_lines(tmp_path / "dyn.jsonl", DYNAMO_ROWS)
    assert detect_format(p) == "dynamo"
    t = load_dynamo(p)
    assert t.block_tokens == 512 and t.meta["loader"] == "dynamo"
    # arrivals: s1 1.0, 3.5 (1.0 + 2.5), 3.5 (+0); indep 0.5; s2 1.2005, 9.0 (timestamp wins)
    assert t.arrival_s.tolist() == [0.5, 1.0, 1.2005, 3.5, 3.5, 9.0]
    assert t.session.tolist() == [-1, 0, 1, 0, 0, 1]
    assert t.input_tokens.tolist() == [300, 1100, 1024, 9999, 2560, 1536]  # never clamped
    assert t.output_tokens.tolist() == [9, 52, 1, 40, 3, 2]
    assert t.blocks.tolist() == first_appearance([7, 0, 1, 2, 0, 5, 0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 5, 6])
    # 1 of the 3 rows with a length contradicts 512-token blocks; none fits better
    assert t.meta["block_size"]["contradicting"] == 1 and t.meta["block_size"]["longer_than_blocks"] == 1
    assert t.meta["block_size"]["block_tokens"] == 512 and t.meta["sessions"] == 2
    t64 = load_trace(p, file_block_tokens=64)
    assert t64.block_tokens == 64 and t64.input_tokens.tolist()[:3] == [300, 1100, 128]  # as written


def test_plain_mooncake_rows_stay_mooncake(tmp_path):
    p = write_lines(tmp_path / "mc.jsonl", [{"timestamp": 0, "input_length": 5, "output_length": 1,
                                             "hash_ids": [1]}])
    assert detect_format(p) == "mooncake"
    assert load_dynamo(p).blocks.tolist() == load_trace(p).blocks.tolist() == [0]


# ------------------------------------------------------- Dynamo request trace
def rec(rid, received, hashes, ilen, bt=2, out=4, session=None, wrap=False, **extra):
    r = {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": received + 100,
         "request": {"request_id": rid, "request_received_ms": received, "output_tokens": out,
                     "replay": {"trace_block_size": bt, "input_length": ilen, "input_sequence_hashes": hashes}}}
    if session is not None:
        r["agent_context"] = {"session_id": session}
    r.update(extra)
    return {"timestamp": 1, "event": r} if wrap else r


DYNAMO_REQUESTS = [
    rec("req-2", 3000, [11, 22, 33], 5, session="root"),
    {"schema": "dynamo.request.trace.v1", "event_type": "request_payload", "event_time_unix_ms": 1050,
     "payload": {"request_id": "req-1", "request": {"messages": [{"role": "user", "content": "hi"}]}}},
    rec("req-1", 1000, [11, 22], 3, wrap=True),
    {"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 1200,
     "agent_context": {"session_id": "root"}, "tool": {"tool_call_id": "t", "tool_class": "search"}},
    {"timestamp": 2, "event": "not a record"},
    rec("req-3", 2000, [11, 44], 4, session="child", out=0),
]


def test_dynamo_request_trace(tmp_path):
    p = write_lines(tmp_path / "req.jsonl", DYNAMO_REQUESTS)
    assert detect_format(p) == "dynamo_request"
    t = load_dynamo_request(p)
    assert t.block_tokens == 2 and t.meta["loader"] == "dynamo_request"
    assert t.arrival_s.tolist() == [1.0, 2.0, 3.0]
    assert t.input_tokens.tolist() == [3, 4, 5] and t.output_tokens.tolist() == [4, 0, 4]
    assert t.session.tolist() == [-1, 1, 0]  # "root" first in the file
    assert t.blocks.tolist() == first_appearance([11, 22, 11, 44, 11, 22, 33])
    assert t.meta["skipped_events"] == 3
    wrapped_first = write_lines(tmp_path / "w.jsonl", [rec("a", 0, [1], 2, wrap=True)])
    assert detect_format(wrapped_first) == "dynamo_request"


# ------------------------------------------------------------ LMCache log
LMCACHE_LINES = [
    {"timestamp": 1711929600.5, "request_id": "req-a", "model_name": "m", "chunk_size": 256, "seq_len": 700,
     "dtypes": ["bfloat16"], "shapes": [[2, 256, 8]], "chunk_hashes": ["0xab", "0x" + "f" * 64]},
    {"timestamp": 1711929600.0, "request_id": "req-b", "model_name": "m", "chunk_size": 256, "seq_len": 300,
     "chunk_hashes": ["0xab"]},
    {"timestamp": 1711929601.0, "request_id": "req-a", "model_name": "m", "chunk_size": 256, "seq_len": 700,
     "chunk_hashes": ["0xab", "0x" + "f" * 64]},                            # the engine asking again
    {"timestamp": 1711929602.0, "chunk_size": 256, "chunk_hashes": [171, "0XCD"]},  # no id, int hash, no seq_len
]


def test_lmcache_lookup_log(tmp_path):
    p = write_lines(tmp_path / "lookup_hashes_20260401_143025_000003.jsonl", LMCACHE_LINES)
    assert detect_format(p) == "lmcache"
    t = load_lmcache(p)
    assert t.block_tokens == 256 and t.meta["loader"] == "lmcache"
    assert t.arrival_s.tolist() == [0.0, 0.5, 2.0]  # Unix seconds, made relative
    assert t.meta["time"]["unit"] == "s" and t.meta["time"]["absolute"] and t.meta["time"]["origin"] == 1711929600.0
    assert t.input_tokens.tolist() == [300, 700, 512]
    # 0xab == 171; a 256-bit hash kept by its low 64 bits (all ones = -1 as int64)
    assert t.blocks.tolist() == [0, 0, 1, 0, 2]
    assert int(t.source_ids[1]) == 2**64 - 1 and int(t.source_ids[2]) == 0xCD
    assert (t.session == -1).all() and (t.output_tokens == 0).all()
    assert t.meta["repeated_lookups"] == 1 and t.meta["model_name"] == "m"


# ------------------------------------------------------- malformed inputs
GOOD = {
    "dynamo": {"session_id": "s", "timestamp": 0, "output_length": 1, "hash_ids": [1]},
    "dynamo_request": rec("ok", 0, [1], 2),
    "lmcache": {"timestamp": 1.0, "request_id": "ok", "model_name": "m", "chunk_size": 256,
                "chunk_hashes": ["0x1"]},
}


def mk(fmt, **changes):
    d = json.loads(json.dumps(GOOD[fmt]))
    for k, v in changes.items():
        node = d
        *path, last = k.split("__")
        for part in path:
            node = node[part]
        if v is DEL:
            del node[last]
        else:
            node[last] = v
    return d


DEL = object()
MALFORMED = [
    *[(f, '{"timestamp": 1,', None, "invalid JSON") for f in GOOD],
    *[(f, "[1, 2]", None, "expected a JSON object, got list") for f in GOOD],
    ("dynamo", mk("dynamo", hash_ids=DEL), "hash_ids", "missing required field"),
    ("dynamo", mk("dynamo", hash_ids=[1, "x"]), "hash_ids", "expected a list of integers, got 'x'"),
    ("dynamo", mk("dynamo", output_length=DEL), "output_length", "missing required field"),
    ("dynamo", mk("dynamo", output_length=-1), "output_length", ">= 0"),
    ("dynamo", mk("dynamo", input_tokens=1.5), "input_tokens", "expected an integer"),
    ("dynamo", mk("dynamo", timestamp="0s"), "timestamp", "expected a number"),
    ("dynamo", mk("dynamo", timestamp=DEL, created_time=[1]), "created_time", "expected a number"),
    ("dynamo", mk("dynamo", session_id="new", delay=5), "delay", "first row of session 'new'"),
    ("dynamo", mk("dynamo", delay_ms=-5), "delay_ms", ">= 0"),
    ("dynamo", mk("dynamo", session_id={"a": 1}), "session_id", "string or integer"),
    ("dynamo_request", mk("dynamo_request", schema="dynamo.request.trace.v2"), "schema", "unknown schema"),
    ("dynamo_request", mk("dynamo_request", schema=DEL), "schema", "missing required field"),
    ("dynamo_request", mk("dynamo_request", event_type="request_start"), "event_type", "unsupported event"),
    ("dynamo_request", mk("dynamo_request", event_time_unix_ms=DEL), "event_time_unix_ms", "missing"),
    ("dynamo_request", mk("dynamo_request", request=DEL), "request", "missing required field"),
    ("dynamo_request", mk("dynamo_request", request=[1]), "request", "expected an object"),
    ("dynamo_request", mk("dynamo_request", request__request_id="ok"), "request.request_id",
     "duplicate request_id 'ok' (first on line 1)"),
    ("dynamo_request", mk("dynamo_request", request__request_id=5), "request.request_id", "expected a string"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__request_received_ms=DEL),
     "request.request_received_ms", "missing required field"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__output_tokens=DEL),
     "request.output_tokens", "missing required field"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__replay=DEL),
     "request.replay", "missing required field"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__replay__trace_block_size=0),
     "request.replay.trace_block_size", ">= 1"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__replay__trace_block_size=4),
     "request.replay.trace_block_size", "4 differs from 2 (line 1)"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", request__replay__input_length=5),
     "request.replay.input_sequence_hashes", "needs exactly 3 hashes, got 1"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x",
                          request__replay__input_sequence_hashes=["a"]),
     "request.replay.input_sequence_hashes", "expected a list of integers"),
    ("dynamo_request", mk("dynamo_request", request__request_id="x", agent_context={"session_id": 3}),
     "agent_context.session_id", "expected a string"),
    ("dynamo_request", {"event": mk("dynamo_request", request__request_id="x", request__output_tokens=-1)},
     "event.request.output_tokens", ">= 0"),
    ("lmcache", mk("lmcache", timestamp=DEL), "timestamp", "missing required field"),
    ("lmcache", mk("lmcache", timestamp="2026-05-07T00:00:00Z"), "timestamp", "expected a number"),
    ("lmcache", mk("lmcache", chunk_hashes=DEL), "chunk_hashes", "missing required field"),
    ("lmcache", mk("lmcache", chunk_hashes="0x1"), "chunk_hashes", "expected a list of hex strings"),
    ("lmcache", mk("lmcache", chunk_hashes=["0xzz"]), "chunk_hashes", "expected a hex string, got '0xzz' at index 0"),
    ("lmcache", mk("lmcache", chunk_hashes=[1.5]), "chunk_hashes", "got 1.5 at index 0"),
    ("lmcache", mk("lmcache", chunk_hashes=[""]), "chunk_hashes", "expected a hex string"),
    ("lmcache", mk("lmcache", chunk_size=0), "chunk_size", ">= 1"),
    ("lmcache", mk("lmcache", chunk_size=512), "chunk_size", "512 differs from 256 (line 1)"),
    ("lmcache", mk("lmcache", seq_len=-1), "seq_len", ">= 0"),
    ("lmcache", mk("lmcache", model_name="other"), "model_name", "'other' differs from 'm' (line 1)"),
    ("lmcache", mk("lmcache", model_name=3), "model_name", "expected a string"),
    ("lmcache", mk("lmcache", request_id=["x"]), "request_id", "expected a string"),
]


@pytest.mark.parametrize("fmt, bad, field, fragment", MALFORMED, ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_malformed_line_names_file_line_and_field(tmp_path, fmt, bad, field, fragment):
    p = write_lines(tmp_path / f"{fmt}_bad.jsonl", [GOOD[fmt], "", bad, mk(fmt)])
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p, fmt=fmt)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:3: "), msg
    if field is not None:
        assert f"field '{field}'" in msg, msg
    assert fragment in msg, msg


@pytest.mark.parametrize("fmt", list(GOOD))
def test_empty_file_has_no_requests(tmp_path, fmt):
    p = tmp_path / "empty.jsonl"
    p.write_text("\n  \n")
    with pytest.raises(TraceFormatError, match="empty.jsonl: no requests"):
        load_trace(p, fmt=fmt)


def test_every_format_is_listed_and_sniffing_is_exclusive(tmp_path):
    assert FORMATS[:5] == ("auto", "mooncake", "qwen_bailian", "freeinference", "native")
    assert {"tokens", "text", "dynamo", "dynamo_request", "lmcache"} <= set(FORMATS)
    # a record two formats would claim is named as such, not read by a guess
    p = write_lines(tmp_path / "both.jsonl", [{"timestamp": 0, "token_ids": [1], "chunk_hashes": []}])
    with pytest.raises(TraceFormatError, match="formats tokens and lmcache both read records"):
        detect_format(p)
