"""Where aiconfigurator-core's data runs out: the measured grid behind a step's three parts.

The package keeps its measurements as parquet tables, one directory per GPU, op family,
backend and version (`systems/data/<gpu>/<family>/<backend>/<version>/*.parquet`).
Beyond a table's grid it extrapolates without saying so. A step leaves the data when
- its tokens exceed the largest GEMM `m` or MoE `num_tokens` measured for the model's
  shape (the non-attention part);
- a prefill chunk's full sequence (cached + new) exceeds the longest context-attention
  `isl` measured at its batch (rows for the model's heads per GPU and head size);
- the decodes' batch, or their mean context, exceeds the generation-attention grid
  (`isl + step` per batch).
The grids are triangles (the longer the sequence, the smaller the batch measured), so
the limit is kept per measured batch; a batch between two is held to the larger one's.
Only standard attention (GQA) is read; other models get no limit (and the warning says
the range is unknown).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

INF = float("inf")


@dataclass(frozen=True)
class Grid:
    tokens: float = INF  # most tokens one pass was measured at
    ctx_batch: np.ndarray = field(default_factory=lambda: np.zeros(0))  # context attention: batches measured
    ctx_len: np.ndarray = field(default_factory=lambda: np.zeros(0))  # and the longest sequence at each
    gen_batch: np.ndarray = field(default_factory=lambda: np.zeros(0))  # generation attention: batches
    gen_len: np.ndarray = field(default_factory=lambda: np.zeros(0))  # and the longest context at each
    known: bool = False

    def describe(self) -> str:
        if not self.known:
            return "the measured range is unknown for this model (not standard attention, or no rows for its shape)"
        return (f"measured: up to {self.tokens:,.0f} tokens per pass; prefill attention up to "
                f"{self.ctx_len.max():,.0f} tokens of sequence at batch {self.ctx_batch[np.argmax(self.ctx_len)]:.0f} "
                f"(down to {self.ctx_len.min():,.0f} at batch {self.ctx_batch.max():.0f}); decode attention up to "
                f"{self.gen_len.max():,.0f} tokens of context at batch {self.gen_batch[np.argmax(self.gen_len)]:.0f} "
                f"(down to {self.gen_len.min():,.0f} at batch {self.gen_batch.max():.0f})")


def _table(root: Path, family: str, backend: str, ver: str, name: str) -> Path | None:
    """The version's table, else the newest older version's (the package fills backward)."""
    d = root / family / backend
    if (d / ver / name).is_file():
        return d / ver / name
    older = sorted((p for p in d.glob(f"*/{name}")), key=lambda p: p.parent.name)
    return older[-1] if older else None


def _read(path: Path | None, columns: list[str]) -> dict | None:
    """The columns as numpy arrays (pyarrow alone: pandas would add a second to the build)."""
    if path is None:
        return None
    import pyarrow.parquet as pq  # a dependency of the package (and of MLflow)

    have = set(pq.read_schema(path).names)
    tab = pq.read_table(path, columns=[c for c in columns if c in have])
    cols = {c: tab.column(c).to_numpy() for c in columns if c in have}
    if "window_size" in columns and "window_size" not in have:  # older tables: full attention only
        cols["window_size"] = np.zeros(tab.num_rows, np.int64)
    return cols


def _per_batch(batch: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each measured batch and the longest length measured at it."""
    b = np.unique(batch)
    return b.astype(np.float64), np.array([length[batch == x].max() for x in b], np.float64)


def measured_grid(pkg: Path, gpu: str, backend: str, ver: str, arch, tp: int, moe_tp: int, moe_ep: int) -> Grid:
    if not arch.standard:
        return Grid()
    try:
        return _grid(pkg / "systems" / "data" / gpu, backend, ver, arch, tp, moe_tp, moe_ep)
    except (OSError, KeyError, ValueError, AttributeError):  # the package's private layout changed: say unknown
        return Grid()


def _grid(root: Path, backend: str, ver: str, arch, tp: int, moe_tp: int, moe_ep: int) -> Grid:
    heads, kv = arch.heads // tp, max(arch.kv_heads // tp, 1)
    cols = ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "window_size"]
    ctx = _read(_table(root, "attention", backend, ver, "context_attention_perf.parquet"), cols)
    gen = _read(_table(root, "attention", backend, ver, "generation_attention_perf.parquet"), cols + ["step"])
    if ctx is None or gen is None:
        return Grid()

    def shape(d):
        return (d["num_heads"] == heads) & (d["num_key_value_heads"] == kv) & (d["head_dim"] == arch.head_dim) \
            & (d["window_size"] == 0)

    ck, gk = shape(ctx), shape(gen)
    if not ck.any() or not gk.any():
        return Grid()
    cb, cl = _per_batch(ctx["batch_size"][ck], ctx["isl"][ck])
    gb, gl = _per_batch(gen["batch_size"][gk], gen["isl"][gk] + gen["step"][gk])
    tokens = INF
    gemm = _read(_table(root, "gemm", backend, ver, "gemm_perf.parquet"), ["m"])
    if gemm is not None and len(gemm["m"]):
        tokens = float(gemm["m"].max())
    if arch.experts:
        moe = _read(_table(root, "moe", backend, ver, "moe_perf.parquet"),
                    ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"])
        if moe is not None:
            mk = (moe["hidden_size"] == arch.hidden) & (moe["inter_size"] == arch.moe_intermediate) \
                & (moe["topk"] == arch.top_k) & (moe["num_experts"] == arch.experts) \
                & (moe["moe_tp_size"] == moe_tp) & (moe["moe_ep_size"] == moe_ep)
            tokens = min(tokens, float(moe["num_tokens"][mk].max())) if mk.any() else tokens
    return Grid(tokens, cb, cl, gb, gl, True)
