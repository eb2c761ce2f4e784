"""Trace CSR construction, validation and the native .npz format (all values hand-derived)."""
from __future__ import annotations

import zipfile

import numpy as np
import pytest

from sim_core.traces.loaders import TraceFormatError, load_native
from sim_core.traces.trace import Trace
from sim_core.traces.file import NATIVE_FORMAT_VERSION, remap_dense_ids

ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")
DTYPES = {"req_offsets": np.int64, "blocks": np.int32, "arrival_s": np.float64,
          "session": np.int64, "input_tokens": np.int64, "output_tokens": np.int64}


# ------------------------------------------------------------- construction
def test_from_requests_builds_csr_and_dense_ids():
    t = Trace.from_requests([[10, 20, 30], [10, 20, 40, 50], [], [60, 10]], block_tokens=16)
    # first appearance order: 10->0 20->1 30->2 40->3 50->4 60->5
    assert t.req_offsets.tolist() == [0, 3, 7, 7, 9]
    assert t.blocks.tolist() == [0, 1, 2, 0, 1, 3, 4, 5, 0]
    assert t.n_requests == 4 and t.n_accesses == 9 and t.n_unique == 6
    assert t.request_lengths.tolist() == [3, 4, 0, 2]
    assert t.max_request_blocks == 4
    assert t.depths().tolist() == [0, 1, 2, 0, 1, 2, 3, 0, 1]
    assert t.request_blocks(1).tolist() == [0, 1, 3, 4]
    assert t.request_blocks(2).tolist() == []
    # defaults: arrival = request index, unknown session, input = blocks * block_tokens
    assert t.arrival_s.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert t.session.tolist() == [-1, -1, -1, -1]
    assert t.input_tokens.tolist() == [48, 64, 0, 32]
    assert t.output_tokens.tolist() == [0, 0, 0, 0]
    assert t.source == "synthetic" and t.block_tokens == 16
    for name, dtype in DTYPES.items():
        assert getattr(t, name).dtype == dtype, name


def test_from_requests_explicit_columns():
    t = Trace.from_requests([[5], [5, 6]], arrival_s=[0.5, 2.0], session=[3, 3], block_tokens=512,
                            input_tokens=[100, 700], output_tokens=[7, 8], name="x", source="real",
                            dropped_requests=4, meta={"k": 1})
    assert t.blocks.tolist() == [0, 0, 1]
    assert t.arrival_s.tolist() == [0.5, 2.0]
    assert t.session.tolist() == [3, 3]
    assert t.input_tokens.tolist() == [100, 700] and t.output_tokens.tolist() == [7, 8]
    assert (t.name, t.source, t.block_tokens, t.dropped_requests, t.meta) == ("x", "real", 512, 4, {"k": 1})


def test_from_requests_empty_trace():
    t = Trace.from_requests([])
    assert t.n_requests == 0 and t.n_accesses == 0 and t.n_unique == 0
    assert t.req_offsets.tolist() == [0]


def test_remap_dense_first_appearance():
    ids, old = remap_dense_ids(np.array([7, -3, 7, 2**40, -3, 0], dtype=np.int64))
    assert ids.tolist() == [0, 1, 0, 2, 1, 3] and len(old) == 4 and ids.dtype == np.int32
    assert old.tolist() == [7, -3, 2**40, 0]
    ids, old = remap_dense_ids(np.zeros(0, dtype=np.int64))
    assert ids.tolist() == [] and len(old) == 0


