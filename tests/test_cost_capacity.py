"""Cost-model and capacity figures from the paper (sec. 4.4, 5.2 and Table 2)."""
from __future__ import annotations

import numpy as np
import pytest

from sim_core import QWEN3_CODER_30B as Q, Trace, simulate
from sim_core.catalog.capacity import log_spaced_bytes, parse_size, to_blocks
from sim_core.catalog.cost import cost_per_depth


def test_qwen3_flops_match_the_paper():
    # paper sec. 4.4 / Fig. 8: 8K new tokens ~71.1 TFLOP from scratch, ~493.3 after 64K cached
    assert Q.prefill_flops(8192) / 1e12 == pytest.approx(71.1, rel=0.02)
    assert Q.prefill_flops(8192, cached_prefix=65536) / 1e12 == pytest.approx(493.3, rel=0.02)
    # the per-block cost table sums to the same numbers (16-token blocks)
    c = cost_per_depth("qwen3_coder_30b", 4096 + 512, 16)
    assert c[:512].sum() == pytest.approx(Q.prefill_flops(8192), rel=1e-12)
    assert c[4096:4608].sum() == pytest.approx(Q.prefill_flops(8192, 65536), rel=1e-12)


def test_flops_parameters_from_the_architecture():
    # a = 2 x active non-embedding params, b = 4 x layers x q_heads x head_dim
    per_layer = 2048 * 128 * (2 * 32 + 2 * 4) + 8 * 3 * 2048 * 768 + 2048 * 128
    assert Q.flops_a == 2 * 48 * per_layer
    assert Q.flops_b == 4 * 48 * 32 * 128


def test_kv_bytes_and_capacity_table():
    assert Q.kv_bytes_per_token == 96 * 1024  # 48 layers x 4 heads x 128 x 2 (K,V) x 2 bytes
    assert to_blocks("24GiB", Q, 16) == 16_384
    assert to_blocks("48GiB", Q, 16) == 32_768
    assert to_blocks("96GiB", Q, 16) == 65_536
    assert to_blocks("1TiB", Q, 16) == 699_051
    # 512-token blocks (Mooncake): 32x fewer for the same bytes
    assert to_blocks("24GiB", Q, 512) == 16_384 // 32
    assert to_blocks(1234, Q, 16) == 1234 and to_blocks("1234blocks", Q, 16) == 1234


def test_paper65_capacities():
    sizes = log_spaced_bytes("24GiB", "12TiB", 65)
    assert len(sizes) == 65
    assert sizes[0] == pytest.approx(24 * 2**30) and sizes[-1] == pytest.approx(12 * 2**40)
    ratios = np.diff(np.log(sizes))
    assert np.allclose(ratios, ratios[0])


@pytest.mark.parametrize("bad", ["abc", "12XB", "-3GiB", ""])
def test_bad_capacity_strings(bad):
    with pytest.raises(ValueError, match="capacity"):
        to_blocks(bad, Q, 16)


def test_capacity_below_one_block():
    with pytest.raises(ValueError, match="less than one"):
        to_blocks("100KiB", Q, 16)
    assert parse_size("0.25TiB") == (0.25 * 2**40, "bytes")


def test_linear_and_uniform_savings_by_hand():
    # [A,B,C] then [A,B,D]: LRU big cache -> hits at depths 0 and 1.
    t = Trace.from_requests([[1, 2, 3], [1, 2, 4]])
    r = simulate(t, "lru", 10, cost_models=["uniform", "linear"])[0]
    assert r.compute_savings["uniform"] == pytest.approx(2 / 6)
    assert r.compute_savings["linear"] == pytest.approx((1 + 2) / (2 * (1 + 2 + 3)))
