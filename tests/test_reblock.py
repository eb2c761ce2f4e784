"""sim_core.traces.reblock: coarse blocks are shared exactly where all their fine blocks are.

Expected ids come from hand-computed tiny traces and from a brute-force definition
(a coarse block is the tuple of the request's whole fine prefix up to its end), never
from the code under test.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_core import Trace, reblock
from sim_core.traces.loaders import bundled_path, load_trace


def chained(requests_tokens):
    """Fine block ids that are prefix-chained: one id per distinct prefix of contents."""
    ids: dict[tuple, int] = {}
    return [[ids.setdefault(tuple(req[: j + 1]), len(ids)) for j in range(len(req))] for req in requests_tokens]


def coarse_keys(fine_requests, m):
    """Brute force: coarse block k of a request = its fine prefix up to the chunk's end."""
    return [[tuple(req[: min(len(req), (k + 1) * m)]) for k in range(-(-len(req) // m))] for req in fine_requests]


def test_hand_computed_16_to_32():
    # fine: A = a b c d e, B = a b c (partial chunk [c]), C = a b c d, D = x
    t = Trace.from_requests([[1, 2, 3, 4, 5], [1, 2, 3], [1, 2, 3, 4], [9]], block_tokens=16,
                            input_tokens=[80, 40, 64, 10], arrival_s=[0, 1, 2, 3], session=[0, 0, 1, -1])
    r = reblock(t, 32)
    assert r.block_tokens == 32 and r.request_lengths.tolist() == [3, 2, 2, 1]
    # coarse: A = [ab][cd][e], B = [ab][c], C = [ab][cd], D = [x]: [c] is partial, not [cd]
    assert r.blocks.tolist() == [0, 1, 2, 0, 3, 0, 1, 4]
    assert r.input_tokens.tolist() == [80, 40, 64, 10]  # unchanged
    assert r.arrival_s.tolist() == [0, 1, 2, 3] and r.session.tolist() == [0, 0, 1, -1]
    assert r.meta["reblocked_from"] == 16 and r.source_ids is None
    assert reblock(t, 16) is t


def test_partial_chunk_never_equals_a_full_chunk_at_another_depth():
    # non-chained fine ids: the same id 7 ends a partial chunk in one request and a full one in another
    t = Trace.from_requests([[7], [5, 7]], block_tokens=16)
    r = reblock(t, 32)
    assert r.blocks.tolist() == [0, 1]


@pytest.mark.parametrize("target", [24, 12, 0, -32, 2.0, True])  # 8 divides 16: a split (below)
def test_non_multiple_is_refused(target):
    t = Trace.from_requests([[1, 2]], block_tokens=16)
    with pytest.raises(ValueError, match="re-block|integer"):
        reblock(t, target)


def test_sample_is_refused():
    t = Trace.from_requests([[1, 2]], block_tokens=16)
    with pytest.raises(ValueError, match="before sampling"):
        reblock(t.tail_first_view(), 32)


@settings(max_examples=60, deadline=None)
@given(reqs=st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=14), min_size=1, max_size=8),
       m=st.sampled_from([2, 3, 4, 32]), chain=st.booleans())
def test_coarse_blocks_shared_exactly_where_fine_prefixes_are(reqs, m, chain):
    fine = chained(reqs) if chain else reqs  # unchained: raw small ids, repeated at any depth
    t = Trace.from_requests(fine, block_tokens=16)
    r = reblock(t, 16 * m)
    keys = coarse_keys([t.request_blocks(i).tolist() for i in range(t.n_requests)], m)
    got = [r.request_blocks(i).tolist() for i in range(r.n_requests)]
    assert [len(g) for g in got] == [len(k) for k in keys]
    flat_ids = [x for g in got for x in g]
    flat_keys = [k for ks in keys for k in ks]
    for i in range(len(flat_ids)):
        for j in range(len(flat_ids)):
            assert (flat_ids[i] == flat_ids[j]) == (flat_keys[i] == flat_keys[j])
    # so requests sharing their first k fine blocks share at least floor(k / m) coarse blocks
    for a in range(len(fine)):
        for b in range(len(fine)):
            k = 0
            while k < min(len(fine[a]), len(fine[b])) and fine[a][k] == fine[b][k]:
                k += 1
            common = 0
            while common < min(len(got[a]), len(got[b])) and got[a][common] == got[b][common]:
                common += 1
            assert common >= k // m


def test_bundled_mooncake_reblocked_on_load():
    fine = load_trace(bundled_path("mooncake_conversation"))
    coarse = load_trace(bundled_path("mooncake_conversation"), block_tokens=1024)
    assert coarse.block_tokens == 1024 and coarse.n_requests == fine.n_requests
    assert coarse.request_lengths.tolist() == [-(-n // 2) for n in fine.request_lengths.tolist()]
    np.testing.assert_array_equal(coarse.input_tokens, fine.input_tokens)
    # Mooncake's hash ids are prefix-chained: a coarse block is its chunk's last fine block
    ends = [fine.request_blocks(i)[min(len(fine.request_blocks(i)), 2 * (k + 1)) - 1]
            for i in range(200) for k in range(-(-len(fine.request_blocks(i)) // 2))]
    got = np.concatenate([coarse.request_blocks(i) for i in range(200)])
    remap: dict[int, int] = {}
    assert all(remap.setdefault(int(e), int(g)) == int(g) for e, g in zip(ends, got))
    assert len(set(remap.values())) == len(remap)
    with pytest.raises(ValueError, match="multiple of 512"):
        load_trace(bundled_path("mooncake_conversation"), block_tokens=768)


def test_finer_blocks_split_each_block_by_hand(caplog):
    # 16-token blocks; request 0 has 24 tokens (its last block half full), request 1 has 32
    t = Trace.from_requests([[1, 2], [1, 3]], block_tokens=16, input_tokens=[24, 32], tool_wait_s=[0.0, 2.0])
    with caplog.at_level("WARNING", "sim_core"):
        f = reblock(t, 8)
    # sub-blocks (1,0) (1,1) (2,0) | (1,0) (1,1) (3,0) (3,1): 24 tokens reach 3 of 8
    assert f.block_tokens == 8 and f.blocks.tolist() == [0, 1, 2, 0, 1, 3, 4]
    assert f.input_tokens.tolist() == [24, 32] and f.tool_wait_s.tolist() == [0.0, 2.0]
    assert "16-token blocks split into 2 chained 8-token sub-blocks" in caplog.text
    assert "share only part of a 16-token block" in caplog.text


@pytest.mark.parametrize("seed", range(4))
def test_finer_then_coarser_gives_the_trace_back(seed):
    rng = np.random.default_rng(seed)
    prefixes: dict[tuple, int] = {}
    reqs = []
    for _ in range(60):  # prefix-chained ids: a dict over prefixes of random small symbols
        syms = tuple(rng.integers(0, 3, size=rng.integers(1, 8)))
        reqs.append([prefixes.setdefault(syms[:j + 1], len(prefixes)) for j in range(len(syms))])
    t = Trace.from_requests(reqs, block_tokens=64)
    for k in (2, 4, 64):
        back = reblock(reblock(t, 64 // k), 64)
        assert back.blocks.tolist() == t.blocks.tolist() and back.block_tokens == 64
        np.testing.assert_array_equal(back.req_offsets, t.req_offsets)
