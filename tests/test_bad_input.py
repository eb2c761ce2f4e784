"""Bad input found in the issue-9 trial (section 5): native .npz traces, cluster/sim/trace
numbers, non-ASCII paths. Each must fail with a message that names the file or key and
what is valid, with CLI exit status 2 and nothing recorded in MLflow.

Library checks run in-process; one CLI subprocess per reported case (a few seconds each).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim_core.traces.trace import Trace
from sim_core.traces.file import NATIVE_FORMAT_VERSION, check_native_arrays
from sweep.config import ConfigError, check_bool, check_int, check_number, precheck_overrides

REPO = Path(__file__).resolve().parent.parent
ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")


def _tiny() -> Trace:
    return Trace.from_requests([[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3, 7]], name="tiny",
                               source="real")


def _write(path: Path, **changes) -> Path:
    """A native file from _tiny() with some arrays replaced (as another tool might write it)."""
    t = _tiny()
    arrays = {k: getattr(t, k) for k in ARRAYS}
    arrays.update(changes)
    header = repr({"block_tokens": 16, "name": "tiny", "source": "real", "dropped_requests": 0,
                   "meta": {}, "format": NATIVE_FORMAT_VERSION})
    np.savez(path, **arrays, header=np.array([header]))
    return path


def _bad_files(d: Path) -> dict[str, Path]:
    t = _tiny()
    (d / "random.npz").write_bytes(np.random.default_rng(0).bytes(600))
    (d / "renamed.npz").write_text('{"timestamp": 0, "input_length": 32, "output_length": 1, '
                                   '"hash_ids": [1, 2]}\n')
    floats = t.blocks.astype(np.float64)
    floats[6] = 4.5
    return {
        "random": d / "random.npz",
        "renamed": d / "renamed.npz",
        "float_ids": _write(d / "float_ids.npz", blocks=floats),
        "string_ids": _write(d / "string_ids.npz", blocks=t.blocks.astype(str)),
        "decreasing": _write(d / "decreasing.npz", arrival_s=np.array([0.0, 1.0, 0.5, 2.0])),
    }


# ------------------------------------------------------------ native, in-process
NATIVE_ERRORS = {
    "random": "random.npz is not a native trace (an .npz written by Trace.save): it is not a zip archive",
    "renamed": "renamed.npz is not a native trace (an .npz written by Trace.save): it holds JSON text",
    "float_ids": "float_ids.npz: blocks must hold integers, got dtype float64; first bad value blocks[6]=4.5",
    "string_ids": "string_ids.npz: blocks must hold integers, got dtype <U",
    "decreasing": "decreasing.npz: arrival_s must be non-decreasing (requests in arrival order), "
                  "but arrival_s[2]=0.5 < arrival_s[1]=1.0",
}


@pytest.mark.parametrize("case", sorted(NATIVE_ERRORS))
def test_bad_native_file_is_named(tmp_path, case):
    path = _bad_files(tmp_path)[case]
    with pytest.raises(ValueError) as e:
        Trace.load(path)
    assert NATIVE_ERRORS[case] in str(e.value)
    assert "pickle" not in str(e.value)


@pytest.mark.parametrize("field,value,words", [
    ("input_tokens", np.array([48, 48, -1, 64]), "input_tokens[2]=-1"),
    ("arrival_s", np.array([0.0, np.nan, 2.0, 3.0]), "arrival_s[1]=nan"),
    ("session", np.array([0.0, 0.0, 1.0, 1.0]), "session must hold integers, got dtype float64"),
    ("req_offsets", np.array([0, 3, 2, 8, 12]), "req_offsets[2]=2 < req_offsets[1]=3"),
])
def test_bad_native_arrays_name_field_and_index(tmp_path, field, value, words):
    with pytest.raises(ValueError, match=r"x\.npz: " + field) as e:
        Trace.load(_write(tmp_path / "x.npz", **{field: value}))
    assert words in str(e.value)


def test_native_object_array_is_not_a_pickle_error(tmp_path):
    t = _tiny()
    blocks = np.array([int(b) for b in t.blocks], dtype=object)
    with pytest.raises(ValueError, match="blocks holds Python objects") as e:
        Trace.load(_write(tmp_path / "obj.npz", blocks=blocks))
    assert "allow_pickle" not in str(e.value)


def test_empty_and_npy_files_say_what_they_are(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.npz is not a native trace.*the file is empty"):
        Trace.load(tmp_path / "empty.npz")
    np.save(tmp_path / "one.npy", np.arange(3))
    (tmp_path / "one.npy").rename(tmp_path / "one.npz")
    with pytest.raises(ValueError, match="single .npy array"):
        Trace.load(tmp_path / "one.npz")


@pytest.mark.parametrize("scale", [1000, 2**40])
def test_sparse_ids_are_remapped_in_first_appearance_order(tmp_path, scale):
    t = _tiny()
    sparse = t.blocks.astype(np.int64) * scale + 7  # x1000 ids, or hashes past int32
    back = Trace.load(_write(tmp_path / "sparse.npz", blocks=sparse))
    assert back.blocks.tolist() == t.blocks.tolist()  # from_requests ids are first-appearance
    assert back.n_unique == t.n_unique == 7
    assert back.meta["block_ids_remapped"] == "first-appearance"


def test_dense_ids_are_kept_as_stored(tmp_path):
    # dense but not in first-appearance order: left alone (saved results stay comparable)
    t = _tiny()
    perm = np.array([6, 5, 4, 3, 2, 1, 0])[t.blocks]
    back = Trace.load(_write(tmp_path / "perm.npz", blocks=perm))
    assert back.blocks.tolist() == perm.tolist() and "block_ids_remapped" not in back.meta
    same = Trace.load(t.save(tmp_path / "saved.npz"))
    assert same.blocks.tolist() == t.blocks.tolist() and same.meta == t.meta


def test_check_native_arrays_needs_no_file():
    t = _tiny()
    arrays = {k: getattr(t, k) for k in ARRAYS}
    out, stored_ids = check_native_arrays(arrays, "mem")
    assert stored_ids is None and out["blocks"] is arrays["blocks"]
    with pytest.raises(ValueError, match="mem: blocks must hold integers, got dtype bool"):
        check_native_arrays({**arrays, "blocks": arrays["blocks"] > 2}, "mem")


# ------------------------------------------------------------ config, in-process
def test_check_helpers():
    assert check_int(3, "k", 1) == 3 and check_int(1e3, "k", 1) == 1000 and check_int("12", "k") == 12
    assert check_int(None, "k", 1, allow_none=True) is None
    for bad in ("abc", True, 1.5, -1, None, [1]):
        with pytest.raises(ConfigError, match="k must be an integer >= 0"):
            check_int(bad, "k", 0)
    with pytest.raises(ConfigError, match=r"k must be an integer from 0 to 9 or null \(default\), got 10"):
        check_int(10, "k", 0, 9, allow_none=True, none_means="default")
    assert check_number("0.5", "x") == 0.5
    for bad in (0, -1, "abc", float("nan"), False):
        with pytest.raises(ConfigError, match="x must be a positive number"):
            check_number(bad, "x")
    assert check_bool(False, "b") is False
    with pytest.raises(ConfigError, match="b must be true or false, got 'yes'"):
        check_bool("yes", "b")


SPEC_CASES = [
    ("cluster.actors=-3", "cluster.actors must be an integer >= 1 or null (one per CPU), got -3"),
    ("cluster.actors=0", "cluster.actors must be an integer >= 1"),
    ("cluster.num_cpus=-2", "cluster.num_cpus must be an integer >= 1 or null (all cores), got -2"),
    ("cluster.num_cpus=0", "cluster.num_cpus must be an integer >= 1 or null (all cores), got 0"),
    ("cluster.num_cpus=true", "cluster.num_cpus must be an integer >= 1 or null (all cores), got True"),
    ("cluster.object_store_memory=1000", "cluster.object_store_memory must be an integer >= 78643200"),
    ("cluster.log_to_driver=maybe", "cluster.log_to_driver must be true or false, got 'maybe'"),
    ("sim.seed=abc", "sim.seed must be an integer, got 'abc'"),  # the schema (sweep/schema.py)
    ("sim.seed=-1", "sim.seed must be an integer from 0 to 2147483647, got -1"),
    ("sim.seed=1.5", "sim.seed must be an integer, got 1.5"),
    ("sim.seed=true", "sim.seed must be an integer, got True"),
    ("sweep.shards_per_worker=0", "sweep.shards_per_worker must be an integer >= 1, got 0"),
    ("sim.mdoe=block", "unknown key sim.mdoe; valid: mode, hits, order, seed"),
    ("sim.partial_blocks=drop", "unknown sim.partial_blocks 'drop'; valid: cache, skip"),
    ("sweep.summary_points=many", "sweep.summary_points must be an integer, got 'many'"),
    ("sweep.max_capacities_per_job=-1", "sweep.max_capacities_per_job must be an integer >= 1 or null"),
    ("sweep.summary_points=0", "sweep.summary_points must be an integer >= 1, got 0"),
    ("sweep.dry_run=yes", "sweep.dry_run must be true or false, got 'yes'"),
    ("sweep.exclude_slow=1", "sweep.exclude_slow must be true or false, got 1"),
    ("model.context_tokens=abc", "model.context_tokens must be an integer >= 1, got 'abc'"),
    ("model.layers=0", "model.layers must be an integer >= 1, got 0"),
    ("model.n_experts=-1", "model.n_experts must be an integer >= 0, got -1"),
]


@pytest.mark.parametrize("override,message", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_resolve_rejects_bad_numbers(compose, override, message):
    from sweep.spec import resolve

    with pytest.raises(ConfigError) as e:
        resolve(compose("policy=lru", "cost=uniform", override), "lru")
    assert str(e.value).startswith(message)


def test_resolve_accepts_nulls_and_integers(compose):
    from sweep.spec import resolve

    spec = resolve(compose("policy=lru", "cost=uniform", "cluster.num_cpus=2", "cluster.actors=1",
                           "sim.seed=7", "sweep.max_capacities_per_job=3"), "lru")
    assert spec.seed == 7 and isinstance(spec.seed, int)
    assert resolve(compose("policy=lru", "cost=uniform"), "lru").seed == 0


TRACE_CASES = [
    ("trace=mooncake_conversation", "trace.context_tokens=0",
     "trace.context_tokens must be an integer >= 1 or null (the default context window), got 0"),
    ("trace=mooncake_conversation", "trace.max_requests=abc",
     "trace.max_requests must be an integer >= 1 or null (all requests), got 'abc'"),
    ("trace=mooncake_conversation", "trace.max_requests=true",
     "trace.max_requests must be an integer >= 1 or null (all requests), got True"),
    ("trace=mooncake_conversation", "trace.max_requests=0",
     "trace.max_requests must be an integer >= 1 or null (all requests), got 0"),
    ("trace=freeinference", "trace.scale=-1",
     "trace.scale must be a positive number or null (the default size; 1.0 = the full trace), got -1"),
    ("trace=freeinference", "trace.scale=abc",
     "trace.scale must be a positive number or null (the default size; 1.0 = the full trace), got 'abc'"),
    ("trace=freeinference", "trace.seed=-1", "trace.seed must be an integer >= 0 or null (0), got -1"),
    ("trace=chutes", "trace.concurrency=0",
     "trace.concurrency must be a positive number or null (the profile's default), got 0"),
    ("trace=file", "trace.path=[/tmp/a,b.jsonl]", "trace.path must be one file path, got ['/tmp/a', 'b.jsonl']"),
]


@pytest.mark.parametrize("group,override,message", TRACE_CASES, ids=[c[1] for c in TRACE_CASES])
def test_check_trace_config_rejects_bad_values(compose, group, override, message):
    from sweep.traces import check_trace_config

    with pytest.raises(ConfigError) as e:
        check_trace_config(compose(group, override).trace, group.split("=")[1])
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("arg,message", [
    ("trace.path=/tmp/tracé.jsonl",
     "trace.path=/tmp/tracé.jsonl: Hydra reads values with non-ASCII character(s) é only inside quotes, "
     "and the quotes must reach it past the shell: \"trace.path='/tmp/tracé.jsonl'\""),
    ("trace.path=/data/run(1).jsonl",
     "trace.path=/data/run(1).jsonl: Hydra reads values with special characters only inside quotes, "
     "and the quotes must reach it past the shell: \"trace.path='/data/run(1).jsonl'\""),
    ("trace.path=/tmp/it's é.jsonl", "'trace.path=\"/tmp/it'\"'\"'s é.jsonl\"'"),
    ("trace.path=/data/a,b.jsonl",
     "trace.path=/data/a,b.jsonl: the comma makes this a list of values; quote the value to keep it "
     "one string: \"trace.path='/data/a,b.jsonl'\""),
])
def test_precheck_says_how_to_quote(arg, message):
    with pytest.raises(ConfigError) as e:
        precheck_overrides(["trace=file", arg])
    assert message in str(e.value)


def test_quoted_non_ascii_path_parses_to_the_path():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    precheck_overrides(["trace=file", "trace.path='/tmp/tracé.jsonl'"])  # no error
    ov = OverridesParser.create().parse_overrides(["trace.path='/tmp/tracé.jsonl'"])[0]
    assert ov.value() == "/tmp/tracé.jsonl"


def test_precheck_leaves_other_syntax_errors_to_hydra():
    precheck_overrides(["policy=[lru,"])  # Hydra reports it; quoting would change its meaning


# -------------------------------------------------------------------- the CLI
def _sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})


FAST = ("policy=lru", "capacity=paper4", "cost=uniform", "cluster.num_cpus=1")

CLI_CASES = {
    # id: (overrides, message)
    "actors=-3": (["trace=mooncake_conversation", "cluster.actors=-3"],
                  "cluster.actors must be an integer >= 1 or null (one per CPU), got -3"),
    "num_cpus=-2": (["trace=mooncake_conversation", "cluster.num_cpus=-2"],
                    "cluster.num_cpus must be an integer >= 1 or null (all cores), got -2"),
    "num_cpus=0": (["trace=mooncake_conversation", "cluster.num_cpus=0"],
                   "cluster.num_cpus must be an integer >= 1 or null (all cores), got 0"),
    "context_tokens=0": (["trace=mooncake_conversation", "trace.context_tokens=0"],
                         "trace.context_tokens must be an integer >= 1 or null"),
    "seed=abc": (["trace=mooncake_conversation", "sim.seed=abc"],
                 "sim.seed must be an integer, got 'abc'"),
    "non-ascii path": (["trace=file", "trace.path=/tmp/tracé.jsonl"],
                       "quotes must reach it past the shell: \"trace.path='/tmp/tracé.jsonl'\""),
}
CLI_CASES.update({f"native {k}": (["trace=file", f"trace.path={{{k}}}"], msg)
                  for k, msg in NATIVE_ERRORS.items()})


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_reports_bad_input_and_records_nothing(tmp_path, case):
    files = _bad_files(tmp_path)
    overrides, message = CLI_CASES[case]
    overrides = [o.format(**files) for o in overrides]
    # FAST first: a case's own cluster.num_cpus comes later and wins
    proc = _sweep(tmp_path, *FAST, *overrides)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert message in out, out[-3000:]
    assert "Traceback" not in out and "allow_pickle" not in out, out[-3000:]
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "mlruns").exists()


def test_cli_sweeps_a_saved_native_trace(tmp_path):
    """End to end: Trace.save -> trace=file trace.path=x.npz -> Ray -> MLflow, exit 0
    (this failed with 'native traces accept only name=')."""
    import mlflow

    t = _tiny()
    saved = t.save(tmp_path / "tiny.npz")
    proc = _sweep(tmp_path, *FAST, "trace=file", f"trace.path={saved}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "(FINISHED)" in out
    row = [ln for ln in proc.stdout.splitlines() if ln.startswith("lru ")]
    assert row and row[0].split()[1] == "0.4167", proc.stdout  # 5 hits in 12 accesses

    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    assert exp is not None and client.search_runs([exp.experiment_id])


def test_cli_native_quoted_non_ascii_and_sparse_ids_dry_run(tmp_path):
    """The quoting the precheck suggests works, and a trace with sparse ids loads
    (remapped) without touching Ray or MLflow."""
    t = _tiny()
    path = _write(tmp_path / "tracé.npz", blocks=t.blocks.astype(np.int64) * 1000)
    proc = _sweep(tmp_path, *FAST, "trace=file", f"trace.path='{path}'", "sweep.dry_run=true")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "4 requests, 12 block accesses, 7 unique 16-token blocks" in out, out[-3000:]
    assert not (tmp_path / "mlflow.db").exists()


POLICY_CASES = [
    ("policy.lru.weight=abc", "policy.lru.weight must be a positive number, got 'abc'"),
    ("policy.lru.weight=0", "policy.lru.weight must be a positive number, got 0"),
    ("policy.s3fifo.params.small_ratio=abc", "policy.s3fifo.params.small_ratio must be a number, got 'abc'"),
    ("policy.s3fifo.params.move_to_main_threshold=1.5",
     "policy.s3fifo.params.move_to_main_threshold must be an integer, got 1.5"),
    ("policy.lecar.params.update_weight=1", "policy.lecar.params.update_weight must be true or false, got 1"),
    ("policy.random_compute.params.clock=5",
     "policy.random_compute.params.clock must be a string like its default 'access', got 5"),
]


@pytest.mark.parametrize("override,message", POLICY_CASES, ids=[c[0] for c in POLICY_CASES])
def test_policy_weight_and_param_types(compose, override, message):
    from sweep.spec import resolve

    cfg = compose("policy=[lru,s3fifo,lecar,random_compute]", "cost=uniform", override)
    with pytest.raises(ConfigError) as e:
        resolve(cfg, "list")
    assert str(e.value) == message


def test_every_policy_yaml_passes_the_param_type_check(compose):
    from sweep.spec import resolve

    spec = resolve(compose("policy=all", "sweep.exclude_slow=false", "cost=uniform",
                           "policy.s3fifo.params.small_ratio=1"), "all")
    s3 = next(p for p in spec.policies if p.name == "s3fifo")
    assert s3.params["small_ratio"] == 1.0 and isinstance(s3.params["small_ratio"], float)


def test_trace_path_directory_and_unknown_format(compose, tmp_path):
    from sweep.traces import check_trace_config

    with pytest.raises(ConfigError, match="is a directory; give a trace file"):
        check_trace_config(compose("trace=file", f"trace.path={tmp_path}").trace, "file")
    saved = _tiny().save(tmp_path / "t.npz")
    with pytest.raises(ConfigError, match="unknown trace.format 'bogus'; valid: auto, mooncake"):
        check_trace_config(compose("trace=file", f"trace.path={saved}", "trace.format=bogus").trace, "file")
