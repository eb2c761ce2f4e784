"""Fuzz every registered loader: any bytes give a valid Trace or a TraceFormatError whose
message starts with the file's path (and, for a bad record, its line), never another
exception. Inputs: raw bytes, a valid record of the format with one field replaced by
any JSON value or removed, lines cut short, and (native) a saved trace with bytes
damaged."""
from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim_core.traces.loaders import REGISTRY, TraceFormatError, detect_format, load_trace
from sim_core.traces.trace import Trace

SAMPLES = {
    "mooncake": {"timestamp": 1, "input_length": 16, "output_length": 1, "hash_ids": [1, 2]},
    "qwen_bailian": {"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 16,
                     "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1]},
    "freeinference": {"session_id": "s", "requests": [{"start_ms": 1, "block_ids": [1], "tool_calls": [
        {"name": "task", "subagent": {"session_id": "t", "requests": [{"start_ms": 2, "block_ids": [1, 2]}]}}]}]},
    "tokens": {"timestamp": 1.0, "token_ids": [1, 2, 3], "session_id": "a", "output_length": 2},
    "text": {"timestamp_ms": 10, "prompt": "the cache", "session_id": 1, "output_length": 2},
    "dynamo": {"request_id": "b", "session_id": "s", "timestamp": 0, "delay": 0, "input_length": 3,
               "output_length": 1, "hash_ids": [1], "wait_for": [], "branches": ["c"], "tool_wait_ms": 5},
    "dynamo_request": {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 5,
                       "agent_context": {"session_id": "r"},
                       "request": {"request_id": "x", "request_received_ms": 1, "output_tokens": 1,
                                   "replay": {"trace_block_size": 2, "input_length": 3,
                                              "input_sequence_hashes": [1, 2]}}},
    "lmcache": {"timestamp": 1.0, "request_id": "r", "model_name": "m", "chunk_size": 4, "seq_len": 8,
                "chunk_hashes": ["0xab", "0xcd"]},
    "lmcache_agent": {"timestamp": "1760428436442742", "input": "the cache", "output": "holds", "session_id": "s"},
    "kvcache_tester": {"id": "c", "block_size": 2, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "type": "n", "in": 3, "out": 1, "hash_ids": [1], "think_time": 0.5},
        {"t": 1.0, "type": "subagent", "requests": [{"t": 0.5, "in": 4, "hash_ids": [1, 2]}]}]},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


def _paths(obj, prefix=()):
    """Every (path of keys/indices) inside a JSON value, for a mutation to pick."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_record(draw, fmt):
    rec = json.loads(json.dumps(SAMPLES[fmt]))
    paths = [p for p in _paths(rec) if p]
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(paths))
        node = rec
        try:
            for part in path[:-1]:
                node = node[part]
            if draw(st.booleans()) and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = draw(json_values)
        except (KeyError, IndexError, TypeError):  # an earlier mutation changed the shape
            pass
    return json.dumps(rec, allow_nan=True)


@st.composite
def jsonl_bytes(draw, fmt):
    kind = draw(st.sampled_from(["raw", "records", "records", "records"]))
    if kind == "raw":
        return draw(st.binary(max_size=200))
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        line = draw(st.one_of(mutated_record(fmt), st.just(json.dumps(SAMPLES[fmt]))))
        if draw(st.integers(0, 5)) == 0:
            line = line[: draw(st.integers(0, len(line)))]
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


_TOKENIZER: list[Path] = []


def tokenizer_path(tmp: Path) -> Path:
    if not _TOKENIZER:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(["the cache holds blocks"], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
        path = tmp / "tokenizer.json"
        tok.save(str(path))
        _TOKENIZER.append(path)
    return _TOKENIZER[0]


def check(path: Path, call) -> None:
    try:
        trace = call()
    except TraceFormatError as e:
        msg = str(e)
        assert msg.startswith(str(path)), msg
        # a directory's error names the file inside it
        assert re.match(re.escape(str(path)) + r"(/[^/:]+)?(:\d+: |: )", msg), msg
    else:
        assert isinstance(trace, Trace)


JSONL = [name for name in REGISTRY if name != "native"]
assert set(JSONL) == set(SAMPLES), "every JSONL format needs a fuzz sample"
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("fmt", JSONL)
@FUZZ
@given(data=st.data())
def test_jsonl_loader_fuzz(tmp_path, fmt, data):
    content = data.draw(jsonl_bytes(fmt))
    path = tmp_path / f"{fmt}.jsonl"
    path.write_bytes(content)
    kw = {"tokenizer": tokenizer_path(tmp_path)} if fmt in ("text", "lmcache_agent") else {}
    check(path, lambda: load_trace(path, fmt=fmt, **kw))


DIRECTORIES = [name for name, f in REGISTRY.items() if f.directories]


@pytest.mark.parametrize("fmt", DIRECTORIES)
@FUZZ
@given(data=st.data())
def test_directory_loader_fuzz(tmp_path_factory, fmt, data):
    d = tmp_path_factory.mktemp("dir")
    for i in range(data.draw(st.integers(1, 3))):
        (d / f"s{i}.jsonl").write_bytes(data.draw(jsonl_bytes(fmt)))
    kw = {"tokenizer": tokenizer_path(tmp_path_factory.mktemp("tok"))} if fmt == "lmcache_agent" else {}
    check(d, lambda: load_trace(d, fmt=fmt, **kw))


@FUZZ
@given(content=jsonl_bytes("mooncake") | jsonl_bytes("lmcache") | st.binary(max_size=120))
def test_gzip_and_detection_fuzz(tmp_path, content):
    import gzip

    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(content)[: max(10, len(content))])  # often cut short
    check(path, lambda: load_trace(path, fmt="mooncake"))
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(content)
    try:
        assert detect_format(plain) in REGISTRY
    except TraceFormatError as e:
        assert str(e).startswith(str(plain))


@FUZZ
@given(cut=st.integers(0, 4000), flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), max_size=4),
       raw=st.binary(max_size=64))
@example(cut=2606, flips=[(2118, 1)], raw=b"")  # a member's flag byte marks it encrypted
def test_native_loader_fuzz(tmp_path, cut, flips, raw):
    buf = io.BytesIO()
    Trace.from_requests([[1, 2, 3], [1, 2], [4]], name="f", source="real").save(tmp_path / "ok.npz")
    data = bytearray((tmp_path / "ok.npz").read_bytes())
    for pos, byte in flips:
        if pos < len(data):
            data[pos] = byte
    buf.write(bytes(data[: max(cut, 0)]) if cut < len(data) else bytes(data))
    path = tmp_path / "fuzz.npz"
    path.write_bytes(buf.getvalue() if raw[:1] != b"\x00" else raw)
    check(path, lambda: load_trace(path, fmt="native"))


@pytest.mark.parametrize("fmt", JSONL)
def test_each_sample_is_sniffed_as_its_own_format(tmp_path, fmt):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(SAMPLES[fmt]) + "\n")
    assert detect_format(path) == fmt
