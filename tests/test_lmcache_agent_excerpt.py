"""LMCache's agent traces as published (issue 35): the bundled excerpt of
github LMCache/lmcache-agent-trace (Apache-2.0; sim_core/data/lmcache_agent_trace/NOTICE),
loaded with format auto from its per-session directories.

The tokenizer is byte-level with no merges (one token per UTF-8 byte), built here: token
counts are then byte counts of the files' text, and a prompt that extends another as text
extends it as tokens, so every expectation below is read off the JSON text itself. The
counts of sessions and turns were checked by hand against the files (`wc -l`,
`session_id`); the block structure is checked against a model of the chain written from
the definition (a block is the prompt's bytes up to its end, docs/concepts.md), not from
the loader."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from sim_core import simulate
from sim_core.traces.loaders import DATA_DIR, detect_format, load_trace

EXCERPT = DATA_DIR / "lmcache_agent_trace"
B = 16  # the format's default block size
#: kind -> {session (file stem, = its session_id): turns}, counted by hand
SESSIONS = {
    "miniswe": {"189f0222310bd8eee310f204e91b9c84": 6, "c7d0fc25aec9ae6e509fb167782bbe54": 6,
                "ae5bc34ffaf6e553cc320e6499db0d47": 8, "39f322b016f240b738243a425ddd8049": 9,
                "8f7920a28c54ae83dadb6d0a8e6cbd74": 9},
    "magagent": {"e58895aeb237c2865519206612cf0c6c": 11, "b3112192e97ece204f20522004f80497": 10,
                 "7b6b48424cd770dd7ccc1535fe6468a2": 13},
}
#: kind -> UTF-8 bytes of all `input` texts (= prompt tokens under the byte tokenizer)
PROMPT_BYTES = {"miniswe": 344_998, "magagent": 133_172}


@pytest.fixture(scope="module")
def byte_tokenizer(tmp_path_factory) -> Path:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def records(kind: str) -> list[dict]:
    """The files' records in arrival order (the files are not: records are written as calls end)."""
    rows = [json.loads(line) for f in sorted((EXCERPT / kind).glob("*.jsonl")) for line in f.open()]
    return sorted(rows, key=lambda r: r["timestamp"])


def request_blocks(t, r: int) -> list[int]:
    return t.blocks[t.req_offsets[r]:t.req_offsets[r + 1]].tolist()


def test_excerpt_is_small_and_attributed():
    files = [p for p in EXCERPT.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    notice = (EXCERPT / "NOTICE").read_text()
    for needed in ("LMCache/lmcache-agent-trace", "16a14adaad43e1a7213f17277726e0abb66ece11",
                   "Apache License, Version 2.0"):
        assert needed in notice
    for kind, sessions in SESSIONS.items():
        stems = {p.name.split(".")[0] for p in (EXCERPT / kind).glob("*.jsonl")}
        assert stems == set(sessions)
        for stem in sessions:
            assert stem in notice


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_sessions_and_turns_as_the_files_say(kind, byte_tokenizer):
    d = EXCERPT / kind
    assert detect_format(d) == "lmcache_agent"
    t = load_trace(d, tokenizer=byte_tokenizer)  # fmt auto
    rows = records(kind)
    assert t.meta["loader"] == "lmcache_agent" and t.block_tokens == B
    assert t.meta["time"]["unit"] == "us" and t.meta["time"]["absolute"]
    assert t.n_requests == sum(SESSIONS[kind].values()) == len(rows)
    assert t.meta["sessions"] == t.meta["files"] == len(SESSIONS[kind])
    assert int(t.input_tokens.sum()) == PROMPT_BYTES[kind] == sum(len(r["input"].encode()) for r in rows)
    assert t.output_tokens.tolist() == [len(r["output"].encode()) for r in rows]
    # arrivals: µs from the first, in order; sessions numbered by first appearance in the files
    assert t.arrival_s.tolist() == pytest.approx([(r["timestamp"] - rows[0]["timestamp"]) / 1e6 for r in rows])
    turns: dict[int, int] = {}
    owner: dict[int, str] = {}
    for s, r in zip(t.session.tolist(), rows):
        turns[s] = turns.get(s, 0) + 1
        assert owner.setdefault(s, r["session_id"]) == r["session_id"]  # one trace session, one file session
    assert {owner[s]: n for s, n in turns.items()} == SESSIONS[kind]


@pytest.mark.parametrize("kind", list(SESSIONS))
def test_blocks_are_the_prompts_chained_prefixes(kind, byte_tokenizer):
    """Block k of a prompt of n bytes is its bytes [0, min((k+1)B, n)): two accesses are
    the same block exactly when those prefixes are equal (the partial last block is a
    prefix of a length no full block has)."""
    t = load_trace(EXCERPT / kind, tokenizer=byte_tokenizer)
    ids: dict[bytes, int] = {}
    for r, row in enumerate(records(kind)):
        text = row["input"].encode()
        want = [ids.setdefault(text[:min((k + 1) * B, len(text))], len(ids)) for k in range(-(-len(text) // B))]
        assert request_blocks(t, r) == want  # dense ids by first appearance, as the loader numbers them


def test_each_miniswe_turn_extends_the_last_and_its_leading_blocks_hit(byte_tokenizer):
    t = load_trace(EXCERPT / "miniswe", tokenizer=byte_tokenizer)
    rows = records("miniswe")
    last: dict[str, int] = {}
    extended = 0
    for r, row in enumerate(rows):
        p = last.get(row["session_id"])
        if p is not None:
            prev, cur = rows[p]["input"].encode(), row["input"].encode()
            assert cur.startswith(prev) and len(cur) > len(prev)  # mini-swe-agent appends to its history
            full = len(prev) // B
            assert request_blocks(t, r)[:full] == request_blocks(t, p)[:full]
            assert request_blocks(t, r)[full] not in request_blocks(t, p)  # the block that grew is new
            extended += 1
        last[row["session_id"]] = r
    assert extended == 38 - 5  # every turn but each session's first
    # an unbounded cache under prefix hits: each request reuses its longest prefix (in whole
    # blocks, or all of an identical earlier prompt) seen before, counted from the text
    seen: set[bytes] = set()
    hits = 0
    for row in rows:
        text = row["input"].encode()
        prefixes = [text[:min((k + 1) * B, len(text))] for k in range(-(-len(text) // B))]
        for pre in prefixes:
            if pre not in seen:
                break
            hits += 1
        seen.update(prefixes)
    res = simulate(t, "lru", [t.n_accesses], hits="prefix", partial_blocks="cache")[0]
    assert res.hits == hits and res.accesses == t.n_accesses
    assert hits > 0.8 * t.n_accesses  # the history is most of every prompt


def test_the_checkout_root_names_its_agent_kinds(byte_tokenizer):
    with pytest.raises(IsADirectoryError, match="its subdirectories magagent, miniswe hold some: load one of them"):
        load_trace(EXCERPT, tokenizer=byte_tokenizer)
