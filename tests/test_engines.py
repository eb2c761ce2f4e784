"""Engine presets (sim_core.catalog.counting, sim.counting=): each on a hand-computed trace.

16-token blocks; four requests of 40 prompt tokens (the last block holds 8):
[A B C], [A D C], [A B C], [A B C], a cache that never evicts. By hand:
- paper (block hits, partial cached): C hits behind the miss D: 2 + 3 + 3 = 8 hits of
  12; tokens 24 + 40 + 40 = 104 of 160.
- vllm (prefix hits, partial never cached): 1 + 2 + 2 = 5 hits; 80 tokens.
- sglang (prefix hits, page size 1 caches the partial block): 1 + 3 + 3 = 7; 96 tokens.
- lmcache and dynamo (prefix over full chunks or blocks): as vllm, 5 hits; 80 tokens.
- mooncake (prefix hits after a warm-up of half the requests): the last two requests
  count, all 6 of their blocks hit; 80 of 80 tokens.
"""
from __future__ import annotations

import pytest

from sim_core import Trace, simulate
from sim_core.catalog.counting import PRESETS, preset
from sweep.config import ConfigError
from sweep.spec import apply_counting

HAND = {"paper": (12, 8, 160, 104), "vllm": (12, 5, 160, 80), "sglang": (12, 7, 160, 96),
        "lmcache": (12, 5, 160, 80), "mooncake": (6, 6, 80, 80), "dynamo": (12, 5, 160, 80)}


def _trace():
    return Trace.from_requests([[1, 2, 3], [1, 4, 3], [1, 2, 3], [1, 2, 3]], input_tokens=[40] * 4)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_counts_as_by_hand(name):
    r = simulate(_trace(), "lru", [10], **preset(name).switches())[0]
    assert (r.accesses, r.hits, r.prompt_tokens, r.reused_tokens) == HAND[name]


def test_every_preset_has_a_hand_case():
    assert set(HAND) == set(PRESETS)


def test_the_command_line_wins_over_a_preset(compose):
    cfg = compose("sim.counting=vllm", "sim.hits=block")
    note = apply_counting(cfg, ["sim.counting=vllm", "sim.hits=block"])
    assert cfg.sim.hits == "block" and cfg.sim.partial_blocks == "skip" and cfg.sim.mode == "request"
    assert "kept from the command line: sim.hits" in note


def test_an_unknown_preset_names_the_valid_ones(compose):
    cfg = compose("sim.counting=vlm")
    with pytest.raises(ConfigError, match="sim.counting.*valid: paper, vllm"):
        apply_counting(cfg, ["sim.counting=vlm"])
