"""Replaying candidates: the deployment each one is, its identity, and the loop that feeds
the searches' requests to an evaluator (this process, or the sweep's runner: runner.py).

Two candidates that differ only in a setting the replay does not read (the GPU part under
a step-time model that ignores it, as Dynamo's polynomial does) have the same identity,
and are replayed once.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from sim_core import serve
from sim_core.serving import Deployment, deployment, kv_capacity


@dataclass(frozen=True)
class Setting:
    """What every candidate of a plan shares: the engine, the KV cache per replica, the model, the seed."""

    engine: Mapping  # {"preset": name, key: override}
    capacity_blocks: int | None  # None: each candidate's from its GPU's memory (capacity())
    model: object = None  # a sim_core.catalog.models name or ModelConfig (None: serve's default)
    seed: int = 0
    per_request: Mapping | None = None  # serve(slo=...): the goodput floor's per-request bounds
    block_tokens: int = 512  # the trace's: what a capacity from memory is counted in

    def capacity(self, c) -> int:
        """A candidate's KV cache per replica in blocks: the plan's, or what its GPU's memory
        leaves at its TP (sim_core.serving.kv_capacity), which serve derives alike."""
        if self.capacity_blocks is not None:
            return self.capacity_blocks
        return kv_capacity(self.deployment(c), None, self.block_tokens)[0]

    def deployment(self, c) -> Deployment:
        """The deployment a candidate is (space.Candidate)."""
        return deployment(replicas=c.replicas, engine={**self.engine, "tp": c.tp}, router=c.router,
                          hardware=c.gpu, model=self.model, prefill_replicas=c.prefill_replicas)

    def replayed(self, c) -> Deployment:
        """The deployment as the replay reads it: without the GPU part when nothing reads it
        (neither roofline nor measured step times, no tiers; its system name is read only to
        check a Hugging Face model's KV cache against memory), so GPU types that replay alike
        share a replay."""
        d = self.deployment(c)
        if d.engine.step_model not in ("roofline", "measured") and not d.tiers:
            d = dataclasses.replace(d, hardware=None, gpu=d.gpu if d.model_ref is not None else None)
        return d

    def key(self, c, load: float) -> tuple:
        """A replay's identity within one trace and one simulator."""
        return (repr(self.replayed(c)), c.policy, self.capacity(c), float(load), self.seed,
                tuple(sorted((self.per_request or {}).items())))

    def serve(self, trace, c, load: float):
        try:
            return serve(trace, c.policy, self.capacity(c), deployment=self.deployment(c), arrival_speedup=load,
                         seed=self.seed, slo=dict(self.per_request) if self.per_request else None)
        except RuntimeError as e:  # name the candidate: the plan stops at the first replay that fails
            raise RuntimeError(f"the replay of {c.label()} at {load:g}x load failed: {e}") from e


class InProcess:
    """Replays one candidate at a time with sim_core.serve, in this process."""

    def __init__(self, trace, setting: Setting):
        self.trace, self.setting = trace, setting
        self.queue: list = []
        self.replays = 0

    def submit(self, key, c, load: float) -> None:
        self.queue.append((key, c, load))

    def collect(self) -> list:
        key, c, load = self.queue.pop(0)
        self.replays += 1
        return [(key, self.setting.serve(self.trace, c, load))]


def drive(searches: list, evaluator, setting: Setting, known: dict | None = None) -> list:
    """Run every search (a list of (load, generator)) to its end and return their outcomes.

    A request already answered (`known`: replay key -> ServeResult, filled as replays
    finish) is answered at once; the others go to `evaluator` (submit / collect), each
    identity once even when several searches wait for it."""
    known = {} if known is None else known
    waiting: dict = {}
    out: list = [None] * len(searches)

    def advance(i: int, value) -> None:
        load, gen = searches[i]
        try:
            c = gen.send(value)
            while setting.key(c, load) in known:
                c = gen.send(known[setting.key(c, load)])
        except StopIteration as stop:
            out[i] = stop.value
            return
        k = setting.key(c, load)
        if k not in waiting:
            evaluator.submit(k, c, load)
        waiting.setdefault(k, []).append(i)

    for i in range(len(searches)):
        advance(i, None)
    while waiting:
        for k, res in evaluator.collect():
            known[k] = res
            for i in waiting.pop(k, []):
                advance(i, res)
    return out

