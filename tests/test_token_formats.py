"""Token-level formats (tokens, text): block hashes equal a brute-force chained hash
written here independently, and blocks are shared exactly where token prefixes are."""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core.traces.loaders import TraceFormatError, detect_format, load_text, load_tokens, load_trace


def write_lines(path: Path, lines) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def brute_force_ids(tokens: list[int], block: int) -> list[int]:
    """The documented chain, spelled out token by token: digest_k = sha256(digest_{k-1} ||
    int64-LE token ids of block k), the first parent sha256(b"sim_core.traces.loaders.token_records");
    a block's id = its digest's first 8 bytes as a signed little-endian int64."""
    parent = hashlib.sha256(b"sim_core.traces.loaders.token_records").digest()
    out = []
    for start in range(0, len(tokens), block):
        h = hashlib.sha256()
        h.update(parent)
        for tok in tokens[start:start + block]:
            h.update(struct.pack("<q", tok))
        parent = h.digest()
        out.append(struct.unpack("<q", parent[:8])[0])
    return out


def hashes_of(trace, r: int) -> list[int]:
    """The source hash (int64) of each block of request r."""
    ids = trace.source_ids.view(np.int64)
    return [int(ids[b]) for b in trace.request_blocks(r)]


PROMPTS = [
    {"timestamp": 2.0, "token_ids": list(range(40)), "session_id": "a", "output_length": 7},
    {"timestamp": 1.0, "token_ids": list(range(32)), "session_id": 3},
    {"timestamp_ms": 1500, "token_ids": list(range(16)) + [99] * 5},
    {"timestamp": 3.0, "token_ids": [], "session_id": "a"},
]


def test_tokens_hash_equals_brute_force_and_fields(tmp_path):
    p = write_lines(tmp_path / "tok.jsonl", PROMPTS)
    t = load_tokens(p)
    assert t.block_tokens == 16 and t.meta["loader"] == "tokens" and detect_format(p) == "tokens"
    # by arrival: 1.0 (32 tokens), 1.5 (21), 2.0 (40), 3.0 (0)
    assert t.arrival_s.tolist() == [1.0, 1.5, 2.0, 3.0]
    assert t.input_tokens.tolist() == [32, 21, 40, 0]
    assert t.request_lengths.tolist() == [2, 2, 3, 0]  # partial last blocks kept
    assert t.session.tolist() == [1, -1, 0, 0]  # "a" first in the file, then 3
    assert t.output_tokens.tolist() == [0, 0, 7, 0]
    for r, line in enumerate([PROMPTS[1], PROMPTS[2], PROMPTS[0], PROMPTS[3]]):
        assert hashes_of(t, r) == brute_force_ids(line["token_ids"], 16)
    # shared 16-token prefix: the first block of all three non-empty requests is one block
    assert t.request_blocks(0)[0] == t.request_blocks(1)[0] == t.request_blocks(2)[0]
    # [16..31] full block vs [99]*5 partial: different
    assert t.request_blocks(0)[1] != t.request_blocks(1)[1]
    assert t.meta["partial_last_blocks"] == 2  # 21 and 40 tokens


@pytest.mark.parametrize("block", [1, 4, 64, 512])
def test_any_block_size(tmp_path, block):
    p = write_lines(tmp_path / "tok.jsonl", PROMPTS)
    t = load_trace(p, block_tokens=block)
    assert t.block_tokens == block
    order = [PROMPTS[1], PROMPTS[2], PROMPTS[0], PROMPTS[3]]
    for r, line in enumerate(order):
        assert hashes_of(t, r) == brute_force_ids(line["token_ids"], block)


@settings(max_examples=60, deadline=None)
@given(reqs=st.lists(st.lists(st.integers(0, 2), max_size=20), min_size=1, max_size=6),
       block=st.sampled_from([1, 2, 3, 5]))
