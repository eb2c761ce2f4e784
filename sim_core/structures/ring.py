"""Rings inside a packed state (structures/packed.py), in an int array I.

* Distance rings (the learned policies' past distances): the last n values at
  I[o:o+n], of k recorded so far (ring_record, ring_newest).
* FIFO rings of block ids (3L-Cache's history and its queue of new blocks), named by the
  tuple `s` of their header slots in h (the state's int64 array): (offset of the slots
  in I, slot of the oldest entry, number of entries, capacity). The caller checks for
  room before a push.
"""
from __future__ import annotations

from ..jit import inline_njit, njit


@njit
def ring_record(I, o, n, k, d):
    """Record distance d in a ring of the last n distances at I[o:o+n] holding k so far
    (k is kept in [n, 2n) once the ring is full); returns the new k."""
    I[o + k % n] = d
    k += 1
    return k - n if k >= 2 * n else k


@njit
def ring_newest(I, o, n, k, i):
    """The i-th newest distance of such a ring (i < min(k, n))."""
    return I[o + (k - 1 - i) % n]


@inline_njit
def fifo_at(h, I, s, i):
    """The i-th oldest entry of FIFO ring s."""
    return I[h[s[0]] + (h[s[1]] + i) % h[s[3]]]


@inline_njit
def fifo_push(h, I, s, b):
    """Append b to FIFO ring s; returns its slot (I[h[s[0]] + slot] holds it)."""
    slot = (h[s[1]] + h[s[2]]) % h[s[3]]
    I[h[s[0]] + slot] = b
    h[s[2]] += 1
    return slot


@inline_njit
def fifo_drop(h, s, n):
    """Forget the n oldest entries of FIFO ring s."""
    h[s[1]] = (h[s[1]] + n) % h[s[3]]
    h[s[2]] -= n
