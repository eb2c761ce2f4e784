"""sim_core.traces.config: the `trace` config group -> Trace, from Hydra configs and from plain
Mappings; the new keys block_tokens, tokenizer and file_block_tokens."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sim_core.config_checks import ConfigError
from sim_core.traces.loaders import bundled_path, load_trace
from sim_core.traces.config import check_trace_config, load


def tokens_file(tmp_path):
    p = tmp_path / "tok.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "token_ids": list(range(40 + i))}) + "\n" for i in range(3)))
    return p


def test_sweep_config_error_is_sim_cores():
    from sweep.config import ConfigError as SweepConfigError
    from sweep.traces import load as sweep_load

    assert SweepConfigError is ConfigError and sweep_load is load


def test_plain_mapping(tmp_path):
    p = tokens_file(tmp_path)
    t = load({"path": str(p), "format": "tokens", "block_tokens": 8}, "file")
    assert t.block_tokens == 8 and t.request_lengths.tolist() == [5, 6, 6] and t.name == "tok"
    with pytest.raises(ConfigError, match="trace=file needs a file"):
        check_trace_config({"path": "???"}, "file")
    with pytest.raises(ConfigError, match="trace.block_tokens must be an integer >= 1"):
        check_trace_config({"path": str(p), "block_tokens": 0}, "file")


def test_tokens_group(compose, tmp_path):
    p = tokens_file(tmp_path)
    t = load(compose("trace=tokens", f"trace.path={p}").trace, "tokens")
    assert t.block_tokens == 16 and t.meta["loader"] == "tokens"
    t64 = load(compose("trace=tokens", f"trace.path={p}", "trace.block_tokens=64").trace, "tokens")
    assert t64.block_tokens == 64 and t64.request_lengths.tolist() == [1, 1, 1]


def test_block_tokens_reblocks_the_bundled_trace(compose):
    t = load(compose("trace=mooncake_conversation", "trace.block_tokens=2048", "trace.max_requests=50").trace,
             "mooncake_conversation")
    fine = load_trace(bundled_path("mooncake_conversation")).subset(50)
    assert t.block_tokens == 2048 and t.n_requests == 50
    assert t.request_lengths.tolist() == [-(-n // 4) for n in fine.request_lengths.tolist()]
    np.testing.assert_array_equal(t.input_tokens, fine.input_tokens)
    with pytest.raises(ConfigError, match="trace.block_tokens=700: cannot re-block .* multiple of 512"):
        load(compose("trace=mooncake_conversation", "trace.block_tokens=700").trace, "mooncake_conversation")


def test_native_file_is_reblocked_too(compose, tmp_path):
    from sim_core import Trace

    saved = Trace.from_requests([[1, 2, 3], [1, 2]], name="n", source="real").save(tmp_path / "n.npz")
    t = load(compose("trace=file", f"trace.path={saved}", "trace.block_tokens=32").trace, "file")
    assert t.block_tokens == 32 and t.blocks.tolist() == [0, 1, 0]


def test_text_needs_a_tokenizer(compose, tmp_path):
    p = tmp_path / "text.jsonl"
    p.write_text(json.dumps({"timestamp": 0, "prompt": "hi"}) + "\n")
    with pytest.raises(ConfigError, match="trace.format=text needs a tokenizer file"):
        check_trace_config(compose("trace=text", f"trace.path={p}").trace, "text")
    with pytest.raises(ConfigError, match="is a text trace: it needs trace.tokenizer"):
        load(compose("trace=file", f"trace.path={p}").trace, "file")
    with pytest.raises(ConfigError, match="trace.tokenizer .* is not a file"):
        check_trace_config(compose("trace=text", f"trace.path={p}", f"trace.tokenizer={tmp_path}/none.json").trace,
                           "text")


def test_option_of_another_format_is_named(compose, tmp_path):
    p = tmp_path / "tok.jsonl"
    p.write_text(json.dumps({"timestamp": 0, "token_ids": [1]}) + "\n")
    with pytest.raises(ConfigError, match="trace.file_block_tokens applies to format.* dynamo.*; .* is tokens"):
        load(compose("trace=file", f"trace.path={p}", "trace.file_block_tokens=64").trace, "file")


def test_dynamo_group_file_block_tokens(compose, tmp_path):
    p = tmp_path / "dyn.jsonl"
    p.write_text(json.dumps({"session_id": "s", "timestamp": 0, "output_length": 1, "hash_ids": [1, 2]}) + "\n")
    t = load(compose("trace=dynamo", f"trace.path={p}", "trace.file_block_tokens=64",
                     "trace.block_tokens=128").trace, "dynamo")
    assert t.block_tokens == 128 and t.input_tokens.tolist() == [128] and t.n_accesses == 1
