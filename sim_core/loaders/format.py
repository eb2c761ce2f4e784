"""What a trace-format module declares: ``FORMAT = TraceFormat(...)``.

The package's ``__init__`` finds every module of ``sim_core.loaders`` that defines
``FORMAT`` (as ``sim_core.policies`` finds every ``SPEC``): adding a format is adding one
module, nothing else. A module declares its name, its reader, how ``format=auto``
recognises its files, and which keyword options its reader takes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..trace import Trace

@dataclass(frozen=True)
class TraceFormat:
    """One trace format.

    Attributes:
        name: the ``fmt=`` / ``trace.format=`` value.
        read: ``read(path, *, name=None, context_tokens=..., **options) -> Trace``.
        description: one line for messages and docs.
        order: position in :data:`sim_core.loaders.FORMATS` and in messages (formats the
            project started with first); sniffing does not depend on it.
        sniff: ``sniff(first_record) -> bool`` for ``format=auto``: True when the first
            JSON object of a file is this format's. Sniffers are exclusive: a record two
            formats claim is an error (``detect_format``), so a new format must not claim
            another's records. None: never sniffed from content.
        options: keyword options ``read`` takes besides ``name``.
        suffixes: file name suffixes that are this format whatever the content (``.npz``).
        hashes_tokens: True when the reader hashes tokens itself and so takes
            ``block_tokens`` (the block size to hash at); for the other formats
            ``load_trace(..., block_tokens=B)`` re-blocks the trace after reading
            (:func:`sim_core.reblock`).
        cacheable: a parsed copy may be kept in ``cache_dir`` (JSONL formats).
    """

    name: str
    read: Callable[..., Trace]
    description: str
    order: int
    sniff: Callable[[dict], bool] | None = None
    options: tuple[str, ...] = ("context_tokens",)
    suffixes: tuple[str, ...] = ()
    hashes_tokens: bool = False
    cacheable: bool = True
