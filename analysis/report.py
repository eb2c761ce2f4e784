"""`python -m analysis report`: report.html and PNGs of a sweep, from the tracking store.

Nothing is re-simulated: it reads the sweep run's curves.csv (sweep.report.sweeps) and
renders it as the sweep itself does at its end (sweep.report.html).
"""
from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from pathlib import Path

from sweep.report.html import log_report, write_report
from sweep.report.sweeps import NotFound, load_sweep, resolve_parent
from sweep.store import default_uri, quiet_mlflow, sqlite_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m analysis report",
        description=textwrap.fill(
            "Write the report of a sweep (report.html and one PNG per cost model) from the tracking store: per "
            "cost model, curves zoomed to the capacities below saturation with their difference to LRU, a ranking "
            "per regime (HBM 24-120 GiB, memory pool 0.25-12 TiB), holes per request of the compute-aware "
            "policies, and a paragraph naming the best online policy, its margin over LRU and the headroom to "
            "the oracle; a tiered sweep adds pool sizing (served ratio, TTFT, knee), a windowed one the hit ratio "
            "per window and who wins the windows. Nothing is re-simulated: it reads the sweep run's curves.csv "
            "(and windows.csv, window_ranking.csv). The sweep logs the same "
            "report to its parent run when it ends.", 88),
        epilog="Examples:\n  python -m analysis report freeinference-synthetic\n"
               "  python -m analysis report 3f2a...e1 --tracking-uri http://mlflow:5000 --log\n"
               "Exit status: 0 written; 2 no such experiment or run, or no store.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="experiment name or id (its newest sweep run), or a sweep run id "
                                   "(a curve run id stands for its sweep)")
    ap.add_argument("--tracking-uri", default=None,
                    help="tracking store (default: sqlite:///<cwd>/mlflow.db, where `python -m sweep` records)")
    ap.add_argument("--out", default=None, help="output directory (default: ./report-<first 8 chars of the run id>)")
    ap.add_argument("--log", action="store_true", help="also attach report.html and plots/ to the sweep run "
                                                       "(replacing the ones the sweep logged)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    uri = args.tracking_uri or default_uri()
    db = sqlite_path(uri)
    if db is not None and not db.exists():
        print(f"error: no tracking store at {db} (run it where you ran the sweep, or pass --tracking-uri)",
              file=sys.stderr)
        return 2
    quiet_mlflow()
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        run_id = resolve_parent(client, args.target)
        table = load_sweep(client, run_id)
    except NotFound as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or f"report-{run_id[:8]}")
    path = write_report(table, out)
    print(f"report of sweep run {table.run_name} ({run_id}), experiment {table.experiment!r}: {path.resolve()}")
    if args.log:
        log_report(client, run_id, out)
        print(f"logged report.html and plots/ to run {run_id}")
    return 0
