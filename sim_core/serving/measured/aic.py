"""The boundary to NVIDIA's aiconfigurator-core: locating models and systems, building its engine.

Everything that touches the package is here, imported where it is needed, so the other
step models run without it. What is checked before the package is called: the model (a
Hugging Face id bundled with the package, or a local directory holding config.json; any
other id would make the package try the Hugging Face hub), the GPU (a system the package
has data for) and the backend. Its loggers are silenced while it builds: it logs every
low-fidelity table it loads, for models we do not use.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from ...catalog.gpus import GPUS, gpu_name
from ...catalog.hfarch import Arch, load_json, local_config, read_arch

PACKAGE = "aiconfigurator-core"
PINNED = "0.12.0"
from ..engines import BACKENDS  # noqa: E402  (checked here before the package is asked)
INSTALL = f"pip install '{PACKAGE}=={PINNED}' (or `pip install -e '.[measured]'`)"


def package_dir() -> Path | None:
    """The installed package's directory, found without importing it (None: not installed)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    return Path(spec.origin).parent if spec and spec.origin else None


def require() -> Path:
    d = package_dir()
    if d is None:
        raise ValueError(f"step_model=measured needs NVIDIA's {PACKAGE}=={PINNED}, which is not installed "
                         f"(its wheels: Linux x86_64/aarch64, macOS arm64, Python 3.11-3.13): {INSTALL}")
    return d


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as v

    try:
        return v(PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def bundled_models() -> list[str]:
    """Hugging Face ids whose config.json the package ships (no network needed)."""
    d = package_dir()
    if d is None:
        return []
    files = (d / "model_configs").glob("*_config.json")
    return sorted(p.name[:-len("_config.json")].replace("--", "/", 1) for p in files
                  if not p.name.endswith("_hf_quant_config.json"))


@dataclass(frozen=True)
class ModelRef:
    """A model the package can build without the network."""

    name: str  # what the package is given: the bundled id, or the directory's absolute path
    arch: Arch
    digest: str  # of its config files: a local directory's edits make new tables


def resolve_model(model) -> ModelRef:
    """The bundled id or local directory `model` names; ValueError for anything else,
    before the package is asked (it would fetch an unknown id from the Hugging Face hub)."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a Hugging Face id bundled with {PACKAGE} or a local directory holding "
                         f"config.json, got {model!r}")
    local = local_config(model)
    if local is not None:
        files = [local, local.parent / "hf_quant_config.json"]
        name = str(local.parent.resolve())
    else:
        d = package_dir()
        stem = model.replace("/", "--", 1)
        files = [d / "model_configs" / f"{stem}_config.json", d / "model_configs" / f"{stem}_hf_quant_config.json"] \
            if d is not None else []
        if not files or not files[0].is_file():
            if d is None:
                raise ValueError(f"model {model!r} is not a local directory holding config.json, and {PACKAGE} "
                                 f"(whose bundled configs name Hugging Face ids) is not installed: {INSTALL}")
            raise ValueError(f"unknown model {model!r}: neither bundled with {PACKAGE} {version()} nor a local "
                             f"directory holding config.json (the package would fetch it from the Hugging Face "
                             f"hub; we do not). Bundled: {', '.join(bundled_models())}")
        name = model
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.read_bytes())
    quant = load_json(files[1], model) if files[1].is_file() else None
    return ModelRef(name, read_arch(load_json(files[0], model), model, quant), h.hexdigest()[:16])


def systems_with_data(backend: str) -> list[str]:
    """The package's systems that have `backend` data (its "current" version)."""
    return [g for g in GPUS if data_version(g, backend, strict=False)]


def data_version(gpu: str, backend: str, strict: bool = True) -> str:
    """The literal data version the package's "current" slot names for (gpu, backend)."""
    from aiconfigurator_core.sdk import perf_database

    try:
        return str(perf_database.resolve_query_version(gpu, backend, "current"))
    except Exception:  # noqa: BLE001 - the package raises ValueError/KeyError/OSError for a missing slot
        if strict:
            raise ValueError(f"hardware {gpu!r} has no {backend} data in {PACKAGE} {version()}; with data: "
                             f"{', '.join(systems_with_data(backend))}") from None
        return ""


def resolve_gpu(hardware, backend: str) -> str:
    """The package's system name for `hardware`; ValueError naming the valid ones."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown engine.backend {backend!r}; valid: {', '.join(BACKENDS)}")
    gpu = gpu_name(hardware)
    if gpu is None:
        raise ValueError(f"step_model=measured needs hardware= one of {', '.join(GPUS)} (the GPUs {PACKAGE} "
                         f"measured), got {hardware!r}")
    data_version(gpu, backend)
    return gpu


@contextlib.contextmanager
def quiet():
    """The package's loggers at ERROR while it builds (restored after)."""
    lg = logging.getLogger("aiconfigurator_core")
    level = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(level)


def build_engine(model: ModelRef, gpu: str, backend: str, tp: int, moe_tp: int, moe_ep: int):
    """The package's compiled engine (not picklable: build it in the process that queries it)."""
    from aiconfigurator_core import AicEngine
    from aiconfigurator_core.sdk.engine import compile_engine

    kw = dict(tp_size=tp)
    if model.arch.experts:
        kw.update(moe_tp_size=moe_tp, moe_ep_size=moe_ep)
    with quiet():
        try:
            spec = compile_engine(model.name, gpu, backend, **kw)
        except Exception as e:  # noqa: BLE001 - the package raises many kinds; name the configuration
            raise ValueError(f"{PACKAGE} cannot build {model.name} on {gpu} with {backend}, tp={tp}"
                             f"{f', moe_tp={moe_tp}, moe_ep={moe_ep}' if model.arch.experts else ''}: {e}") from e
        return AicEngine.from_spec(spec)
