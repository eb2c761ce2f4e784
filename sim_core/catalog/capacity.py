"""Cache capacities: what a capacity in blocks is, bytes <-> blocks via the model's KV bytes per
block, and the capacity from which a trace never evicts."""
from __future__ import annotations

import numbers
import re

import numpy as np

from .models import ModelConfig, get_model

GiB = 1 << 30
TiB = 1 << 40
_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": GiB, "tib": TiB,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def blocks_for_bytes(nbytes: float, model: ModelConfig | str, block_tokens: int) -> int:
    """Whole blocks that fit in `nbytes` (rounded to nearest, as in the paper's Table 2)."""
    per_block = get_model(model).kv_bytes_per_block(block_tokens)
    return int(round(nbytes / per_block))


def bytes_for_blocks(blocks: int, model: ModelConfig | str, block_tokens: int) -> int:
    return int(blocks) * get_model(model).kv_bytes_per_block(block_tokens)


def parse_size(text: str | int | float) -> tuple[float, str]:
    """'24GiB' -> (24*2^30, 'bytes'); '16384' or '16384blocks' -> (16384, 'blocks')."""
    if isinstance(text, (int, np.integer)):
        return float(text), "blocks"
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m:
        raise ValueError(f"bad capacity {text!r}: expected e.g. 24GiB, 1TiB or 16384 (blocks)")
    value, unit = float(m.group(1)), m.group(2).lower()
    if unit in ("", "blocks", "block"):
        return value, "blocks"
    if unit not in _UNITS:
        raise ValueError(f"bad capacity unit in {text!r}; valid: blocks, {', '.join(_UNITS)}")
    return value * _UNITS[unit], "bytes"


def to_blocks(spec: str | int | float, model: ModelConfig | str, block_tokens: int) -> int:
    value, kind = parse_size(spec)
    blocks = int(value) if kind == "blocks" else blocks_for_bytes(value, model, block_tokens)
    if blocks < 1:
        raise ValueError(f"capacity {spec!r} is less than one {block_tokens}-token block")
    return blocks


def log_spaced_bytes(lo: str, hi: str, n: int) -> list[float]:
    """n log-spaced sizes in bytes from lo to hi inclusive (paper65: 24GiB..12TiB, 65)."""
    a, ka = parse_size(lo)
    b, kb = parse_size(hi)
    if ka != "bytes" or kb != "bytes":
        raise ValueError("log-spaced capacities need byte units")
    return list(np.geomspace(a, b, n))


def human_gib(gib: float, digits: int = 4, sep: str = "") -> str:
    """24GiB, 1.5TiB, 512MiB: short labels for tables and plots (`digits` significant
    digits below a TiB, 3 from a TiB on; `sep` between number and unit)."""
    if gib >= 1000:
        return f"{gib / 1024:.3g}{sep}TiB"
    if gib < 1:
        return f"{gib * 1024:.{digits}g}{sep}MiB"
    return f"{gib:.{digits}g}{sep}GiB"


def saturation_capacity(trace) -> int:
    """The capacity from which no policy ever evicts: the cache then holds every block
    the trace has seen (and every request fits), so the replay is the same for every
    larger capacity and every policy - capacities at or above it are replayed once."""
    return max(trace.n_unique, trace.max_request_blocks, 1)


def as_capacity(c) -> int:
    """A capacity in blocks: a positive integer (or an integral float such as 512.0).
    Booleans, strings and fractional values are refused rather than cut."""
    if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Real):
        raise ValueError(f"capacity must be a whole number of blocks, got {c!r} ({type(c).__name__})")
    if isinstance(c, numbers.Integral):
        v = int(c)
    elif float(c).is_integer():
        v = int(c)
    else:
        raise ValueError(f"capacity must be a whole number of blocks, got {c!r}")
    if v < 1:
        raise ValueError(f"capacity must be at least one block, got {v}")
    return v
