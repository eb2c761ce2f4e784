"""Policy state packed into a few flat arrays, whose segment offsets sit in a header.

numba adjusts the reference count of every array of a state around each hook call it
cannot fully inline, and its compile time grows with the number of fields, so the
larger policies (lrb, threelcache, workload_aware, asymcache) keep their tables as
segments of an int64, an int32 and a float64 array. These helpers lay the segments
out; structures/learned.py works inside the learned policies' packed states.
"""
from __future__ import annotations


def layout(sizes) -> tuple[list[int], int]:
    """Start offsets of consecutive segments of the given sizes, and the total."""
    out, o = [], 0
    for n in sizes:
        out.append(o)
        o += int(n)
    return out, o


def header_layout(sizes: list[tuple[int, int]], first: int) -> list[int]:
    """Start offsets of consecutive segments (header slot, length) from `first`, then the end."""
    out, end = layout([n for _, n in sizes])
    return [first + o for o in out] + [first + end]
