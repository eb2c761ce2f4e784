"""Traces as they were recorded (issue 35): timestamps in any unit and representation,
block sizes the file's token counts show, ids that are not prefix-chained. Every
expectation is derived by hand from the hand-written file, or by a brute-force trie."""
from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest

from sim_core import simulate
from sim_core.traces.loaders import load_trace

LOG = "sim_core.traces.loaders"


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def chained(n_req: int, seed: int = 0) -> list[list[int]]:
    """Requests that extend earlier ones, with prefix-chained ids (a dict over prefixes)."""
    rng = random.Random(seed)
    ids: dict[tuple, int] = {}
    reqs: list[list[int]] = []
    for _ in range(n_req):
        base = list(rng.choice(reqs)[: rng.randint(0, 4)]) if reqs and rng.random() < 0.7 else []
        toks = [ids.setdefault(tuple(base[:k + 1]), len(ids) + 100) for k in range(len(base))]
        prefix = tuple(base)
        for _ in range(rng.randint(1, 4)):
            prefix = prefix + (rng.randint(0, 3),)
            toks.append(ids.setdefault(prefix, len(ids) + 100))
        reqs.append(toks)
    return reqs


# ------------------------------------------------------------------ timestamps
@pytest.mark.parametrize("stamps, unit, expect", [
    ([0, 1500, 3000], "ms", [0.0, 1.5, 3.0]),                                      # Mooncake's own: relative ms
    (["0", "1500", "3000.5"], "ms", [0.0, 1.5, 3.0005]),                           # numeric strings
    ([1753694362.0, 1753694363.5, 1753694365.0], "s", [0.0, 1.5, 3.0]),            # Unix seconds
    ([1753694362000, 1753694363500, 1753694365000], "ms", [0.0, 1.5, 3.0]),         # Unix ms
    ([1753694362000000, 1753694363500000, 1753694365000000], "us", [0.0, 1.5, 3.0]),  # Unix µs
    (["1753694362340138614", "1753694363840138614", "1753694365340138614"], "ns", [0.0, 1.5, 3.0]),  # ns strings
])
def test_timestamp_units_and_representations(tmp_path, stamps, unit, expect):
    rows = [{"timestamp": ts, "input_length": 512, "hash_ids": [i]} for i, ts in enumerate(stamps)]
    t = load_trace(write(tmp_path / "t.jsonl", rows))
    assert t.meta["time"]["unit"] == unit
    assert t.arrival_s.tolist() == pytest.approx(expect, abs=1e-6)


def test_time_unit_override_and_seconds_format(tmp_path):
    rows = [{"timestamp": ts, "input_length": 512, "hash_ids": [i]} for i, ts in enumerate([0, 2_000_000])]
    p = write(tmp_path / "t.jsonl", rows)
    assert load_trace(p).arrival_s.tolist() == [0.0, 2000.0]                  # Mooncake: ms
    assert load_trace(p, time_unit="us").arrival_s.tolist() == [0.0, 2.0]     # as the user says
    assert load_trace(p, time_unit="µs").meta["time"]["why"] == "trace.time_unit"
    q = write(tmp_path / "q.jsonl", [{"chat_id": i, "timestamp": ts, "hash_ids": [i]} for i, ts in enumerate([0, 61.25])])
    assert load_trace(q).arrival_s.tolist() == [0.0, 61.25]                   # Qwen Bailian: s


def test_us_read_as_seconds_warns_with_the_unit(tmp_path, caplog):
    # 180 s of traffic written in µs, in a format whose unit is the second: 5.7 years
    rows = [{"chat_id": i, "timestamp": i * 1.8e8 / 9, "hash_ids": [i]} for i in range(10)]
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(write(tmp_path / "q.jsonl", rows))
    assert t.arrival_s[-1] == pytest.approx(1.8e8)
    msg = " ".join(r.getMessage() for r in caplog.records)
    assert "read in s span 5.7 years" in msg and "trace.time_unit" in msg


def test_short_span_for_many_requests_warns(tmp_path, caplog):
    # 1e-4 ms in total: under a second in ms and in every coarser unit (so no unit is plausible)
    rows = [{"timestamp": i * 1e-7, "input_length": 512, "hash_ids": [i]} for i in range(1001)]
    with caplog.at_level(logging.WARNING, LOG):
        load_trace(write(tmp_path / "t.jsonl", rows))
    assert any("read in ms span" in r.getMessage() and "1001 requests" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, LOG):
        load_trace(write(tmp_path / "u.jsonl", rows[:1000]))
    assert not [r for r in caplog.records if "span" in r.getMessage()]


