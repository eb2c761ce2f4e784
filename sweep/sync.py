"""`python -m sweep.sync`: send journaled results that never reached MLflow.

A sweep writes every finished job to its journal (default ./kvsweep-journal.jsonl)
before MLflow sees it. If the tracking server stayed away until the sweep ended, the
points are still in the journal; this command logs them into their curve runs and ends
each run whose every capacity has now arrived (FINISHED, with its summary metrics and
curve.csv; the *_vs_lru_* differences and the report come from the end of a sweep).
Results of an offline sweep (tracking.offline=true) belong to no run yet: re-run the
same sweep command with a tracking store instead, which reuses them without simulating.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .curves import Curve
from .journal import Journal
from .plan import Capacity
from .store import quiet_mlflow
from .tracking import Tracker

log = logging.getLogger("sweep")


def sync(journal_path: str, uri: str | None = None) -> tuple[int, int]:
    """Returns (points delivered, runs finished)."""
    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    j = Journal(journal_path)
    pending = j.undelivered()
    delivered = finished = 0
    for store, items in pending.items():
        if uri and store != uri:
            continue
        client = MlflowClient(tracking_uri=store)
        by_run: dict = {}
        for _, p in items:
            by_run.setdefault(p.run_id, []).append(p)
        for run_id, pts in by_run.items():
            run = client.get_run(run_id)
            blocks = json.loads(run.data.params["capacities_blocks"])
            gib = json.loads(run.data.params["capacities_gib"])
            tr = Tracker.__new__(Tracker)  # an existing run: no experiment lookup needed
            tr.client, tr.uri = client, store
            tr.capacities = [Capacity(i, f"{g}GiB", b, g) for i, (b, g) in enumerate(zip(blocks, gib))]
            c = Curve.__new__(Curve)
            c.policy, c.cost_model = run.data.tags.get("policy"), run.data.tags.get("cost_model")
            c.pool = run.data.tags.get("pool", "")
            c.load = float(run.data.tags.get("load") or 0.0)  # a serving curve's arrival_speedup
            c.route = run.data.tags.get("route", "")  # and its replicas and router
            c.run_id, c.status, c.done = run_id, "RESUMED", False
            c.start_ms, c.times = run.info.start_time, {p.step: p.job for p in pts if p.job is not None}
            index = {b: i for i, b in enumerate(blocks)}
            stored = {index[b]: r for b, r in tr._points_of(run_id).items() if b in index}
            c.stored, c.rows = set(stored), dict(stored)
            new = {p.step: p.result for p in pts if p.step not in c.stored}
            if new:
                tr.log_points(c, new)
                c.rows.update(new)
            j.mark_delivered(store, [(run_id, p.step) for p in pts])
            delivered += len(new)
            if len(c.stored) == len(blocks) and run.info.status != "FINISHED":
                tr.finish_curve(c, "FINISHED")
                finished += 1
    return delivered, finished


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sweep.sync", description=__doc__.split("\n\n")[0],
                                 epilog="Run it in the directory you ran the sweep from, or pass --journal.")
    ap.add_argument("--journal", default="kvsweep-journal.jsonl", help="journal file (default: %(default)s)")
    ap.add_argument("--uri", default=None, help="only results meant for this tracking URI")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S")
    try:
        n, f = sync(args.journal, args.uri)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        log.error("sync failed: %s (the journal is unchanged; try again when the server answers)", e)
        return 1
    log.info("%d result(s) delivered, %d curve run(s) finished", n, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