def test_source_ids_are_the_hashes_and_the_libcachesim_object_ids(tmp_path):
    # from_requests keeps each dense block's hash (negative ones by their 64-bit pattern);
    # object_ids (what libCacheSim is given) are those, or dense id + 1 when there are none
    t = Trace.from_requests([[7, -3], [7, 2**40, 0]])
    assert t.source_ids.dtype == np.uint64
    assert t.source_ids.tolist() == [7, 2**64 - 3, 2**40, 0] and t.object_ids() is t.source_ids
    bare = Trace(t.req_offsets, t.blocks, t.arrival_s, t.session, t.input_tokens, t.output_tokens)
    assert bare.source_ids is None and bare.object_ids().tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="source_ids"):
        Trace(t.req_offsets, t.blocks, t.arrival_s, t.session, t.input_tokens, t.output_tokens,
              source_ids=[1, 2])
    # subset re-densifies and keeps each block's id
    sub = Trace.from_requests([[5, 6], [8, 6], [9]]).subset(2)
    assert sub.source_ids.tolist() == [5, 6, 8]
    # a native file written by another tool with sparse ids: they are its source ids
    arrays = dict(req_offsets=np.array([0, 2, 3]), blocks=np.array([40, 10, 40]),
                  arrival_s=np.array([0.0, 1.0]), session=np.array([-1, -1]),
                  input_tokens=np.array([32, 16]), output_tokens=np.array([0, 0]))
    p = tmp_path / "sparse.npz"
    np.savez(p, **arrays, header=np.array([repr({"block_tokens": 16, "format": NATIVE_FORMAT_VERSION})]))
    back = Trace.load(p)
    assert back.blocks.tolist() == [0, 1, 0] and back.source_ids.tolist() == [40, 10]
    # dense ids in a file are kept and have no source ids (libCacheSim then gets id + 1)
    arrays["blocks"] = np.array([1, 0, 1])
    np.savez(p, **arrays, header=np.array([repr({"block_tokens": 16, "format": NATIVE_FORMAT_VERSION})]))
    assert Trace.load(p).source_ids is None


def _arrays(**override):
    base = dict(req_offsets=[0, 2, 3], blocks=[0, 1, 0], arrival_s=[0.0, 1.0], session=[-1, -1],
                input_tokens=[32, 16], output_tokens=[0, 0])
    base.update(override)
    return base


@pytest.mark.parametrize("override, match", [
    (dict(req_offsets=[1, 2, 3]), "start at 0"),
    (dict(req_offsets=[0, 3, 2], blocks=[0, 1]), "non-decreasing"),
    (dict(req_offsets=[0, 2, 4]), r"req_offsets\[-1\]=4 != len\(blocks\)=3"),
    (dict(arrival_s=[0.0]), "arrival_s has 1 entries, expected 2"),
    (dict(session=[1, 2, 3]), "session has 3 entries"),
    (dict(input_tokens=[1]), "input_tokens has 1 entries"),
    (dict(output_tokens=[]), "output_tokens has 0 entries"),
    (dict(blocks=[0, -1, 0]), "non-negative"),
])
def test_validate_rejects_inconsistent_arrays(override, match):
    with pytest.raises(ValueError, match=match):
        Trace(**_arrays(**override))


def test_validate_rejects_bad_scalars():
    with pytest.raises(ValueError, match="source must be one of"):
        Trace(**_arrays(), source="measured")
    with pytest.raises(ValueError, match="block_tokens must be positive"):
        Trace(**_arrays(), block_tokens=0)
    Trace(**_arrays())  # the base case itself is valid


# ----------------------------------------------------------------- storage
def _sample() -> Trace:
    return Trace.from_requests(
        [[3, 1, 4], [3, 1, 5, 9], [2, 6]], arrival_s=[0.25, 1.5, 1.5], session=[0, 0, -1],
        block_tokens=16, input_tokens=[40, 60, 20], output_tokens=[5, 0, 9], name="sample",
        source="real", dropped_requests=2,
        meta={"loader": "test", "nested": {"a": [1, 2.5, "x"], "b": None}, "t": (1, 2)})


def _assert_same(a: Trace, b: Trace) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype == DTYPES[name], name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert (a.block_tokens, a.name, a.source, a.dropped_requests, a.meta) == \
           (b.block_tokens, b.name, b.source, b.dropped_requests, b.meta)
    assert (a.source_ids is None) == (b.source_ids is None)
    if a.source_ids is not None:
        assert a.source_ids.dtype == b.source_ids.dtype == np.uint64
        np.testing.assert_array_equal(a.source_ids, b.source_ids, err_msg="source_ids")