# Relative stamps (the first near 0): the unit from the span. 3,001 requests; read in the
# format's unit each file is implausible (a year or more, a request every 20 minutes, or
# 3,001 requests inside a second), read in the unit it was written in it is plausible.
@pytest.mark.parametrize("fmt_row, step, unit, last_s", [
    ("mooncake", 1_200_000, "us", 3600.0),            # µs in a ms format: 41.7 days in ms, 1 h in µs
    ("mooncake", 1_200_000_000, "ns", 3600.0),        # ns in ms: 114 years; in µs 41.7 days; in ns 1 h
    ("mooncake", 0.2, "s", 600.0),                    # s in ms: 0.6 s for 3,001 requests; in s 10 min
    ("mooncake", 1200, "ms", 3600.0),                 # the format's own unit, plausible: kept
    ("qwen", 1200, "ms", 3600.0),                     # ms in a s format: 41.7 days in s, 1 h in ms
    ("qwen", 1.2, "s", 3600.0),                       # the format's own
])
def test_relative_timestamps_unit_from_the_span(tmp_path, caplog, fmt_row, step, unit, last_s):
    def row(i):
        ts = i * step
        if fmt_row == "qwen":
            return {"chat_id": i, "timestamp": ts, "hash_ids": [i]}
        return {"timestamp": str(ts) if unit == "ns" else ts, "input_length": 512, "hash_ids": [i]}

    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(write(tmp_path / "t.jsonl", [row(i) for i in range(3001)]))
    assert t.meta["time"]["unit"] == unit and t.meta["time"]["absolute"] is False
    assert t.arrival_s[0] == 0.0 and t.arrival_s[-1] == pytest.approx(last_s)
    own = {"mooncake": "ms", "qwen": "s"}[fmt_row]
    changed = [r.getMessage() for r in caplog.records if "not the format's" in r.getMessage()]
    assert bool(changed) == (unit != own)
    if unit != own:
        assert f"read in {unit}, not the format's {own}" in changed[0] and "by the span" in changed[0]
    assert "span_warning" not in t.meta["time"]


def test_relative_span_needs_many_requests_and_yields_to_the_override(tmp_path):
    rows = [{"timestamp": i * 1_200_000, "input_length": 512, "hash_ids": [i]} for i in range(1001)]
    p = write(tmp_path / "t.jsonl", rows)
    assert load_trace(p).meta["time"]["unit"] == "us"                    # 1,001 requests: judged
    q = write(tmp_path / "q.jsonl", rows[:1000])                        # 1,000: the format's unit
    assert load_trace(q).meta["time"]["unit"] == "ms" and load_trace(q).arrival_s[-1] == pytest.approx(999 * 1200.0)
    t = load_trace(p, time_unit="ms")                                   # the user's word wins
    assert t.meta["time"]["why"] == "trace.time_unit" and t.arrival_s[-1] == pytest.approx(1_200_000.0)


def test_relative_span_plausible_in_no_unit_keeps_the_format_and_warns(tmp_path, caplog):
    # 3,001 requests within 3 ns in a ms format: too short in every coarser unit too
    rows = [{"timestamp": i * 1e-6, "input_length": 512, "hash_ids": [i]} for i in range(3001)]
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(write(tmp_path / "t.jsonl", rows))
    assert t.meta["time"]["unit"] == "ms" and "3001 requests" in t.meta["time"]["span_warning"]


# ------------------------------------------------------------------ block size
def sized_rows(block: int, n_req: int = 40, seed: int = 1):
    """Mooncake rows written at `block` tokens a hash: n hashes for (n-1)*block < length <= n*block."""
    rng = random.Random(seed)
    rows, next_id = [], 0
    for i in range(n_req):
        n = rng.randint(2, 60)
        rows.append({"timestamp": i, "input_length": (n - 1) * block + rng.randint(1, block),
                     "hash_ids": list(range(next_id, next_id + n))})
        next_id += n
    return rows


def per_hash_rows(tokens_per_hash: float, n_req: int = 40, seed: int = 1):
    """Rows whose hashes cover about `tokens_per_hash` tokens each, at no usual size."""
    rows = sized_rows(512, n_req, seed)
    for r in rows:
        r["input_length"] = round(len(r["hash_ids"]) * tokens_per_hash)
    return rows


@pytest.mark.parametrize("block", [16, 32, 64, 256])
def test_block_size_inferred_from_input_lengths(tmp_path, caplog, block):
    rows = sized_rows(block)
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(write(tmp_path / "t.jsonl", rows))
    assert t.block_tokens == block and t.meta["block_size"]["contradicting"] == 0
    assert t.input_tokens.tolist() == [r["input_length"] for r in rows]
    assert [r.getMessage() for r in caplog.records if "read as" in r.getMessage()] == [
        f"{tmp_path / 't.jsonl'}: hashes cover about {t.meta['block_size']['median_tokens_per_hash']:.1f} tokens "
        f"each, not 512 (40 of 40 requests contradict 512-token blocks): read as {block}-token blocks; "
        f"trace.file_block_tokens sets the size"]


