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
