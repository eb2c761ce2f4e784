"""Every sweep the README and docs/ show either finishes in a couple of minutes or says how
long it takes: a reader who pastes it is never surprised by an hour of replays.

Each `python -m sweep ...` command (fenced, indented or inline) is sized as its dry run
sizes it (sweep.size.measure over the planned jobs, at the model's own rates on 2 actors,
JIT cache warm), in process. A command whose paragraph, or the one before it, states a
duration ("3 min 23 s", "3.5 min") is taken at its word; a placeholder (`...`, `/data/...`, `--help`) is not
a command to run.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: "a couple of minutes": the estimate (replays, Ray's start, the report) at most this
BOUND_S = 180.0
ACTORS = 2
#: a stated duration: a number and its unit ("3 min 23 s", "3.5 min", "2 hours")
DURATION = re.compile(r"\b\d+(\.\d+)?\s*(min|minutes?|h|hours?)\b")
#: overrides that say where to run or record, not what: a dry run here needs none of them
WHERE = ("cluster", "tracking", "hydra")


@dataclass
class Example:
    page: str
    line: int
    args: list[str]
    near: str  # the text around it, where a size may be stated


def _commands(text: str) -> list[tuple[int, str]]:
    """(line, command) of every `python -m sweep` invocation, continuation lines joined."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        for m in re.finditer(r"`([^`]*python -m sweep(?!\.)[^`]*)`", line):  # inline
            out.append((i + 1, m.group(1)))
        if "python -m sweep" in line and "`python -m sweep" not in line and not re.search(r"python -m sweep\.", line):
            cmd, start = line, i
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            out.append((start + 1, cmd))
        i += 1
    return out


def _around(lines: list[str], i: int) -> str:
    """The paragraph (or code block) holding line i and the paragraph before it: where a
    page says how long the command takes."""
    start = i
    while start > 0 and lines[start - 1].strip():
        start -= 1
    start -= 1
    while start > 0 and lines[start - 1].strip():
        start -= 1
    end = i
    while end + 1 < len(lines) and lines[end + 1].strip():
        end += 1
    return "\n".join(lines[max(0, start):end + 1])


def examples() -> list[Example]:
    out = []
    for page in PAGES:
        text = page.read_text()
        lines = text.splitlines()
        for n, cmd in _commands(text):
            try:
                words = shlex.split(cmd, comments=True)
            except ValueError:
                continue  # an unbalanced inline fragment, not a command
            if "sweep" not in words:
                continue
            args = words[words.index("sweep") + 1:]
            near = _around(lines, n - 1)
            out.append(Example(page.relative_to(ROOT).as_posix(), n, args, near))
    return out


def placeholder(ex: Example) -> bool:
    return not ex.args or any(a in ("...", "--help") or "/data/" in a or a.startswith("<") or "$" in a
                              for a in ex.args)


EXAMPLES = examples()


def test_the_docs_show_sweeps():
    assert len(EXAMPLES) > 20 and sum(not placeholder(e) for e in EXAMPLES) > 12


@pytest.mark.parametrize("ex", [e for e in EXAMPLES if not placeholder(e)], ids=lambda e: f"{e.page}:{e.line}")
def test_each_sweep_shown_states_or_keeps_a_size_bound(ex, compose, tmp_path):
    if DURATION.search(ex.near):
        return  # its size is stated beside it
    from sweep import size, study

    args = [a for a in ex.args if a.split("=", 1)[0].split(".", 1)[0].lstrip("+~") not in WHERE]
    args += ["sweep.dry_run=true", "tracking.offline=true", f"tracking.journal={tmp_path / 'j.jsonl'}"]
    choice = lambda g, d: next((a.split("=", 1)[1] for a in args if a.startswith(f"{g}=")), d)  # noqa: E731
    st = study.configure(compose(*args), args, choice("trace", "freeinference"), choice("policy", "all"))
    study.load(st)
    study.resolve_known(st)
    study.make_jobs(st, ACTORS)
    got = size.measure(st, ACTORS)
    assert got.seconds <= BOUND_S, (f"{ex.page}:{ex.line}: {got.line()}; size the example down or state its time "
                                    f"beside it")
