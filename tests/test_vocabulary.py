"""One name for one thing: the deprecated keyword forms still work (same results, with a
warning naming the new name), a deployment is one typed description, and every Python
name the README and docs use exists."""
from __future__ import annotations

import importlib
import logging
import re
import types
import warnings
from pathlib import Path

import pytest
import yaml

from sim_core import Trace, deployment, serve, simulate
from tests.helpers import REPO

T = Trace.from_requests([[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3, 7], [5, 6, 8], [1, 9]],
                        input_tokens=[40, 40, 30, 60, 40, 20], name="vocab")


def _dicts(results):
    return [r.to_dict() for r in results]


@pytest.mark.parametrize("old, new", [
    (dict(engine="vllm"), dict(counting="vllm")),
    (dict(hbm_capacities=[2, 4]), dict(capacity_blocks=[2, 4])),
    (dict(capacities=[2, 4]), dict(capacity_blocks=[2, 4])),
])
def test_deprecated_simulate_keywords_give_the_same_results_with_a_warning(old, new):
    caps = {} if "capacity_blocks" in new else {"capacity_blocks": [2, 4]}
    want = simulate(T, "lru", **caps, **new)
    with pytest.warns(DeprecationWarning, match=f"{next(iter(old))}=.*deprecated.*use {next(iter(new))}="):
        got = simulate(T, "lru", **caps, **old)
    assert _dicts(got) == _dicts(want)


def test_a_value_under_both_names_or_an_unknown_keyword_is_refused():
    with pytest.raises(ValueError, match="give counting once"):
        simulate(T, "lru", [2], counting="vllm", engine="vllm")
    with pytest.raises(TypeError, match="unexpected keyword argument 'capacity'"):
        simulate(T, "lru", capacity=[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        simulate(T, "lru", capacity_blocks=2, counting="vllm")


def test_sim_engine_is_moved_to_sim_counting_with_a_warning(compose, caplog):
    from sweep.spec import apply_counting, resolve

    new = compose("sim.counting=vllm", "policy=lru")
    apply_counting(new, ["sim.counting=vllm"])
    old = compose("sim.engine=vllm", "policy=lru")
    with caplog.at_level(logging.WARNING, logger="sweep"):
        note = apply_counting(old, ["sim.engine=vllm"])
    assert "sim.engine=vllm is deprecated" in caplog.text and "use sim.counting=vllm" in caplog.text
    assert note.startswith("sim.counting=vllm:")
    a, b = resolve(new, "lru"), resolve(old, "lru")
    assert (a.counting, a.counting_preset, a.mode, a.hits, a.order) == (b.counting, b.counting_preset, b.mode,
                                                                        b.hits, b.order)
    assert a.counting_preset == "vllm" and str(a.hits) == "prefix"


def test_both_counting_keys_are_refused(compose):
    from sweep.config import ConfigError
    from sweep.spec import apply_counting

    cfg = compose("sim.engine=vllm", "sim.counting=sglang")
    with pytest.raises(ConfigError, match="give the counting preset once"):
        apply_counting(cfg, ["sim.engine=vllm", "sim.counting=sglang"])


def test_serve_takes_a_deployment_or_its_fields():
    dep = deployment(replicas=2, router="least_loaded", router_params={"waiting_weight": 2.0},
                     engine={"preset": "dynamo", "max_num_seqs": 2})
    assert dep.router_params == (("waiting_weight", 2.0),) and dep.engine.max_num_seqs == 2 and dep.gpus == 2
    by_fields = serve(T, "lru", 40, replicas=2, router="least_loaded", router_params={"waiting_weight": 2.0},
                      engine={"preset": "dynamo", "max_num_seqs": 2})
    assert serve(T, "lru", 40, deployment=dep) == by_fields
    with pytest.raises(ValueError, match="give the deployment once"):
        serve(T, "lru", 40, deployment=dep, replicas=2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        serve(T, "lru", 40, replica=2)


@pytest.mark.parametrize("kw, field", [
    (dict(replicas=0), "replicas"), (dict(router="nosuch"), "unknown router"),
    (dict(router="least_loaded", router_params={"nosuch": 1}), "no parameter"),
    (dict(engine={"preset": "dynamo", "max_num_seqs": 0}), "engine.max_num_seqs"),
    (dict(hardware="nosuch"), "unknown hardware part"), (dict(model="nosuch"), "unknown model"),
    (dict(overlap="yes"), "overlap"),
])
def test_a_bad_deployment_names_its_field(kw, field):
    with pytest.raises(ValueError, match=field):
        deployment(**kw)


# ------------------------------------------------------------------ the docs' names
_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FROM = re.compile(r"from ((?:sim_core|sweep|analysis)(?:\.\w+)*) import ([\w, ()]+)")
_DOTTED = re.compile(r"\b((?:sim_core|sweep|analysis)(?:\.\w+)+)")


_FILES = ("md", "yaml", "py", "json", "jsonl", "csv", "html", "png", "txt", "npz")


def _config_keys() -> set[str]:
    """sweep.<key> and analysis.<key>: config keys, not modules."""
    sweep = yaml.safe_load((REPO / "conf" / "config.yaml").read_text())["sweep"]
    analysis = yaml.safe_load((REPO / "conf" / "analysis.yaml").read_text())["analysis"]
    return {f"sweep.{k}" for k in sweep} | {f"analysis.{k}" for k in analysis}


def _ours(obj) -> bool:
    """Not a module of another checkout (an editable install's finder falls back to one)."""
    f = getattr(obj, "__file__", None) if isinstance(obj, types.ModuleType) else None
    return f is None or Path(f).resolve().is_relative_to(REPO)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        if not _ours(obj):
            continue
        try:
            for a in parts[k:]:
                obj = getattr(obj, a)
        except AttributeError:
            return False
        return _ours(obj)
    return False


def test_every_python_name_in_the_readme_and_docs_exists():
    keys = _config_keys()
    missing = []
    for doc in _DOCS:
        text = doc.read_text()
        for mod, names in _FROM.findall(text):
            for n in re.findall(r"\w+", names):
                if not _resolves(f"{mod}.{n}"):
                    missing.append(f"{doc.name}: from {mod} import {n}")
        for dotted in set(_DOTTED.findall(text)) - keys:
            if dotted.rsplit(".", 1)[1] not in _FILES and not _resolves(dotted):
                missing.append(f"{doc.name}: {dotted}")
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_names_check_can_fail():
    assert _resolves("sim_core.serving.deployment") and _resolves("sim_core.catalog.hardware.PARTS")
    assert not _resolves("sim_core.tracecfg") and not _resolves("sim_core.catalog.hardware.NOSUCH")
