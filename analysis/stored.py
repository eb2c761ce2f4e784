"""Serving results `advise` can read instead of replaying them: whatever a sweep (or an
earlier advise) computed under the same key, in the journal or the tracking store.

A point's key is the sweep's own (sweep.fleet.identity: the trace's content, the policy
and its parameters, every serving setting, the load, the route, the capacity, the
simulator's source), so a result is reused exactly where the sweep would reuse it. What
advise replays itself goes to the journal, where the next sweep or advise finds it.
"""
from __future__ import annotations

import logging
from pathlib import Path

from sim_core import get_policy
from sim_core.digest import source_digest, trace_digest
from sweep.fleet import curves, variants
from sweep.journal import Journal, Point
from sweep.serving import SERVE
from sweep.spec import choice
from sweep.tracking import Tracker

log = logging.getLogger("analysis")


class Stored:
    """The serving results known for (policy, load, route, capacity) of one advise, and
    the journal its own replays go to."""

    def __init__(self, cfg, uri: str | None, experiment: str, trace, fl, caps, policies, *, model, seed: int,
                 pools=(("", ()),)):
        self.journal = Journal(Path(str(cfg.tracking.get("journal") or "kvsweep-journal.jsonl")).expanduser().resolve())
        self.experiment = experiment
        vs = variants([choice(get_policy(p)) for p in policies], fl, pools)
        self.curves = curves(fl, vs, tuple(c.blocks for c in caps), trace=trace_digest(trace),
                             simulator=source_digest(), seed=seed, model=model)
        self.known = dict(self.journal.results())
        if uri is not None:
            try:
                self.known.update(Tracker(uri, experiment).stored_points(self.curves))
            except Exception as e:  # noqa: BLE001 - the journal and replays still answer
                log.warning("could not read stored serving results from %s: %s", uri, e)
        self.read = self.ran = 0
        self._new: list[Point] = []

    def key(self, policy: str, load: float, route: str, i: int, pool: str = "") -> str:
        c = next(c for c in self.curves if (c.policy, c.load, c.route, c.pool) == (policy, load, route, pool))
        return c.point_keys[i]

    def get(self, policy: str, load: float, route: str, i: int, replay, pool: str = ""):
        """The result at capacity index `i` (above lower tiers `pool`, a pool label): stored,
        or `replay()`'s (then journaled by save())."""
        k = self.key(policy, load, route, i, pool)
        if k in self.known:
            self.read += 1
            return self.known[k]
        res = replay()
        self.ran += 1
        self._new.append(Point(k, None, i, SERVE, res))
        return res

    def save(self) -> None:
        """Journal the replays advise ran, and say how many results it read instead."""
        if self._new:
            self.journal.add_points(None, self.experiment, self._new)
            self._new = []
        log.info("serving results: %d read from earlier sweeps or advice (the journal %s and the tracking store), "
                 "%d replayed here (journaled for the next)", self.read, self.journal.path, self.ran)
