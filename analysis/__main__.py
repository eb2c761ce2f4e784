"""`python -m analysis <command> ...`: one subcommand per module with a main(argv).

Adding a command is one line in COMMANDS: name -> module (relative to this package),
whose `main(argv: list[str]) -> int` parses its own arguments.
"""
from __future__ import annotations

import sys
from importlib import import_module

COMMANDS: dict[str, str] = {
    "report": ".report",  # report.html and PNGs of a sweep, from the tracking store
}


def _usage() -> str:
    lines = ["usage: python -m analysis <command> [args...]   (python -m analysis <command> --help)", "",
             "commands:"]
    for name, mod in COMMANDS.items():
        doc = (import_module(mod, __package__).__doc__ or "").strip().splitlines()
        lines.append(f"  {name:<14}{doc[0] if doc else ''}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    return int(import_module(COMMANDS[name], __package__).main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
