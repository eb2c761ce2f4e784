"""LMCache's agent traces (``fmt="lmcache_agent"``): prompts of agent runs as published

github LMCache/lmcache-agent-trace (Apache-2.0; SWE-agent, GAIA-style and tau-bench
runs, read at commit 16a14ad: ``miniswe/``, ``magagent/``, ``taubench/``): a directory
with one JSONL file per session, or one such file::

    {"timestamp": 1760428436442742, "input": "<pr_description>...", "output": "THOUGHT: ...",
     "session_id": "063925220f0d2954505eb37612b11ab3"}

==============  ========  ========================================================
field           required  meaning
==============  ========  ========================================================
``timestamp``   yes       arrival, Unix epoch microseconds (number or numeric
                          string; another unit is detected: loaders/times.py)
``input``       yes       the whole prompt text of the call
``output``      no        the generated text (its token count is output_tokens)
``session_id``  no        session key; absent = the file's name (one file, one
                          session)
==============  ========  ========================================================

The prompt is tokenized with a local tokenizer file, as the ``text`` format does
(``trace.tokenizer``; nothing is downloaded), and hashed into prefix-chained blocks of
``trace.block_tokens`` (default 16) as :mod:`.token_records` describes. Records may be
out of time order inside a file (``miniswe/`` and ``magagent/`` files are): requests are
sorted by arrival, as in every format. A checkout's root (one directory per agent kind) is
refused with the kinds' names: load one of them.

An excerpt of the published files (8 whole sessions of ``miniswe/`` and ``magagent/``)
ships in ``sim_core/data/lmcache_agent_trace/`` with its NOTICE; the files at 16a14ad are
read as this module expects (tests/test_lmcache_agent_excerpt.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import TIME_UNIT, TraceFormat
from .lines import Line, Sessions, iter_records
from .text import DEFAULT_BLOCK_TOKENS, TOKENIZER, load_tokenizer
from .times import stamp
from .token_records import chain_hashes


def load_lmcache_agent(path: str | Path, *, name: str | None = None,
                       context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, block_tokens: int | None = None,
                       tokenizer: str | Path | None = None, time_unit: str | None = None) -> Trace:
    """LMCache agent-trace JSONL (a file, or a directory of per-session files)."""
    if tokenizer is None:
        raise TypeError("the lmcache_agent format needs a tokenizer file: tokenizer=/path/to/tokenizer.json "
                        "(trace.tokenizer=... on the command line)")
    tok = load_tokenizer(tokenizer)
    b = Builder(path, int(block_tokens or DEFAULT_BLOCK_TOKENS), context_tokens, "us", hashed=False,
                directory=True, time_unit=time_unit)
    sessions = Sessions()
    files = set()
    for file, lineno, obj in iter_records(b.path):
        ln = Line(str(file), lineno)
        files.add(file)
        ts = stamp(ln, ln.required(obj, "timestamp"), "timestamp")
        prompt = ln.string(ln.required(obj, "input"), "input")
        out = obj.get("output")
        n_out = 0 if out is None else len(tok.encode(ln.string(out, "output")).ids)
        key = obj.get("session_id")
        session = sessions.id_of(ln, file.name if key is None else key, "session_id")
        tokens = np.asarray(tok.encode(prompt).ids, dtype=np.int64)
        b.add(chain_hashes(tokens, b.block_tokens), ts, session, len(tokens), n_out)
    trace = b.build("lmcache_agent", name, {"sessions": len(sessions.ids), "files": len(files),
                                            "block_hash": "sha256 chain (sim_core.traces.loaders.token_records)"})
    trace.meta["tokenizer"] = str(Path(tokenizer).expanduser().resolve())
    return trace


def _is_lmcache_agent(obj: dict) -> bool:
    return "input" in obj and "timestamp" in obj and not {"hash_ids", "prompt", "token_ids"} & obj.keys()


FORMAT = TraceFormat(
    name="lmcache_agent", read=load_lmcache_agent, order=100, sniff=_is_lmcache_agent, hashes_tokens=True,
    description="LMCache's agent traces: per-session JSONL of prompt text (timestamp in us), tokenized locally",
    options=("context_tokens", "block_tokens", "tokenizer", "time_unit"), settings=(TOKENIZER, TIME_UNIT),
    directories=True,
)
