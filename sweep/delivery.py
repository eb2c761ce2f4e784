"""Hand finished results to MLflow from a background thread, in order.

Results are in the journal before they are queued here, so a tracking server that goes
away costs nothing: the sweep keeps simulating, the user sees one warning at once, and
this thread retries (backing off up to 10 s) until the server is back or the sweep ends.
Every MLflow call of a running sweep happens in this thread (heartbeats included).
"""
from __future__ import annotations

import logging
import queue
import threading
import time

log = logging.getLogger("sweep")


class Delivery:
    def __init__(self, tracker, journal, journal_uri: str):
        self.tracker = tracker
        self.journal = journal
        self.uri = journal_uri
        self.q: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.down_since: float | None = None
        self.warned = False
        self.thread = threading.Thread(target=self._loop, name="mlflow-delivery", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ producer side
    def points(self, curve, points: dict) -> None:
        self.q.put(("points", curve, points))

    def finish(self, curve, status: str, error: str | None = None) -> None:
        self.q.put(("finish", curve, (status, error)))

    def drain(self, timeout: float) -> int:
        """Wait up to `timeout` s for the queue to empty; returns the tasks left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.q.unfinished_tasks == 0:
                return 0
            time.sleep(0.05)
        return self.q.unfinished_tasks

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)

    @property
    def backlog(self) -> int:
        return self.q.unfinished_tasks

    # ------------------------------------------------------------------ consumer side
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                task = self.q.get(timeout=1.0)
            except queue.Empty:
                self._try(self.tracker.heartbeat, quiet=True)
                continue
            try:
                delay = 0.5
                while not self._stop.is_set():
                    if self._try(lambda: self._do(task)):
                        break
                    self._stop.wait(delay)
                    delay = min(delay * 2, 10.0)
            finally:
                self.q.task_done()

    def _do(self, task) -> None:
        kind, curve, arg = task
        if kind == "points":
            new = {i: r for i, r in arg.items() if i not in curve.stored}
            if new:
                self.tracker.log_points(curve, new)
                self.journal.mark_delivered(self.uri, [(curve.run_id, i) for i in new])
            if len(curve.stored) == len(self.tracker.capacities) and not curve.done:
                self.tracker.finish_curve(curve, "FINISHED")
        elif not curve.done:
            self.tracker.finish_curve(curve, *arg)

    def _try(self, fn, quiet: bool = False) -> bool:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any store error: keep the results, retry
            if self.down_since is None:
                self.down_since = time.monotonic()
            if not quiet and not self.warned:
                self.warned = True
                log.warning("MLflow (%s) is not taking results: %s. Simulation goes on; results are "
                            "safe in %s and are sent when it is back", self.tracker.uri,
                            _short(e), self.journal.path)
            return False
        if self.warned:
            log.warning("MLflow is back after %.0fs: sending the %d queued result batch(es)",
                        time.monotonic() - self.down_since, self.q.unfinished_tasks)
        self.down_since, self.warned = None, False
        return True


def _short(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return f"{type(e).__name__}: {s[0][:200]}" if s else type(e).__name__
