"""A sweep that did not run to its end (a signal, failed jobs) says how far it got, and
leaves no empty runs behind.

Its tables, verdicts and report read only the results it has: `note` heads each of
them with the share done, so "no policy meets the SLO" from 2 of 16 jobs is never read
as the sweep's answer. Curve runs that received no point are deleted at the end (MLflow
keeps deleted runs restorable; its UI lists active runs only), and so is the sweep run
itself when nothing at all ran: an early Ctrl-C leaves the experiment as it was.
"""
from __future__ import annotations

import logging
import signal

from . import signals

log = logging.getLogger("sweep")

#: The sweep run's tag with the share done ("6 of 48 results (12%)"); curve runs carry
#: their own (sweep.tracking.Tracker.finish_curve). The report reads it back.
TAG = "kvsweep.partial"


def share(st) -> tuple[int, int]:
    """(results the sweep has, results it was asked for): known before it and run by it."""
    return sum(len(c.rows) for c in st.curves), len(st.curves) * len(st.caps)


def why(st) -> str:
    """'stopped by SIGINT', '2 jobs failed', or '' when nothing cut the sweep short."""
    sig = signals.stopping()
    if sig is not None:
        return f"stopped by {signal.Signals(sig).name}"
    if st.n_failed:
        return f"{st.n_failed} job{'s' if st.n_failed > 1 else ''} failed"
    return ""


def text(st) -> str:
    """'6 of 48 results (12%)', or '' when the sweep has every result."""
    have, want = share(st)
    if not want or have >= want:
        return ""
    return f"{have:,} of {want:,} results ({100.0 * have / want:.0f}%)"


def summary(st) -> str:
    """'6 of 48 results (12%), stopped by SIGINT' (the sweep run's TAG, the report's banner), or ''."""
    done, cause = text(st), why(st)
    return f"{done}, {cause}" if done and cause else done


def note(st) -> str:
    """The line heading a partial sweep's tables, or ''."""
    got = summary(st)
    return (f"PARTIAL: {got}. Every table and verdict below reads only these; re-run the same command to "
            f"complete the sweep (what ran is reused, not recomputed)." if got else "")


def drop_empty(st) -> int:
    """Delete the curve runs this sweep opened that hold no point, and its sweep run when no
    curve of it holds one; returns how many runs went. Never raises."""
    tr = st.tracker
    if tr is None or tr.parent_id is None:
        return 0
    empty = [c for c in st.curves if c.run_id and c.status == "CREATED" and not c.stored and not c.rows]
    gone = 0
    for c in empty:
        try:
            tr.client.delete_run(c.run_id)
            c.run_id, gone = None, gone + 1
        except Exception as e:  # noqa: BLE001 - a leftover run is untidy, not wrong
            log.warning("could not remove the empty run of %s: %s", c.label, e)
    if not any(c.run_id or c.rows for c in st.curves):
        try:
            tr.client.delete_run(tr.parent_id)
            tr.parent_id, gone = None, gone + 1
        except Exception as e:  # noqa: BLE001
            log.warning("could not remove the empty sweep run: %s", e)
    if gone:
        log.info("removed %d run(s) that nothing ran for (MLflow keeps deleted runs restorable)", gone)
    return gone


def close_open(st) -> None:
    """Runs still RUNNING when a signal came while they were being opened (before results
    could flow): KILLED, as a later sweep would mark them. Never raises."""
    tr = st.tracker
    if tr is None:
        return
    open_ids = [c.run_id for c in st.curves if c.run_id and c.status in ("CREATED", "RESUMED")]
    for rid in open_ids + ([tr.parent_id] if tr.parent_id else []):
        try:
            tr.client.set_terminated(rid, "KILLED")
        except Exception as e:  # noqa: BLE001 - the next sweep marks a stale run KILLED anyway
            log.warning("could not mark run %s KILLED: %s", rid, e)
