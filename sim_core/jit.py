"""Numba settings shared by every compiled module of sim_core.

Numba's on-disk cache only notices edits to the file that defines a function, not to
the policy hooks it inlines. We therefore key the cache directory by a hash of all
sim_core sources: any edit recompiles, unchanged code (tests, Ray actors, CI reruns)
loads compiled machine code from disk.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import warnings

import numba
from numba.core.errors import NumbaIRAssumptionWarning

_PKG = Path(__file__).resolve().parent


def _source_digest() -> str:
    h = hashlib.sha256(numba.__version__.encode())
    for p in sorted(_PKG.rglob("*.py")):
        h.update(str(p.relative_to(_PKG)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _configure_cache() -> None:
    # A user's NUMBA_CACHE_DIR is honoured as the base, still keyed by the source digest
    # (otherwise an edited policy hook would run with a stale compiled engine).
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user:
        base = Path(user) / "kvcache-sweep"
    else:
        base = Path(os.environ.get("KVSWEEP_CACHE_DIR", Path.home() / ".cache" / "kvcache-sweep")) / "numba"
    numba.config.CACHE_DIR = str(base / _source_digest())


def _tolerate_unreadable_index() -> None:
    """One index file holds the engine's entries for every policy state type. An entry
    whose type lives in a module another process cannot import (a policy defined in a
    script or a test's temporary module) would make numba fail to read the whole index;
    treat such an index as empty (recompile) instead of crashing."""
    from numba.core import caching

    # a private method (pyproject.toml bounds numba's version for it): if a numba release
    # renames it, run without the tolerance rather than fail at import
    original = getattr(getattr(caching, "IndexDataCacheFile", None), "_load_index", None)
    if original is None:
        return
    if getattr(original, "_kvsweep_safe", False):
        return

    def load_index(self):
        try:
            return original(self)
        except Exception:  # noqa: BLE001 - any unreadable index means "no cache"
            return {}

    load_index._kvsweep_safe = True
    caching.IndexDataCacheFile._load_index = load_index


_configure_cache()
_tolerate_unreadable_index()
# numba's pedantic SSA check warns about variables of inlined hooks; it is internal noise
warnings.filterwarnings("ignore", category=NumbaIRAssumptionWarning)

# Every hot function uses these options. fastmath stays off: results must be exact.
njit = numba.njit(cache=True, nogil=True)

# Policy hooks and the structure functions they call never allocate, so they are compiled
# without NRT: with it, every non-inlined call pays reference-count updates (atomic
# increments and decrements) on each array of the state -- measured 40x slower for a
# 14-array state in block mode. Same options as njit otherwise.
hook_njit = numba.njit(cache=True, nogil=True, _nrt=False)

# Helpers of hot loops and hooks: inlined at numba IR level into each caller, so no array
# crosses a call (no reference counting) and LLVM optimises across what was a call; as a
# separate function, BeladyCompute's per-access `_place` cost a sixth of its replay. Each
# inlined copy is compiled again: nested inlining (the heap's sifts into every heap call
# into every hook) tripled its cold compile time for an 18% faster Belady, so it is not used.
inline_njit = numba.njit(cache=True, nogil=True, inline="always")
