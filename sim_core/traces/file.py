"""The native trace file (`Trace.save` / `Trace.load`, an .npz): its header and the
checks every array must pass before it becomes a Trace."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..jit import njit

NATIVE_FORMAT_VERSION = 1
NATIVE_ARRAYS = ("req_offsets", "blocks", "arrival_s", "session", "input_tokens", "output_tokens")


def _plain(value):
    """Header values as plain Python literals (numpy scalars/arrays and paths included)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _header_repr(header: dict) -> str:
    """repr() of the native header, checked to read back with ast.literal_eval.

    Without this a meta value such as np.int64(3) was written as "np.int64(3)" and the
    saved trace could not be loaded again.
    """
    import ast

    text = repr(_plain(header))
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"trace header/meta is not made of plain literals, cannot save: {text[:200]}") from e
    return text


def _describe(head: bytes) -> str:
    """What a file that is not a zip archive seems to be, from its first bytes."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head:
        return "the file is empty"
    if text[:1] in (b"{", b"["):
        return "it holds JSON text, not an .npz archive (a JSONL trace with an .npz name?)"
    if head.startswith(b"\x93NUMPY"):
        return "it is a single .npy array, not an .npz archive"
    return f"it is not a zip archive (starts with {head[:8]!r})"


def _member(z, key: str, path) -> np.ndarray:
    try:
        return z[key]
    except ValueError as e:  # numpy refuses object arrays without allow_pickle
        raise ValueError(f"{path}: {key} holds Python objects (pickled data); a native trace "
                         f"stores plain numeric arrays") from e


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask)) if mask.any() else -1


def _check_int_array(a: np.ndarray, name: str, where: str) -> None:
    if a.ndim != 1:
        raise ValueError(f"{where}: {name} must be a 1-D array, got shape {a.shape}")
    if a.dtype.kind in "iu":
        return
    i = 0
    if a.dtype.kind == "f" and len(a):
        bad = ~np.isfinite(a) | (a != np.round(a))
        i = max(_first(bad), 0)
    example = f"; first bad value {name}[{i}]={a[i].item()!r}" if len(a) else ""
    raise ValueError(f"{where}: {name} must hold integers, got dtype {a.dtype}{example}")


def _check_min(a: np.ndarray, name: str, lo: int, where: str) -> None:
    i = _first(a < lo)
    if i >= 0:
        raise ValueError(f"{where}: {name} must be >= {lo}, but {name}[{i}]={a[i].item()}")


def check_native_arrays(arrays: dict, where: str) -> tuple[dict, np.ndarray | None]:
    """Check the raw arrays of a native file before Trace() casts them (which would turn
    float ids into truncated ints and wrap int64 hashes into int32 without a word).

    Returns (arrays, stored_ids): `blocks` as dense int32 ids, remapped in order of first
    appearance when the stored ids are not dense 0..U-1 (the engine sizes its tables by
    the largest id, so sparse ids would cost memory in proportion to that id); then
    `stored_ids` holds the stored id of each dense id, else it is None.
    Raises ValueError naming the field and the first bad index.
    """
    out = dict(arrays)
    for k in ("req_offsets", "blocks", "session", "input_tokens", "output_tokens"):
        _check_int_array(arrays[k], k, where)
    arr = arrays["arrival_s"]
    if arr.ndim != 1:
        raise ValueError(f"{where}: arrival_s must be a 1-D array, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        example = f"; first bad value arrival_s[0]={arr[0].item()!r}" if len(arr) else ""
        raise ValueError(f"{where}: arrival_s must hold numbers (seconds), got dtype {arr.dtype}{example}")
    i = _first(~np.isfinite(arr))
    if i >= 0:
        raise ValueError(f"{where}: arrival_s must be finite, but arrival_s[{i}]={arr[i].item()}")
    i = _first(np.diff(arr) < 0)
    if i >= 0:
        raise ValueError(f"{where}: arrival_s must be non-decreasing (requests in arrival order), "
                         f"but arrival_s[{i + 1}]={arr[i + 1].item()} < arrival_s[{i}]={arr[i].item()}")
    off = arrays["req_offsets"]
    if len(off) == 0 or off[0] != 0:
        raise ValueError(f"{where}: req_offsets must start with 0 (R+1 entries)")
    i = _first(np.diff(off) < 0)
    if i >= 0:
        raise ValueError(f"{where}: req_offsets must be non-decreasing, but req_offsets[{i + 1}]="
                         f"{off[i + 1].item()} < req_offsets[{i}]={off[i].item()}")
    _check_min(arrays["session"], "session", -1, where)
    _check_min(arrays["input_tokens"], "input_tokens", 0, where)
    _check_min(arrays["output_tokens"], "output_tokens", 0, where)
    raw = arrays["blocks"]
    stored_ids = None
    if len(raw):
        dense = False
        lo, hi = int(raw.min()), int(raw.max())
        if lo >= 0 and hi < len(raw):  # only then is a seen-mask no larger than the trace
            seen = np.zeros(hi + 1, dtype=bool)
            seen[raw] = True
            dense = bool(seen.all())
        if not dense:
            out["blocks"], stored_ids = remap_dense_ids(raw)
    return out, stored_ids


@njit
def densify_in_place(blocks, n_raw):
    """Renumber ids 0..n_raw-1 in place to 0..U-1 by first appearance; returns (raw ->
    dense, -1 for an id that never appears; U). The compiled, sort-free counterpart of
    :func:`remap_dense_ids` for ids already bounded by n_raw."""
    dense = np.full(n_raw, -1, np.int32)
    nxt = 0
    for i in range(len(blocks)):
        b = blocks[i]
        d = dense[b]
        if d < 0:
            d = nxt
            dense[b] = d
            nxt += 1
        blocks[i] = d
    return dense, nxt


def remap_dense_ids(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map arbitrary integer ids to 0..U-1 in order of first appearance: (the dense int32
    ids, the original id of each dense id)."""
    raw = np.asarray(raw)
    if len(raw) == 0:
        return np.zeros(0, dtype=np.int32), raw[:0].copy()
    uniq, first_idx, inverse = np.unique(raw, return_index=True, return_inverse=True)
    # rank unique values by first appearance so ids are stable and readable
    order = np.argsort(first_idx, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    if len(uniq) > np.iinfo(np.int32).max:
        raise ValueError("more than 2^31 unique blocks")
    return rank[inverse.reshape(-1)].astype(np.int32), uniq[order]
