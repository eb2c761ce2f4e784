"""The measured step model's tables, built once from aiconfigurator-core and kept on disk.

The package's engine is a Rust extension numba cannot call, and at 10-150 us a query it
would dominate a replay. Its step estimate is additive (verified against its own
`mixed_step_breakdown` and `estimate_forward_pass_time_ms`, tests/test_stepmodel_measured.py):
a pass = S(tokens) + context attention + decode attention, so four small tables
reproduce any step (sim_core.serving.measured.step):
  s_dense  S(T) for every T up to 16,384 (its GEMM and MoE tables step at k and k + 1
           tokens, so no sparser grid follows them); s_x/s_y beyond, to 1M tokens (past
           its MoE grid a query costs 100 us, not 4)
  ca       CA(k, n, c) on a grid of chunks k x new tokens n x cached tokens c
  da       DA(b, L) on a grid of decodes b x context L
  dn       Dn(b), a decode-only pass's non-attention work (dense to 256)
plus the measured grid (sim_core.serving.measured.grid). Tables are keyed by the model (its
config's digest), GPU, backend, TP split, the package's version and its data version,
and stored as `<KVSWEEP_CACHE_DIR or ~/.cache/kvcache-sweep>/aic/<key>.npz`: the same
configuration reads the same file, a changed one builds its own (a few seconds).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import aic
from .grid import measured_grid
from .step import MODES, pack

SCHEMA = 1  # bump when a table's grid or meaning changes: old files are then ignored
DENSE = 16384
S_COARSE = list(range(DENSE, 32768, 1024)) + [32768, 40960, 49152, 65536, 98304, 131072, 196608, 262144, 524288,
                                             1048576]
CA_K = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]
CA_N = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
        12288, 16384, 32768]
CA_C = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
        24576, 32768, 49152, 65536, 98304, 131072, 262144, 524288, 1048576]
DA_B = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
DA_L = [1, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
        16384, 24576, 32768, 49152, 65536, 98304, 131072, 196608, 262144, 524288, 1048576]
DN_X = list(range(1, 257)) + [257, 320, 384, 448, 512, 513, 640, 768, 769, 896, 1024, 1025, 1536, 2048, 3072, 4096,
                              8192]
CA_MAX_TOKENS = 1 << 24  # k x (n + c) beyond this is a step no engine schedules: filled by extrapolation


@dataclass(frozen=True)
class Config:
    """One measured configuration: what a table depends on."""

    model: aic.ModelRef
    gpu: str
    backend: str
    tp: int
    moe_tp: int
    moe_ep: int

    def key(self) -> dict:
        return {"schema": SCHEMA, "model": self.model.name, "config": self.model.digest, "gpu": self.gpu,
                "backend": self.backend, "tp": self.tp, "moe_tp": self.moe_tp, "moe_ep": self.moe_ep,
                "package": aic.version(), "data": aic.data_version(self.gpu, self.backend)}

    def path(self) -> Path:
        k = self.key()
        h = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()[:16]
        stem = f"{k['model'].rstrip('/').split('/')[-1]}-{self.gpu}-{self.backend}-tp{self.tp}-{h}"
        return cache_dir() / f"{stem}.npz"


def cache_dir() -> Path:
    """Beside the numba cache (sim_core.jit): one directory per kind of derived data."""
    return Path(os.environ.get("KVSWEEP_CACHE_DIR", Path.home() / ".cache" / "kvcache-sweep")) / "aic"


def configure(model, hardware, backend: str, tp: int, moe_tp: int = 0, moe_ep: int = 1) -> Config:
    """Check every input before the package builds anything; ValueError naming the field."""
    ref = aic.resolve_model(model)  # refuses an id the package would fetch, first
    aic.require()
    gpu = aic.resolve_gpu(hardware, backend)
    moe_ep = int(moe_ep or 1)
    moe_tp = int(moe_tp or max(tp // moe_ep, 1))
    why = ref.arch.tp_problem(tp, moe_tp, moe_ep)
    if why:
        raise ValueError(f"engine.tp={tp} cannot split {ref.name}: {why}; valid engine.tp: "
                         f"{', '.join(map(str, ref.arch.valid_tp()))}"
                         + (" (with moe_tp x moe_ep = tp)" if ref.arch.experts else ""))
    return Config(ref, gpu, backend, int(tp), moe_tp, moe_ep)


_MEMO: dict[Path, dict] = {}


def tables(cfg: Config, memo: bool = True) -> tuple[dict, Path, bool]:
    """(tables, their file, whether this call built them). Read from disk when present."""
    path = cfg.path()
    if memo and path in _MEMO:
        return _MEMO[path], path, False
    built = False
    t = _read(path)
    if t is None:
        t = build(cfg)
        _write(path, t)
        built = True
    _MEMO[path] = t
    return t, path, built


def _read(path: Path) -> dict | None:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, EOFError, ValueError, KeyError):  # absent or torn: rebuild
        return None


def _write(path: Path, t: dict) -> None:
    """Atomically (a temporary file renamed): concurrent replays never read half a table."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez(f, **t)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(cfg: Config) -> dict:
    """Query the package over the grids (seconds; logged noise silenced)."""
    t0 = time.perf_counter()
    e = aic.build_engine(cfg.model, cfg.gpu, cfg.backend, cfg.tp, cfg.moe_tp, cfg.moe_ep)
    mix = e.mixed_step_breakdown  # (ctx, gen, isl, osl, prefix) -> (total, S, CA, DA)
    with aic.quiet():
        # S(T): one chunk of T tokens, nothing cached
        s_dense = np.array([mix(T, 0, T, 1, 0)[1] for T in range(1, DENSE + 1)])
        s_y = np.array([mix(T, 0, T, 1, 0)[1] for T in S_COARSE])
        # CA of k chunks (n new after c cached): ctx = k (n + c) with isl = n + c makes the
        # package price k requests of that shape in one attention call, undivided
        ca = np.full((len(CA_K), len(CA_N), len(CA_C)), np.nan)
        for i, k in enumerate(CA_K):
            for j, n in enumerate(CA_N):
                for m, c in enumerate(CA_C):
                    if k * (n + c) <= CA_MAX_TOKENS:
                        ca[i, j, m] = mix(k * (n + c), 0, n + c, 1, c)[2]
        _fill(ca)
        # DA(b, L): decodes at context L are the package's isl = L - 1, osl = 1
        da = np.array([[mix(0, b, L - 1, 1, 0)[3] if L > 1 else mix(0, b, 1, 1, 0)[3] for L in DA_L] for b in DA_B])
        dn = np.array([e.decode_step_latency(b, 1, 1) - mix(0, b, 1, 1, 0)[3] for b in DN_X])
    g = measured_grid(aic.require(), cfg.gpu, cfg.backend, cfg.key()["data"], cfg.model.arch, cfg.tp, cfg.moe_tp,
                      cfg.moe_ep)
    meta = {**cfg.key(), "build_s": round(time.perf_counter() - t0, 2), "grid": g.describe(), "grid_known": g.known}
    return {"s_dense": s_dense, "s_x": np.array(S_COARSE, float), "s_y": s_y, "ca_k": np.array(CA_K, float),
            "ca_n": np.array(CA_N, float), "ca_c": np.array(CA_C, float), "ca": ca, "da_b": np.array(DA_B, float),
            "da_l": np.array(DA_L, float), "da": da, "dn_x": np.array(DN_X, float), "dn_y": dn,
            "grid_tokens": np.array(g.tokens), "grid_ctx_batch": g.ctx_batch, "grid_ctx_len": g.ctx_len,
            "grid_gen_batch": g.gen_batch, "grid_gen_len": g.gen_len, "meta": np.array(json.dumps(meta))}


def _fill(ca: np.ndarray) -> None:
    """Cells past CA_MAX_TOKENS, extrapolated along k from the two largest measured k."""
    for j in range(ca.shape[1]):
        for m in range(ca.shape[2]):
            col = ca[:, j, m]
            ok = np.flatnonzero(~np.isnan(col))
            if len(ok) == len(col):
                continue
            if len(ok) < 2:
                col[np.isnan(col)] = col[ok[0]] if len(ok) else 0.0
                continue
            a, b = ok[-2], ok[-1]
            slope = (col[b] - col[a]) / (CA_K[b] - CA_K[a])
            for i in np.flatnonzero(np.isnan(col)):
                col[i] = col[b] + slope * (CA_K[i] - CA_K[b])


def meta(t: dict) -> dict:
    return json.loads(str(t["meta"]))


def model_arrays(cfg: Config, mode: str = "fused") -> tuple[np.ndarray, dict]:
    """(packed parameters for the compiled step, the tables' meta)."""
    if mode not in MODES:
        raise ValueError(f"step_model measured has no composition {mode!r}; valid: {', '.join(MODES)}")
    t, _, _ = tables(cfg)
    return pack(t, mode), meta(t)
