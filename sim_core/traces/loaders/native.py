"""Native traces (``fmt="native"``): the ``.npz`` written by :meth:`Trace.save`."""
from __future__ import annotations

import zipfile
from pathlib import Path

from ..trace import Trace
from .format import TraceFormat
from .lines import TraceFormatError, check_exists


def load_native(path: str | Path, *, name: str | None = None) -> Trace:
    """A trace written by :meth:`Trace.save`; corrupt or partial files raise TraceFormatError."""
    path = Path(path)
    check_exists(path)
    try:
        trace = Trace.load(path)
    except (zipfile.BadZipFile, KeyError, ValueError, SyntaxError, EOFError, OSError, IndexError,
            TypeError, NotImplementedError) as e:  # NotImplementedError: zipfile on a damaged version field
        raise TraceFormatError(f"{path}: not a valid native trace (.npz): {type(e).__name__}: {e}") from e
    if name is not None:
        trace.name = name
    return trace


FORMAT = TraceFormat(
    name="native", read=load_native, order=40, options=(), suffixes=(".npz",), cacheable=False,
    description="the .npz written by Trace.save (replayed as saved)",
)