def test_the_34_token_trace_counts_its_own_tokens(tmp_path, caplog):
    rows = per_hash_rows(34)  # the production trace of issue 35: about 34 tokens a hash, 512 documented
    p = write(tmp_path / "t.jsonl", rows)
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(p)
    assert t.block_tokens == 32 and t.meta["block_size"]["why"] == "inferred from input lengths"
    # at 32 tokens a hash the lengths (about 34 per hash) run past the blocks: counted, said, kept
    longer = sum(r["input_length"] > 32 * len(r["hash_ids"]) for r in rows)
    assert t.meta["block_size"]["longer_than_blocks"] == longer > 0
    assert any(f"({longer} longer than their blocks)" in r.getMessage() for r in caplog.records)
    res = simulate(t, "lru", [10_000])[0]
    assert res.prompt_tokens == sum(r["input_length"] for r in rows)
    # the user's size wins, for every hash format
    assert load_trace(p, file_block_tokens=64).block_tokens == 64


def test_consistent_file_keeps_its_size_without_a_word(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(write(tmp_path / "t.jsonl", sized_rows(512)))
    assert t.block_tokens == 512 and t.meta["block_size"]["contradicting"] == 0
    assert not caplog.records


# ------------------------------------------------------------------ chaining
def brute_force_dense(reqs: list[list[int]]) -> list[int]:
    """Each access named by its request's whole id prefix, numbered by first appearance."""
    names: dict[tuple, int] = {}
    return [names.setdefault(tuple(r[: j + 1]), len(names)) for r in reqs for j in range(len(r))]


@pytest.mark.parametrize("seed", range(5))
def test_rechaining_equals_a_brute_force_trie(tmp_path, caplog, seed):
    rng = random.Random(seed)
    reqs = [[rng.randint(0, 5) for _ in range(rng.randint(1, 6))] for _ in range(30)]  # ids reused anywhere
    rows = [{"timestamp": i, "hash_ids": r} for i, r in enumerate(reqs)]
    p = write(tmp_path / "t.jsonl", rows)
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(p)
    assert t.blocks.tolist() == brute_force_dense(reqs)
    # the counts the warning gives, by brute force
    preds, depths = {}, {}
    for r in reqs:
        for j, h in enumerate(r):
            preds.setdefault(h, set()).add(r[j - 1] if j else None)
            depths.setdefault(h, set()).add(j)
    several = sum(len(v) > 1 for v in preds.values())
    assert t.meta["chaining"]["ids_after_several_prefixes"] == several
    assert t.meta["chaining"]["ids_at_several_depths"] == sum(len(v) > 1 for v in depths.values())
    assert f"{several} ids follow more than one predecessor" in caplog.text
    assert load_trace(p, rechain=None).blocks.tolist() == t.blocks.tolist()  # None: the default
    raw = load_trace(p, rechain=False)  # the file's ids as they are
    assert raw.blocks.tolist() == brute_force_dense([[h] for r in reqs for h in r])


def test_chained_trace_is_unchanged(tmp_path, caplog):
    reqs = chained(40)
    p = write(tmp_path / "t.jsonl", [{"timestamp": i, "hash_ids": r} for i, r in enumerate(reqs)])
    with caplog.at_level(logging.WARNING, LOG):
        t = load_trace(p)
    raw = load_trace(p, rechain=False)
    assert t.blocks.tolist() == raw.blocks.tolist() == brute_force_dense(reqs)
    assert t.source_ids.tolist() == raw.source_ids.tolist() and t.meta["chaining"] == {"chained": True}
    assert not caplog.records


def test_rechaining_lowers_a_hit_no_cache_can_serve(tmp_path):
    # id 7 after [1] and after [2]: block mode counts the second as a hit on the raw ids
    p = write(tmp_path / "t.jsonl", [{"timestamp": 0, "hash_ids": [1, 7]}, {"timestamp": 1, "hash_ids": [2, 7]}])
    assert simulate(load_trace(p, rechain=False), "lru", [10])[0].hits == 1
    assert simulate(load_trace(p), "lru", [10])[0].hits == 0
    assert np.array_equal(load_trace(p).request_lengths, [2, 2])


def test_trace_config_keys(tmp_path):
    from sim_core.config_checks import ConfigError
    from sim_core.traces.config import load

    p = write(tmp_path / "t.jsonl", [{"timestamp": 0, "hash_ids": [1, 7]}, {"timestamp": 2_000_000, "hash_ids": [2, 7]}])
    base = {"path": str(p), "format": "auto", "sessions": "given"}
    t = load({**base, "time_unit": "us", "rechain": False, "file_block_tokens": 16}, "file")
    assert t.arrival_s.tolist() == [0.0, 2.0] and t.block_tokens == 16 and t.n_unique == 3
    assert load({**base, "rechain": None}, "file").n_unique == 4  # null = re-chained
    for key, bad, what in (("time_unit", "minutes", "one of s, ms, us, ns"), ("rechain", "no", "true or false")):
        with pytest.raises(ConfigError, match=f"trace.{key} must be {what}"):
            load({**base, key: bad}, "file")
