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

import numba

_PKG = Path(__file__).resolve().parent


def _source_digest() -> str:
    h = hashlib.sha256(numba.__version__.encode())
    for p in sorted(_PKG.rglob("*.py")):
        h.update(str(p.relative_to(_PKG)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _configure_cache() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return  # the user chose a location; respect it
    base = Path(os.environ.get("KVSWEEP_CACHE_DIR", Path.home() / ".cache" / "kvcache-sweep"))
    numba.config.CACHE_DIR = str(base / "numba" / _source_digest())


_configure_cache()

# Every hot function uses these options. fastmath stays off: results must be exact.
njit = numba.njit(cache=True, nogil=True)
