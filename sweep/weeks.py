"""trace.weeks=k: k independently generated weeks of a synthetic profile, back to back.

One generated week's results move with its seed by about a point at 24-48 GiB
(docs/fidelity.md, "Seed spread"): which long sessions happen to be in flight together is chance, and a
larger trace averages it only slowly. Independent weeks replayed through one cache give
their access-weighted mean (within 0.02 point: `python -m benchmarks.fidelity spread`),
so k weeks divide the spread by about sqrt(k). Week 0 is the seed's own trace; week w
is another draw of the same seed (sim_core.traces.synth.generate(..., week=w)).

An exact replay builds the k weeks as one trace (sim_core.traces.trace.back_to_back): k times
one week's memory. A sampled replay holds one week per CPU at most: each is generated,
sampled at every rate the study's capacities need (sim_core.traces.sample.capacity_rates), and
dropped; weeks after the first are built in forked processes, one per CPU as long as the
available memory holds them (`week_workers`), so on two cores the driver's generation
takes about half as long. The study then replays the weeks' samples back to back
(`WeekSamples`).
"""
from __future__ import annotations

import hashlib
import logging
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable

import numpy as np

from sim_core.digest import trace_digest
from sim_core.traces.sample import SampleSet, capacity_rates
from sim_core.traces.trace import Trace, back_to_back

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


def _sample_week(t: Trace, capacities, rate: float, sample_seed: int, mode, rules, k: int) -> dict:
    """One week's share of `sampled`: its samples at every rate the rules need, and the
    facts the study keeps of it."""
    for by, floor in rules:
        rates = capacity_rates(t, capacities, rate, sample_seed, by, mode, floor=floor)
        full = sorted(c for c, r in rates.items() if r >= 1.0)
        if full:
            raise ValueError(f"capacities of {', '.join(map(str, full[:4]))} blocks would be replayed exactly "
                             f"(too small to sample under sample_by={by}), which needs all {k} weeks in memory")
    return {"samples": dict(t.__dict__.get("_samples", {})), "digest": trace_digest(t),
            "lengths": t.request_lengths, "n": (t.n_requests, t.n_accesses, t.n_unique),
            "name": (t.name, t.source, t.block_tokens)}


_FORKED: tuple = ()  # (make_week, sampling arguments): what a forked week worker inherits


def _forked_week(w: int) -> dict:
    make_week, args = _FORKED
    t = make_week(w)
    out = _sample_week(t, *args)
    log.info("week %d: %d requests, %d block accesses; %d sample(s) kept", w + 1, t.n_requests, t.n_accesses,
             len(out["samples"]))
    return out


def week_workers(k: int, week: Trace) -> int:
    """How many weeks to build at once: one per CPU and as many as the available memory
    holds (a week at its peak: about twice its arrays, `week` being one), at most the
    k - 1 weeks after the first."""
    peak = 2 * sum(v.nbytes for v in vars(week).values() if isinstance(v, np.ndarray))
    try:
        with open("/proc/meminfo") as fh:
            avail = next(int(x.split()[1]) * 1024 for x in fh if x.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 1
    return int(max(1, min(k - 1, os.cpu_count() or 1, avail // max(1, peak))))


def sampled(make_week: Callable[[int], Trace], k: int, capacities, rate: float, sample_seed: int, mode,
            rules: Iterable[tuple[str, int | None]], summarize: Callable | None = None,
            workers: int = 1) -> WeekSamples:
    """The samples a study of `capacities` needs at `rate` under each (sample_by, floor)
    rule, for weeks 0..k-1 back to back. `make_week(w)` builds week w; its samples are
    kept and it is dropped. With `workers` = 1 one week is in memory at a time; with more,
    week 0 is sampled here and weeks 1..k-1 are built `workers` at a time in forked
    processes (same samples, `workers` weeks in memory). `summarize(week 0)` is kept as
    the first week's summary. Raises ValueError when a capacity would be replayed exactly
    (rate 1: a scaled cache below the floor at every rate), which needs the whole weeks."""
    global _FORKED
    rules = list(dict.fromkeys(rules))
    args = (capacities, rate, sample_seed, mode, rules, k)
    t = make_week(0)
    summary = summarize(t) if summarize is not None else None
    parts = [_sample_week(t, *args)]
    log.info("week 1 of %d: %d requests, %d block accesses; %d sample(s) kept", k, t.n_requests, t.n_accesses,
             len(parts[0]["samples"]))
    del t  # the next week is generated without this one in memory
    if workers > 1 and k > 2:
        _FORKED = (make_week, args)
        try:
            with ProcessPoolExecutor(max_workers=min(workers, k - 1), mp_context=mp.get_context("fork")) as ex:
                parts += list(ex.map(_forked_week, range(1, k)))
        finally:
            _FORKED = ()
    else:
        for w in range(1, k):
            t = make_week(w)
            parts.append(_sample_week(t, *args))
            log.info("week %d of %d: %d requests, %d block accesses; %d sample(s) kept", w + 1, k, t.n_requests,
                     t.n_accesses, len(parts[-1]["samples"]))
            del t
    per_key: dict[tuple, list[Trace]] = {}
    for part in parts:
        for key, s in part["samples"].items():
            per_key.setdefault(key, []).append(s)
    # every week builds the same samples: depth-stratified rates depend on the capacity only
    partial = [key for key, v in per_key.items() if len(v) != k]
    if partial:
        raise ValueError(f"weeks were sampled at different rates ({partial}): a planning mismatch")
    samples = {key: back_to_back(v) for key, v in per_key.items()}
    n_req, n_acc, n_unique = (sum(p["n"][i] for p in parts) for i in range(3))
    name, source, block_tokens = parts[0]["name"]
    return WeekSamples(name, source, block_tokens, samples, k, n_req, n_acc, n_unique,
                       np.concatenate([p["lengths"] for p in parts]), weeks_digest(p["digest"] for p in parts),
                       summary)
