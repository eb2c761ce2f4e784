"""trace.weeks=k: k independently generated weeks of a synthetic profile, back to back.

One generated week's results move with its seed by about a point at 24-48 GiB
(docs/fidelity.md, "Seed spread"): which long sessions happen to be in flight together is chance, and a
larger trace averages it only slowly. Independent weeks replayed through one cache give
their access-weighted mean (within 0.02 point: `python -m benchmarks.fidelity spread`),
so k weeks divide the spread by about sqrt(k). Week 0 is the seed's own trace; week w
is another draw of the same seed (sim_core.synth.generate(..., week=w)).

An exact replay builds the k weeks as one trace (sim_core.trace.back_to_back): k times
one week's memory. A sampled replay never holds more than one week: each is generated,
sampled at every rate the study's capacities need (sim_core.sample.capacity_rates), and
dropped; the study then replays the weeks' samples back to back (`WeekSamples`).
"""
from __future__ import annotations

import hashlib
import logging
from typing import Callable, Iterable

import numpy as np

from sim_core.digest import trace_digest
from sim_core.sample import SampleSet, capacity_rates
from sim_core.trace import Trace, back_to_back

log = logging.getLogger("sweep")


class WeekSamples(SampleSet):
    """The samples of k weeks back to back, without the weeks: what a sampled study
    replays, with the facts it asks of its trace (sizes, digest, the first week's
    summary)."""

    def __init__(self, name: str, source: str, block_tokens: int, samples: dict, weeks: int, n_requests: int,
                 n_accesses: int, n_unique: int, request_lengths: np.ndarray, digest: str, summary: tuple | None):
        super().__init__(name, source, block_tokens, n_accesses, samples)
        self.weeks, self.n_requests, self.n_unique = int(weeks), int(n_requests), int(n_unique)
        self.request_lengths = request_lengths
        self.max_request_blocks = int(request_lengths.max()) if len(request_lengths) else 0
        self._content_digest = digest  # sim_core.digest.trace_digest reads it
        self.summary = summary  # (flat dict, text) of week 0: sweep.traces.summarize


def weeks_digest(digests: Iterable[str]) -> str:
    """The identity of weeks back to back: their content digests in order."""
    ds = list(digests)
    return hashlib.blake2b(f"weeks={len(ds)}:{','.join(ds)}".encode(), digest_size=16).hexdigest()


def exact(make_week: Callable[[int], Trace], k: int) -> Trace:
    """The k weeks as one trace (an exact replay needs every access)."""
    return back_to_back([make_week(w) for w in range(k)])


def sampled(make_week: Callable[[int], Trace], k: int, capacities, rate: float, sample_seed: int, mode,
            rules: Iterable[tuple[str, int | None]], summarize: Callable | None = None) -> WeekSamples:
    """The samples a study of `capacities` needs at `rate` under each (sample_by, floor)
    rule, for weeks 0..k-1 back to back. One week is in memory at a time: `make_week(w)`
    builds it, its samples are kept and it is dropped. `summarize(week 0)` is kept as the
    first week's summary. Raises ValueError when a capacity would be replayed exactly
    (rate 1: a scaled cache below the floor at every rate), which needs the whole weeks."""
    rules = list(dict.fromkeys(rules))
    per_key: dict[tuple, list[Trace]] = {}
    lengths, digests, summary = [], [], None
    n_req = n_acc = n_unique = 0
    name = source = block_tokens = None
    for w in range(k):
        t = make_week(w)
        for by, floor in rules:
            rates = capacity_rates(t, capacities, rate, sample_seed, by, mode, floor=floor)
            full = sorted(c for c, r in rates.items() if r >= 1.0)
            if full:
                raise ValueError(f"capacities of {', '.join(map(str, full[:4]))} blocks would be replayed exactly "
                                 f"(too small to sample under sample_by={by}), which needs all {k} weeks in memory")
        for key, s in t.__dict__.get("_samples", {}).items():
            per_key.setdefault(key, []).append(s)
        digests.append(trace_digest(t))
        lengths.append(t.request_lengths)
        n_req, n_acc, n_unique = n_req + t.n_requests, n_acc + t.n_accesses, n_unique + t.n_unique
        if w == 0:
            name, source, block_tokens = t.name, t.source, t.block_tokens
            if summarize is not None:
                summary = summarize(t)
        log.info("week %d of %d: %d requests, %d block accesses; %d sample(s) kept", w + 1, k, t.n_requests,
                 t.n_accesses, len(t.__dict__.get("_samples", {})))
        del t  # the next week is generated without this one in memory
    # every week builds the same samples: depth-stratified rates depend on the capacity only
    partial = [key for key, v in per_key.items() if len(v) != k]
    if partial:
        raise ValueError(f"weeks were sampled at different rates ({partial}): a planning mismatch")
    samples = {key: back_to_back(v) for key, v in per_key.items()}
    return WeekSamples(name, source, block_tokens, samples, k, n_req, n_acc, n_unique, np.concatenate(lengths), weeks_digest(digests),
                       summary)
