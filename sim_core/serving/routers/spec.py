"""A router's declaration: its name, its typed parameters and where it comes from."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np


class Param(NamedTuple):
    default: float | str
    lo: float = -math.inf  # inclusive bounds of a number
    hi: float = math.inf
    doc: str = ""
    integer: bool = False
    choices: tuple = ()  # a choice is passed to the compiled router as its index


@dataclass(frozen=True)
class RouterSpec:
    name: str
    doc: str  # what it does, one line
    source: str  # the file of the project it models
    params: Mapping[str, Param] = field(default_factory=dict)
    tracks_blocks: bool = False  # reads the distinct blocks each replica is working on (View.bref)
    approximate: bool = False  # reads the approximate cache view (View.seen)

    def resolve(self, given: Mapping | None) -> dict:
        """The parameters: `given` over the defaults, each checked; the error names the field."""
        given = dict(given or {})
        unknown = set(given) - set(self.params)
        if unknown:
            raise ValueError(f"router {self.name!r} has no parameter(s) {sorted(unknown)}; "
                             f"valid: {sorted(self.params) or 'none'}")
        out = {}
        for k, p in self.params.items():
            v = given.get(k, p.default)
            where = f"router {self.name!r} parameter {k}"
            if p.choices:
                if v not in p.choices:
                    raise ValueError(f"{where} must be one of {', '.join(p.choices)}, got {v!r}")
            else:
                if isinstance(v, bool) or not isinstance(v, numbers.Real) or (p.integer and v != int(v)):
                    raise ValueError(f"{where} must be {'an integer' if p.integer else 'a number'}, got {v!r}")
                if not p.lo <= float(v) <= p.hi:
                    raise ValueError(f"{where} must be in [{p.lo:g}, {p.hi:g}], got {v!r}")
            out[k] = v
        return out

    def pack(self, resolved: Mapping) -> np.ndarray:
        """The parameters as the compiled router reads them: float64[12] in declaration order."""
        p = np.zeros(12)
        for i, (k, spec) in enumerate(self.params.items()):
            v = resolved[k]
            p[i] = spec.choices.index(v) if spec.choices else float(v)
        return p
