"""A plan's engine settings and each shape of its space, checked before anything is replayed:
every error names the plan's field (`model`, `backend`, `step_model`, `space.gpu`,
`space.tp`, `space.prefill_replicas`, `capacity_blocks`), since a search that meets a bad
shape halfway would have replayed for nothing.
"""
from __future__ import annotations

from sim_core.serving.deployment import kv_capacity, measured_config, served_model
from sim_core.serving.engines import as_engine


def engine_of(engine, step_model=None, backend=None) -> dict:
    """{"preset": ..., overrides} from the plan's engine, step_model and backend; ValueError
    naming the field."""
    eng = {"preset": engine} if isinstance(engine, str) else dict(engine)
    if step_model is not None:
        eng["step_model"] = str(step_model)
    if backend is not None:
        eng["backend"] = str(backend)
    try:
        e = as_engine(eng)
    except ValueError as err:
        msg = str(err)
        for k in ("step_model", "backend"):
            if f"engine.{k}" in msg:
                raise ValueError(f"{k}: {msg}") from None
        raise ValueError(f"engine: {msg}") from None
    if backend is not None and e.step_model != "measured":
        raise ValueError(f"backend={backend}: picks the measured data (aiconfigurator-core) that step_model=measured "
                         f"times steps with; the {e.step_model} step model reads none: set step_model=measured, or "
                         f"drop backend")
    return eng


def model_of(model, engine: dict):
    """The served ModelConfig (what capacity units read); ValueError naming `model`."""
    if as_engine(engine).step_model == "measured" and model is None:
        raise ValueError("model: the measured step model times a named model: give a Hugging Face id bundled "
                         "with aiconfigurator-core (e.g. model=Qwen/Qwen3-30B-A3B) or a local directory holding "
                         "config.json")
    try:
        return served_model(model)[0]
    except ValueError as e:
        raise ValueError(f"model: {e}") from None


def shape(setting, c, block_tokens: int) -> None:
    """One candidate of a shape (space.Candidate) as a deployment: the roles, the measured
    data for its model, GPU, backend and TP, its KV cache in the GPU's memory."""
    try:
        d = setting.deployment(c)
    except ValueError as e:
        field = "space.prefill_replicas" if c.prefill_replicas else "engine"
        raise ValueError(f"{field}={c.prefill_replicas if c.prefill_replicas else setting.engine['preset']}: "
                         f"{e}") from None
    if "measured" in (d.engine.step_model, d.prefill.step_model):
        try:
            measured_config(d)
        except ValueError as e:
            msg = str(e)
            field = ("backend" if "backend" in msg and "hardware" not in msg else f"space.gpu={c.gpu}"
                     if "hardware" in msg else f"space.tp={c.tp}" if "engine.tp" in msg else "model")
            raise ValueError(f"{field}: {msg}") from None
    try:
        kv_capacity(d, setting.capacity_blocks, block_tokens)
    except ValueError as e:
        raise ValueError(f"capacity_blocks={'auto' if setting.capacity_blocks is None else setting.capacity_blocks} "
                         f"on {c.label()}: {e}") from None
