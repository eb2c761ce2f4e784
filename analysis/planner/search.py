"""The search: the cheapest candidate that meets the SLO, replaying as few as it takes.

Candidates come in *lanes*: the candidates of one shape (space.Candidate.shape), replicas
ascending, so their cost ascends too. What prunes (docs/planning.md#how-the-search-prunes):

* the prefill bound (bound.py): a lane starts at the fewest replicas that can compute the
  trace's prefill work in time; below, nothing is replayed;
* one look at every lane at its most replicas: a miss there settles the lane; the lanes
  that meet are taken lowest value first;
* monotonicity: at equal load, TTFT falls as replicas of one shape are added, so a lane is
  bisected for its first candidate that meets the SLO. It is checked on every pair of a
  lane's replayed candidates (each SLO value must not rise with replicas, nor the SLO
  turn from met to missed); where it fails, the lane is scanned upwards from its start
  instead, and the outcome says so;
* dominance: a candidate that meets the SLO makes every dearer one uninteresting, in its
  lane and in the others of the search: a lane is searched only up to the price of the
  cheapest meeting candidate found so far (the incumbent), first at its most replicas
  within that price, so a lane that cannot do better drops out after one replay.
  Candidates priced the same as the incumbent are still looked at, so that a tie goes to
  the lower TTFT.

`search(...)` is a generator: it yields a Candidate it needs replayed and receives its
sim_core.ServeResult, so the same search runs in-process or on the sweep's runner
(evaluate.drive). Its decisions depend on the results only, never on the order replays
finish in: a re-run over journaled results asks for the same candidates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generator


@dataclass
class Lane:
    """One shape's candidates (replicas ascending) and what the search learnt of them."""

    shape: tuple
    cands: list  # space.Candidate
    costs: list  # per hour, ascending
    start: int = 0  # candidates below this cannot meet the SLO (the prefill bound, or a lighter load)
    bound_start: int = 0  # the prefill bound's own start (start may be higher: see plan's later loads)
    hint: int | None = None  # where to look first
    lo: int = 0  # every candidate below fails (replayed, or by monotonicity)
    answer: int | None = None  # index of the cheapest candidate found meeting the SLO (see status)
    scanned: str = ""  # why monotonicity failed here (the lane was scanned), or ""

    @property
    def status(self) -> str:
        if self.answer is not None and self.lo >= self.answer:
            return "meets"  # answer is the lane's cheapest meeting candidate
        if self.lo >= len(self.cands):
            return "misses"  # up to its most replicas
        return "dominated"  # not searched below the incumbent's price (answer, if any, meets but may not be its cheapest)


@dataclass
class Outcome:
    best: tuple | None  # (Candidate, ServeResult) or None
    lanes: list
    seen: dict = field(default_factory=dict)  # Candidate -> ServeResult, in the order replayed
    notes: list = field(default_factory=list)


def violation(lane: Lane, seen: dict, slo, tolerance: float) -> str:
    """Why the lane's replayed candidates are not monotone in replicas ("" if they are)."""
    pts = [(c, seen[c]) for c in lane.cands if c in seen]
    for (a, ra), (b, rb) in zip(pts, pts[1:]):
        if slo.meets(ra) and not slo.meets(rb):
            return f"{a.label()} meets the SLO but {b.replicas} replicas do not"
        va, vb = slo.values(ra), slo.values(rb)
        for k in va:
            worse = vb[k] < va[k] * (1 - tolerance) if k == "goodput" else vb[k] > va[k] * (1 + tolerance)
            if worse:
                return f"{k} goes from {va[k]:.4g} at {a.replicas} to {vb[k]:.4g} at {b.replicas} replicas ({a.label()})"
    return ""