def test_native_round_trip_is_exact(tmp_path):
    t = _sample()
    p = t.save(tmp_path / "sub" / "sample.npz")
    assert p == tmp_path / "sub" / "sample.npz" and p.is_file()
    assert sorted(x.name for x in p.parent.iterdir()) == ["sample.npz"]  # no temp file left
    back = Trace.load(p)
    _assert_same(t, back)
    _assert_same(t, load_native(p))
    assert Trace.load(p, mmap=True).blocks.tolist() == t.blocks.tolist()
    # the stored arrays are exactly the in-memory ones
    with np.load(p, allow_pickle=False) as z:
        assert sorted(z.files) == sorted(ARRAYS + ("header", "source_ids"))
        assert z["blocks"].dtype == np.int32 and z["req_offsets"].dtype == np.int64
        assert z["source_ids"].tolist() == [3, 1, 4, 5, 9, 2, 6]  # the hashes, by dense id


def test_native_save_adds_npz_suffix(tmp_path):
    p = _sample().save(tmp_path / "plain")
    assert p.name == "plain.npz" and p.is_file()


def test_native_round_trip_numpy_meta(tmp_path):
    # numpy scalars in meta used to be written as "np.int64(3)" and made the file unreadable
    t = Trace.from_requests([[1, 2]], meta={"seed": np.int64(3), "alpha": np.float64(0.5),
                                            "sizes": np.array([1, 2])})
    back = Trace.load(t.save(tmp_path / "np.npz"))
    assert back.meta == {"seed": 3, "alpha": 0.5, "sizes": [1, 2]}
    assert type(back.meta["seed"]) is int


def test_native_save_refuses_unreadable_meta(tmp_path):
    t = Trace.from_requests([[1]], meta={"bad": object()})
    with pytest.raises(ValueError, match="plain literals"):
        t.save(tmp_path / "bad.npz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("cut", [0, 10, 0.5, -5])
def test_native_truncated_file_is_rejected(tmp_path, cut):
    good = _sample().save(tmp_path / "good.npz").read_bytes()
    n = int(len(good) * cut) if isinstance(cut, float) else (cut if cut >= 0 else len(good) + cut)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(good[:n])
    with pytest.raises(Exception):
        Trace.load(bad)
    with pytest.raises(TraceFormatError, match="bad.npz: not a valid native trace"):
        load_native(bad)


def test_native_corrupt_byte_is_rejected(tmp_path):
    good = _sample().save(tmp_path / "good.npz").read_bytes()
    data = bytearray(good)
    data[len(data) // 3] ^= 0xFF  # inside a member: CRC check fails
    bad = tmp_path / "flip.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="flip.npz"):
        load_native(bad)


def test_native_missing_member_is_rejected(tmp_path):
    src = _sample().save(tmp_path / "good.npz")
    bad = tmp_path / "partial.npz"
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(bad, "w") as w:
        for info in z.infolist():
            if info.filename != "blocks.npy":
                w.writestr(info, z.read(info))
    with pytest.raises(ValueError, match="partial.npz is not a native trace: no blocks array"):
        Trace.load(bad)
    with pytest.raises(TraceFormatError, match="partial.npz"):
        load_native(bad)


def test_native_wrong_version_is_rejected(tmp_path):
    t = _sample()
    p = tmp_path / "v.npz"
    np.savez(p, **{k: getattr(t, k) for k in ARRAYS},
             header=np.array([repr({"block_tokens": 16, "name": "v", "source": "real",
                                    "dropped_requests": 0, "meta": {},
                                    "format": NATIVE_FORMAT_VERSION + 1})]))
    with pytest.raises(ValueError, match="unsupported native trace format"):
        Trace.load(p)
    with pytest.raises(TraceFormatError):
        load_native(p)


def test_native_inconsistent_arrays_are_rejected(tmp_path):
    t = _sample()
    p = tmp_path / "inc.npz"
    arrays = {k: getattr(t, k) for k in ARRAYS}
    arrays["blocks"] = arrays["blocks"][:-1]  # offsets no longer match
    np.savez(p, **arrays, header=np.array([repr({"block_tokens": 16, "name": "v", "source": "real",
                                                 "dropped_requests": 0, "meta": {},
                                                 "format": NATIVE_FORMAT_VERSION})]))
    with pytest.raises(TraceFormatError, match="len\\(blocks\\)"):
        load_native(p)


def test_depth_totals_count_each_depth_without_per_access_arrays():
    from sim_core.replay.units import depth_totals

    t = Trace.from_requests([[1, 2, 3], [1], [], [4, 5, 6, 7], [2, 2]])
    assert depth_totals(t).tolist() == np.bincount(t.depths()).tolist() == [4, 3, 2, 1]
