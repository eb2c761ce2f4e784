"""`python -m analysis <command> [overrides]`: analyses of a trace and of sweep results.

Each command is a module with `main(argv: list[str]) -> int` (the exit status), imported
only when chosen.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "characterize": "analysis.characterize",  # the paper's section 4 measurements of a trace
    "advise": "analysis.advise",  # section 5.4 as a procedure: which eviction design, with the numbers
    "report": "analysis.report",  # report.html and PNGs of a sweep, from the tracking store
    "plan": "analysis.planner.cli",  # the cheapest deployment meeting an SLO on the trace at its load
}


def usage() -> str:
    def summary(mod: str) -> str:  # a command module's docstring starts "`python -m ...`: what it does"
        return importlib.import_module(mod).__doc__.splitlines()[0].split("`: ", 1)[-1]

    return ("usage: python -m analysis <command> [group=option ...] [key=value ...]\n"
            "commands:\n" + "".join(f"  {name:<13} {summary(mod)}\n" for name, mod in COMMANDS.items()) +
            "python -m analysis <command> --help describes a command and its config.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}; valid: {', '.join(COMMANDS)}\n{usage()}", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