def search(lanes: list, slo, *, order: Callable, tolerance: float = 0.0, ranked: bool = False) -> Generator:
    """Yield candidates to replay, receive their results; return an Outcome. `order(c)`
    breaks ties between equally priced candidates that meet the SLO with the same value.
    `ranked`: the lanes come likeliest first (a lighter load's answers), so no first look
    at every lane is needed to order them."""
    seen: dict = {}
    inc = None  # (rank, Candidate, ServeResult): the cheapest meeting candidate so far

    def get(c):
        if c not in seen:
            seen[c] = yield c
        return seen[c]

    def offer(c, cost, res) -> None:
        nonlocal inc
        r = (cost, float(getattr(res, slo.primary.field)), order(c))
        if inc is None or r < inc[0]:
            inc = (r, c, res)

    def dearer(cost: float) -> bool:
        """Priced above the incumbent (a tie is still looked at)."""
        return inc is not None and cost > inc[0][0] * (1 + 1e-12)

    def cap(lane: Lane) -> int:
        """How many of the lane's candidates are priced at most the incumbent."""
        return sum(1 for x in lane.costs if not dearer(x))

    def known(lane: Lane) -> tuple:
        """(lo, hi) by monotonicity from the lane's replays: below lo all miss, hi is the
        first replayed that meets (the lane's length if none)."""
        lo, hi = lane.start, len(lane.cands)
        for i in range(lane.start, len(lane.cands)):
            c = lane.cands[i]
            if c in seen:
                if slo.meets(seen[c]):
                    hi = min(hi, i)
                else:
                    lo = max(lo, i + 1)
        return lo, hi

    def look(lane: Lane, i: int):
        res = yield from get(lane.cands[i])
        if slo.meets(res):
            offer(lane.cands[i], lane.costs[i], res)
        lane.scanned = lane.scanned or violation(lane, seen, slo, tolerance)
        return res

    def bisect(lane: Lane, settle: bool):
        """(lo, hi) for the lane. With `settle`, first try its hint, or its most replicas
        priced at most the incumbent: a miss there settles the lane in one replay."""
        while not lane.scanned:
            lo, hi = known(lane)
            h = min(hi, cap(lane))
            if lo >= h:
                return lo, hi
            if settle and lane.hint is not None and lo <= lane.hint < h and lane.cands[lane.hint] not in seen:
                i = lane.hint
            elif settle and lane.cands[h - 1] not in seen:
                i = h - 1
            else:
                i = (lo + h) // 2
            settle = False
            yield from look(lane, i)
        return known(lane)

    def scan(lane: Lane, frm: int):
        """(lo, hi) from replaying the lane upwards from `frm`, assuming nothing."""
        n = len(lane.cands)
        for i in range(frm, n):
            if dearer(lane.costs[i]):
                return i, n
            res = yield from get(lane.cands[i])
            if slo.meets(res):
                offer(lane.cands[i], lane.costs[i], res)
                return i, i
        return n, n

    # first, one look at every lane: at its hint (a heavier load: the lighter one's answer
    # scaled), else at its most replicas priced at most the incumbent. A lane that misses
    # at its most replicas is settled; the others are bisected, the lowest value first (the
    # likeliest to need the fewest replicas, so that its answer prunes the rest)
    first = {}
    for lane in [] if ranked else lanes:
        lo, hi = known(lane)
        h = min(hi, cap(lane))
        if lo < h:
            i = lane.hint if lane.hint is not None and lo <= lane.hint < h else h - 1
            res = yield from look(lane, i)
            first[id(lane)] = (not slo.meets(res), float(getattr(res, slo.primary.field)))
    for k, lane in enumerate(lanes if ranked else sorted(lanes, key=lambda ln: first.get(id(ln), (True, math.inf)))):
        lo, hi = yield from bisect(lane, settle=ranked or k > 0)
        if not lane.scanned and hi < len(lane.cands) and hi == lane.start > lane.bound_start:
            # the lane starts above the prefill bound because a lighter load failed there:
            # check that assumption where the answer rests on it
            below = lane.cands[hi - 1]
            if slo.meets((yield from get(below))):
                lane.scanned = f"{below.label()} meets the SLO at this load but not at a lighter one"
        if lane.scanned:  # the bisection's inferences are unsafe here: every candidate from the bound up
            lo, hi = yield from scan(lane, lane.bound_start)
        lane.lo, lane.answer = lo, (hi if hi < len(lane.cands) else None)
    notes = [f"monotonicity failed ({ln.scanned}): that shape was scanned" for ln in lanes if ln.scanned]
    return Outcome(best=None if inc is None else (inc[1], inc[2]), lanes=lanes, seen=seen, notes=notes)


def front(points: list) -> list:
    """The cost / value front of (cost, value, item) points: each point no other is both
    cheaper-or-equal and lower-or-equal than (ascending cost, strictly falling value)."""
    out, best = [], math.inf
    for p in sorted(points, key=lambda p: (p[0], p[1])):
        if p[1] < best:
            out.append(p)
            best = p[1]
    return out
