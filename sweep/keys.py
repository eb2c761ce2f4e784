"""The identity of a result, shared by resume, deduplication and the journal.

A point (one capacity of one curve) is keyed by everything that determines its numbers:
the trace's content digest, the policy and its resolved parameters, the replay switches
(mode, hits, order, seed), the setup (counting, lower tiers, admission, hardware, or the serving fleet), the cost model and the model, the capacity in blocks, and the digest
of the simulator source. A curve's key is the same identity with its capacity list, and
a sweep's key is the set of its curve keys.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Sequence


def _digest(obj) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class CurveIdentity:
    trace: str  # sim_core.digest.trace_digest
    policy: str
    params: tuple  # sorted (name, value) pairs, defaults filled in
    mode: str
    hits: str
    seed: int
    cost_model: str
    model: tuple  # sorted ModelConfig fields
    simulator: str  # sim_core.digest.source_digest
    sample: tuple = ()  # (rate, seed, by) of a sampled replay; () when exact
    order: str = ""  # sim_core.Order of the replay
    setup: tuple = ()  # counting, lower tiers, admission and hardware, or the fleet; () when all are defaults

    @classmethod
    def make(cls, *, trace: str, policy: str, params: Mapping, mode, hits, seed: int, cost_model: str,
             model, simulator: str, sample: tuple = (), order="", setup: tuple = ()) -> "CurveIdentity":
        return cls(trace=trace, policy=policy, params=tuple(sorted(dict(params).items())),
                   mode=str(mode), hits=str(hits), seed=int(seed), cost_model=cost_model,
                   model=tuple(sorted(dataclasses.asdict(model).items())), simulator=simulator,
                   sample=tuple(sample), order=str(order), setup=tuple(setup))

    def _fields(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("sample", "setup"):  # exact flat replays keep the keys they had before these existed
            if not d[k]:
                del d[k]
        return d

    @property
    def base_key(self) -> str:
        """Everything but the capacity: the curves that can share points."""
        return _digest(self._fields())

    def point_key(self, capacity_blocks: int) -> str:
        return _digest([self.base_key, int(capacity_blocks)])

    def curve_key(self, capacities: Sequence[int]) -> str:
        return _digest([self.base_key, [int(c) for c in capacities]])


def sweep_key(curve_keys: Sequence[str]) -> str:
    return _digest(sorted(curve_keys))
