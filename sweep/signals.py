"""SIGINT/SIGTERM end a sweep the same way at any phase: an `Interrupted` exception in
the main thread, cleanup (runs marked KILLED, Ray shut down), exit 128 + signal number.

Ray installs its own SIGTERM handler in ray.init() (it prints "SIGTERM received" and
aborts the driver), so `install()` runs again right after Ray starts: ours must win.
"""
from __future__ import annotations

import logging
import signal

log = logging.getLogger("sweep")

_state = {"stopping": None, "handled": False}


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum, frame):
    if _state["stopping"] is not None:
        # cleanup is already under way (bounded): a second signal must not cut it short
        log.warning("%s again: still stopping (runs are being marked KILLED)", signal.Signals(signum).name)
        return
    _state["stopping"] = signum
    raise Interrupted(signum)


def check() -> None:
    """Raise Interrupted if a signal came and its exception never reached the sweep:
    Python drops exceptions raised in a finalizer or weakref callback ("Exception
    ignored in ..."), which is where a signal handler may happen to run. Called at
    phase boundaries and once a second while jobs run."""
    if _state["stopping"] is not None and not _state["handled"]:
        raise Interrupted(_state["stopping"])


def handled() -> None:
    """The sweep has caught the interruption and is cleaning up."""
    _state["handled"] = True


def as_interrupted(e: KeyboardInterrupt) -> Interrupted:
    """Ray's C++ calls turn our exception into a plain KeyboardInterrupt: recover which
    signal it was (a real Ctrl-C without our handler counts as SIGINT)."""
    if isinstance(e, Interrupted):
        return e
    return Interrupted(_state["stopping"] or signal.SIGINT)


def install() -> None:
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)


def stopping() -> int | None:
    """The signal that started the shutdown, if any."""
    return _state["stopping"]


def reset() -> None:
    _state["stopping"], _state["handled"] = None, False
