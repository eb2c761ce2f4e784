"""What a trace-format module declares: ``FORMAT = TraceFormat(...)``.

The package's ``__init__`` finds every module of ``sim_core.traces.loaders`` that defines
``FORMAT`` (as ``sim_core.policies`` finds every ``SPEC``): adding a format is adding one
module, nothing else. A module declares its name, its reader, how ``format=auto``
recognises its files, and which keyword options its reader takes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..trace import Trace


KINDS = ("int", "file", "unit", "bool")


@dataclass(frozen=True)
class Option:
    """A reader option of one format that the `trace` config group sets as
    ``trace.<name>`` (sim_core.traces.config checks and passes it; ``context_tokens`` and
    ``block_tokens``, which every format takes, are not declared this way).

    Attributes:
        name: the reader's keyword and the config key.
        kind: ``"int"``, a whole number >= 1; ``"file"``, the path of an existing file;
            ``"unit"``, a time unit (sim_core.traces.loaders.times.UNITS); ``"bool"``.
        what: int: what null means (``"the format's default"``); file: what the file
            is (``"a tokenizer file"``).
        example: a value shown in messages (``/path/to/tokenizer.json``).
        required: the reader cannot run without it.
    """

    name: str
    kind: str
    what: str
    example: str = ""
    required: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind must be one of {KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class TraceFormat:
    """One trace format.

    Attributes:
        name: the ``fmt=`` / ``trace.format=`` value.
        read: ``read(path, *, name=None, context_tokens=..., **options) -> Trace``.
        description: one line for messages and docs.
        order: position in :data:`sim_core.traces.loaders.FORMATS` and in messages (formats the
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
            (:func:`sim_core.traces.reblock`).
        cacheable: a parsed copy may be kept in ``cache_dir`` (JSONL formats).
        settings: the :class:`Option` s among ``options`` that a trace config sets
            (``trace.tokenizer``, ``trace.file_block_tokens``).
        directories: the reader also takes a directory of trace files (one session or
            conversation a file, read in name order: :func:`.lines.trace_files`).
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
    settings: tuple[Option, ...] = ()
    directories: bool = False

    def __post_init__(self):
        unknown = [o.name for o in self.settings if o.name not in self.options]
        if unknown:
            raise ValueError(f"format {self.name}: settings {unknown} are not among its options {self.options}")


#: the options of every format whose records carry block hashes (loaders/builder.py)
TIME_UNIT = Option("time_unit", "unit", "detected from the timestamps", "us")
FILE_BLOCK_TOKENS = Option("file_block_tokens", "int", "the format's size, or the one its input lengths show", "64")
RECHAIN = Option("rechain", "bool", "true (ids after different prefixes become different blocks)", "false")
HASH_OPTIONS = ("context_tokens", "time_unit", "file_block_tokens", "rechain")
HASH_SETTINGS = (TIME_UNIT, FILE_BLOCK_TOKENS, RECHAIN)
