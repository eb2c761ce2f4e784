"""Fixtures shared by several test modules, and how the suite runs in parallel.

`make test` runs the suite on every core (pytest-xdist, `-n auto --dist loadfile`, at
most MAX_WORKERS workers unless PYTEST_XDIST_AUTO_NUM_WORKERS says otherwise). A module
stays on one worker, so its module-scoped fixtures (sweeps, traces) run once; a module
that reads another's session fixture runs on that module's worker (SAME_WORKER; xdist's
own --dist loadgroup cannot group here: it renames node ids, which pytest 9 ignores).
Modules start heaviest first (HEAVY_FIRST), so that the light ones fill in at the end.
With --jit-warmup (not on by default), the workers first compile the kernels many modules share,
each its own part (tests/jit_warmup.py), so that no two compile the same one.
Every test process gets its own Ray temp directory (RAY_TMPDIR): local Ray instances of
two workers never share /tmp/ray (session links, ray_current_cluster, which a bare
ray.init() would join) and sweeps they start in subprocesses inherit it. Ports are picked
free at run time (tests/stack.py free_port; Ray picks its own). The numba cache stays
shared: a kernel one worker compiled is loaded by the other.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: workers of `-n auto`: each imports numba, Ray and MLflow (~1 GB) and starts Ray
#: instances of its own; PYTEST_XDIST_AUTO_NUM_WORKERS overrides it
MAX_WORKERS = 4

#: test modules, most expensive first (their summed durations in a cold run of the suite at
#: 7172a8f: docs/performance.md, "The test suite"); the others follow in collection order
HEAVY_FIRST: list[str] = [
    "test_resume.py", "test_serving.py", "test_plan.py", "test_browser.py", "test_cluster_stack.py",
    "test_benchmarks.py", "test_engine.py", "test_tiers.py", "test_browser_fleet.py", "test_issue35_defects.py",
    "test_sweep_fleet.py", "test_sweep_tiers.py", "test_sweep_serving.py", "test_ceiling.py", "test_sweep_errors.py",
    "test_analysis_cli.py", "test_bad_input.py", "test_docs_sizes.py", "test_sweep_partial.py", "test_weeks.py"]


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist runs too
def pytest_xdist_auto_num_workers(config):
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


#: module -> the module whose worker it runs on: it reads that module's session fixture
SAME_WORKER = {"test_browser.py": "test_sweep.py"}

_ray_dir: dict = {}
_warmups: dict = {}


def pytest_addoption(parser):
    parser.addoption("--jit-warmup", action="store_true",
                     help="compile the kernels many tests share before the first test, split across the "
                          "xdist workers (tests/jit_warmup.py)")


def pytest_sessionstart(session):
    config = session.config
    if not config.getoption("--jit-warmup"):
        return
    worker = getattr(config, "workerinput", None)
    if worker is None and (config.getoption("numprocesses", None) or 0):
        return  # the xdist controller: its workers warm up
    from tests import jit_warmup

    index = int(worker["workerid"][2:]) if worker else 0
    count = int(worker["workercount"]) if worker else 1
    got = jit_warmup.warm(index, count)
    if worker is not None:
        config.workeroutput["kvsweep_jit_warmup"] = got
    else:
        _warmups["main"] = got


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist runs too
def pytest_testnodedown(node, error):
    got = getattr(node, "workeroutput", {}).get("kvsweep_jit_warmup")
    if got:
        _warmups[node.gateway.id] = got


def pytest_terminal_summary(terminalreporter):
    if _warmups:
        terminalreporter.write_line("JIT warm-up (tests/jit_warmup.py): " + "; ".join(
            f"{w} {g['kernels']} kernels in {g['seconds']:.0f} s, slowest "
            + ", ".join(f"{n} {s:.0f} s" for s, n in g.get("slowest", [])[:2])
            + (f" ({len(g['failed'])} failed: {g['failed'][0]})" if g["failed"] else "")
            for w, g in sorted(_warmups.items())))


def pytest_configure(config):
    # xdist hands out modules in collection order (pytest_collection_modifyitems below),
    # not by their number of tests
    if getattr(config.option, "dist", "no") in ("loadfile", "loadscope"):
        config.option.loadscopereorder = False
    # short: Ray's Unix sockets live under it (108-byte limit)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    d = tempfile.mkdtemp(prefix=f"kvsray-{worker}-", dir="/tmp" if os.path.isdir("/tmp") else None)
    _ray_dir.update(path=d, before=os.environ.get("RAY_TMPDIR"))
    os.environ["RAY_TMPDIR"] = d


def pytest_unconfigure(config):
    d = _ray_dir.pop("path", None)
    if d is None:
        return
    before = _ray_dir.pop("before", None)
    if before is None:
        os.environ.pop("RAY_TMPDIR", None)
    else:
        os.environ["RAY_TMPDIR"] = before
    shutil.rmtree(d, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: in-module order kept


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist runs too
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with each module of SAME_WORKER in its partner's unit of work."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)  # tests/test_x.py
            head, _, name = path.rpartition("/")
            partner = SAME_WORKER.get(name)
            return f"{head}/{partner}" if partner and head else (partner or path)

    return ModuleScheduling(config, log)


@pytest.fixture(scope="module")
def compose():
    """Compose the sweep's Hydra config from conf/ with overrides: compose("policy=lru", ...)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from sweep.config import find_conf_dir, register_generated

    from sweep.config import ConfigError
    from sweep.schema import compose_error

    conf = find_conf_dir()
    register_generated(conf)

    def compose(*ov):  # a value the schema refuses is bad input, as on the command line
        try:
            return hydra_compose("config", overrides=list(ov))
        except Exception as e:
            msg = compose_error(e)
            if msg:
                raise ConfigError(msg) from None
            raise

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        yield compose
    GlobalHydra.instance().clear()


@pytest.fixture
def lcs():
    """libCacheSim's module for a test that compares with it (tests.helpers.libcachesim:
    skipped when missing, a failure under KVSWEEP_REQUIRE_REFERENCES=1)."""
    from tests.helpers import libcachesim

    return libcachesim()


@pytest.fixture(scope="session")
def e2e_sweep(tmp_path_factory):
    """tests/test_sweep.py's end-to-end sweep (`python -m sweep` on a small Mooncake-format
    file: 4 policies x 2 cost models x 4 capacities, a local Ray instance, a sqlite store),
    which tests/test_browser.py also opens in MLflow's UI: one sweep for both (the two
    modules share an xdist group, SAME_WORKER). Read it, do not write to its store."""
    from tests.test_sweep import run_e2e

    return run_e2e(tmp_path_factory.mktemp("e2e"))
