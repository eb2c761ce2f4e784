"""Qwen Bailian (``fmt="qwen_bailian"``, block_tokens = 16)

Alibaba Bailian traces of "KVCache Cache in the Wild" (ATC'25)::

    {"chat_id": 7, "parent_chat_id": 3, "timestamp": 61.25, "input_length": 912,
     "output_length": 88, "type": "text", "turn": 2, "hash_ids": [0, 1, 2, 95]}

==================  ========  ====================================================
field               required  meaning
==================  ========  ====================================================
``chat_id``         yes       request id (int >= 0), unique within the file
``timestamp``       yes       arrival in seconds (number)
``hash_ids``        yes       list of ints: prefix-chained 16-token block hashes
``parent_chat_id``  no        chat_id of the previous turn; absent, null or
                              negative (conventionally -1) = first turn
``input_length``    no        prompt tokens (int >= 0)
``output_length``   no        generated tokens (int >= 0; 0 when absent)
``type``            no        request type (string; counted in ``meta["types"]``)
``turn``            no        turn number in the conversation (int >= 0)
==================  ========  ====================================================

``session`` is the root ``chat_id`` reached by following ``parent_chat_id`` links
(parents may appear anywhere in the file; dropped requests still link their
children). A chat whose parent id does not occur in the file is its own root. A
duplicated ``chat_id`` or a cycle of parent links is a format error.
"""
from __future__ import annotations

from pathlib import Path
from array import array

from ..trace import Trace
from .builder import DEFAULT_CONTEXT_TOKENS, Builder
from .format import HASH_OPTIONS, HASH_SETTINGS, TraceFormat
from .lines import Line, TraceFormatError, iter_objects, short
from .times import stamp


def load_qwen_bailian(path: str | Path, *, name: str | None = None,
                      context_tokens: int | None = DEFAULT_CONTEXT_TOKENS, **options) -> Trace:
    """Alibaba Qwen Bailian JSONL trace (16-token blocks, seconds, sessions from parent links)."""
    b = Builder(path, 16, context_tokens, "s", **options)
    path, where = b.path, b.where
    parent_of: dict[int, int] = {}  # chat_id -> parent chat_id (-1 = root)
    line_of: dict[int, int] = {}    # chat_id -> line number (duplicates, cycle reports)
    kept_chat = array("q")          # chat_id of every kept request, in file order
    types: dict[str, int] = {}
    for lineno, obj in iter_objects(path):
        ln = Line(where, lineno)
        chat = ln.integer(ln.required(obj, "chat_id"), "chat_id", minimum=0)
        if chat in line_of:
            raise ln.fail("chat_id", f"duplicate chat_id {chat} (first seen on line {line_of[chat]})")
        parent = obj.get("parent_chat_id")
        parent = -1 if parent is None else ln.integer(parent, "parent_chat_id")
        ts = stamp(ln, ln.required(obj, "timestamp"), "timestamp")
        hashes = ln.hashes(ln.required(obj, "hash_ids"), "hash_ids")
        ilen = ln.optional_integer(obj, ("input_length",))
        olen = ln.optional_integer(obj, ("output_length",))
        kind = obj.get("type")
        if kind is not None:
            if not isinstance(kind, str):
                raise ln.fail("type", f"expected a string, got {short(kind)}")
            types[kind] = types.get(kind, 0) + 1
        if obj.get("turn") is not None:
            ln.integer(obj["turn"], "turn", minimum=0)
        parent_of[chat] = parent if parent >= 0 else -1
        line_of[chat] = lineno
        # Session is resolved after the whole file is read (parents may come later).
        if b.add(hashes, ts, -1, ilen, olen or 0):
            kept_chat.append(chat)

    root_of: dict[int, int] = {}

    def root(chat: int) -> int:
        chain = []
        on_chain = set()
        node = chat
        while node not in root_of:
            parent = parent_of.get(node, -1)
            if parent < 0 or parent not in parent_of:  # first turn, or unknown parent
                root_of[node] = node
                break
            if node in on_chain:
                raise TraceFormatError(f"{where}:{line_of[chat]}: field 'parent_chat_id': "
                                       f"cycle of parent links through chat_id {node}")
            chain.append(node)
            on_chain.add(node)
            node = parent
        r = root_of[node]
        for c in chain:
            root_of[c] = r
        return r

    for i, chat in enumerate(kept_chat):
        b.session[i] = root(chat)
    orphans = sum(1 for c, p in parent_of.items() if p >= 0 and p not in parent_of)
    return b.build("qwen_bailian", name, {"types": types, "unknown_parents": orphans})


FORMAT = TraceFormat(
    name="qwen_bailian", read=load_qwen_bailian, order=20, sniff=lambda obj: "chat_id" in obj,
    description="Alibaba Qwen Bailian JSONL (ATC'25): chat_id, parent links, 16-token hash_ids",
    options=HASH_OPTIONS, settings=HASH_SETTINGS,
)
