"""The import direction between the packages (docs/extending.md#packages-and-import-direction):
analysis -> sweep -> sim_core, and benchmarks above all three. Read from the source with ast,
so a function-local import that would hide a cycle counts as much as a module-level one.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: package -> the project packages it may import
ALLOWED = {
    "sim_core": {"sim_core"},
    "sweep": {"sim_core", "sweep"},
    "analysis": {"sim_core", "sweep", "analysis"},
    "benchmarks": {"sim_core", "sweep", "analysis", "benchmarks"},
}
#: third-party modules imported where used: mlflow, ray and matplotlib take 0.5-2 s to import
#: (so `--help` and configuration errors answer at once); the others serve one path only
#: (hydra's entry point, a progress bar on a terminal, a POSIX file lock, optional extras)
LAZY = {"mlflow", "ray", "matplotlib", "highspy", "libcachesim", "tokenizers", "hydra", "tqdm", "fcntl"}


def _imports(path: Path, package: str):
    """(line, absolute module, at module level) of every import in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[:len(parts) - node.level]
                mods = [".".join(base + ([node.module] if node.module else []))]
            else:
                mods = [node.module]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            continue
        for m in mods:
            yield node.lineno, m, id(node) in top


def _files(package: str):
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_import_direction(package):
    bad = [f"{f.relative_to(ROOT)}:{line} imports {m}"
           for f in _files(package) for line, m, _ in _imports(f, package)
           if m.split(".")[0] in ALLOWED and m.split(".")[0] not in ALLOWED[package]]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["sweep", "analysis"])
def test_imports_at_module_level(package):
    """Project modules and cheap libraries are imported at the top of a module; only the slow
    third-party ones in LAZY may wait until a function needs them."""
    bad = [f"{f.relative_to(ROOT)}:{line} imports {m} inside a function"
           for f in _files(package) for line, m, top in _imports(f, package)
           if not top and m.split(".")[0] not in LAZY]
    assert not bad, "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path, monkeypatch):
    """The walk finds a function-local import of a forbidden package (it can fail)."""
    pkg = tmp_path / "sweep"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f():\n    from analysis import advise\n    from .x import y\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    found = list(_imports(pkg / "m.py", "sweep"))
    assert (2, "analysis", False) in found and (3, "sweep.x", False) in found
    with pytest.raises(AssertionError, match="imports analysis"):
        test_import_direction("sweep")


#: sim_core's rooms (docs/extending.md#where-things-live), lowest first: a module may import
#: from its own room and from rooms below it, never above. The top-level modules jit, result,
#: config_checks and digest are the ground floor; simulate and the package's __init__ the roof.
ROOMS = ["jit", "result", "config_checks", "digest", "catalog", "traces", "structures", "oracles",
         "policies", "tiers", "replay", "serving", "simulate", "__init__"]


def _room(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_sim_core_rooms_import_downwards():
    found = {p.relative_to(ROOT / "sim_core").parts[0].removesuffix(".py") for p in _files("sim_core")}
    assert found <= set(ROOMS), f"rooms without a place in ROOMS: {sorted(found - set(ROOMS))}"
    bad = []
    for f in _files("sim_core"):
        rel = f.relative_to(ROOT).with_suffix("").parts
        here = "__init__" if rel == ("sim_core", "__init__") else rel[1]
        for line, m, _ in _imports(f, "sim_core"):
            if m.split(".")[0] != "sim_core":
                continue
            there = _room(m)
            if there != here and ROOMS.index(there) > ROOMS.index(here):
                bad.append(f"{f.relative_to(ROOT)}:{line} ({here}) imports {m} ({there}, a room above)")
    assert not bad, "\n".join(bad)


def test_the_room_check_sees_an_upward_import(tmp_path, monkeypatch):
    """A policy importing the serving replay is caught (the check can fail)."""
    pol = tmp_path / "sim_core" / "policies"
    pol.mkdir(parents=True)
    (pol / "bad.py").write_text("from ..serving import serve\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="imports sim_core.serving"):
        test_sim_core_rooms_import_downwards()