def test_blocks_shared_exactly_where_token_prefixes_are(tmp_path_factory, reqs, block):
    p = write_lines(tmp_path_factory.mktemp("tok") / "t.jsonl",
                    [{"timestamp": i, "token_ids": toks} for i, toks in enumerate(reqs)])
    t = load_tokens(p, block_tokens=block)
    keys = [tuple(toks[:min(len(toks), (k + 1) * block)]) for toks in reqs for k in range(-(-len(toks) // block))]
    ids = t.blocks.tolist()
    assert len(ids) == len(keys)
    for i in range(len(ids)):
        for j in range(len(ids)):
            assert (ids[i] == ids[j]) == (keys[i] == keys[j])


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A WordLevel tokenizer trained here on a few strings and saved as tokenizer.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    corpus = ["the cache holds blocks", "the engine evicts the oldest block", "prefix reuse saves compute"]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_text_tokenizes_then_hashes_like_tokens(tmp_path, tokenizer_file):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    prompts = ["the cache holds blocks the engine evicts the oldest block",
               "the cache holds blocks prefix reuse", "unseen words here"]
    p = write_lines(tmp_path / "text.jsonl", [{"timestamp": i, "prompt": s, "session_id": "x"}
                                              for i, s in enumerate(prompts)])
    assert detect_format(p) == "text"
    t = load_trace(p, tokenizer=str(tokenizer_file), block_tokens=4)
    assert t.block_tokens == 4 and t.meta["loader"] == "text" and t.meta["tokenizer"] == str(tokenizer_file)
    for r, s in enumerate(prompts):
        ids = tok.encode(s).ids
        assert t.input_tokens[r] == len(ids) and hashes_of(t, r) == brute_force_ids(ids, 4)
    assert t.request_blocks(0)[0] == t.request_blocks(1)[0]  # "the cache holds blocks"
    assert t.session.tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="needs a tokenizer file"):
        load_text(p)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="bad.json: not a tokenizers file"):
        load_text(p, tokenizer=bad)
    with pytest.raises(FileNotFoundError):
        load_text(p, tokenizer=tmp_path / "missing.json")


MALFORMED = [
    ("tokens", {"token_ids": [1]}, "timestamp", "missing required field"),
    ("tokens", {"timestamp": 1, "timestamp_ms": 1000, "token_ids": [1]}, "timestamp", "not both"),
    ("tokens", {"timestamp": "x", "token_ids": [1]}, "timestamp", "expected a number"),
    ("tokens", {"timestamp_ms": None, "timestamp": None, "token_ids": [1]}, "timestamp", "missing"),
    ("tokens", {"timestamp": 1}, "token_ids", "missing required field"),
    ("tokens", {"timestamp": 1, "token_ids": "abc"}, "token_ids", "expected a list of token ids"),
    ("tokens", {"timestamp": 1, "token_ids": [1, -2]}, "token_ids", "must be >= 0, got -2 at index 1"),
    ("tokens", {"timestamp": 1, "token_ids": [1, 2.5]}, "token_ids", "got 2.5 at index 1"),
    ("tokens", {"timestamp": 1, "token_ids": [True]}, "token_ids", "got True at index 0"),
    ("tokens", {"timestamp": 1, "token_ids": [2**70]}, "token_ids", "not in 0..2^63-1"),
    ("tokens", {"timestamp": 1, "token_ids": [[1]]}, "token_ids", "at index 0"),
    ("tokens", {"timestamp": 1, "token_ids": [1], "session_id": [1]}, "session_id", "string or integer"),
    ("tokens", {"timestamp": 1, "token_ids": [1], "output_length": -1}, "output_length", ">= 0"),
    ("text", {"timestamp": 1}, "prompt", "missing required field"),
    ("text", {"timestamp": 1, "prompt": 5}, "prompt", "expected a string"),
]


@pytest.mark.parametrize("fmt, bad, field, fragment", MALFORMED, ids=[f"{m[0]}-{i}" for i, m in enumerate(MALFORMED)])
def test_malformed_line_names_file_line_and_field(tmp_path, tokenizer_file, fmt, bad, field, fragment):
    good = {"timestamp": 0, "token_ids": [1, 2]} if fmt == "tokens" else {"timestamp": 0, "prompt": "the cache"}
    p = write_lines(tmp_path / f"{fmt}_bad.jsonl", [good, "", bad, good])
    kw = {"tokenizer": tokenizer_file} if fmt == "text" else {}
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p, fmt=fmt, **kw)
    msg = str(ei.value)
    assert msg.startswith(f"{p}:3: field '{field}'"), msg
    assert fragment in msg, msg
