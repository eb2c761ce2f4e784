"""Compile, before any test runs, the numba kernels many test modules share
(`pytest --jit-warmup`, which `make test` passes; tests/conftest.py).

On a cold cache (a fresh clone: sim_core/jit.py keys the cache by a digest of every
sim_core source) compiling dominates the suite: one replay engine specialised for a
policy's state takes 10-40 s. Left to the tests, the first test to touch a kernel pays
for it, and two xdist workers that need the same kernel at the same time both compile
it (measured: LRU, Belady, BeladyCompute, PartialNode, LRU-session and LeCaR engines
twice each in the first minutes of a cold run). Here each worker compiles its share of
KERNELS (longest first, to the least-loaded worker: the same split on every worker);
xdist schedules no test before every worker has collected, so both shares are in the
shared on-disk cache before the first test asks for one. A kernel not listed is
compiled on demand as before. On a warm cache each kernel is loaded in well under a
second.
"""
from __future__ import annotations

import time
from typing import Callable

#: kernels: (name, relative compile cost, call). Costs are the cold compile times (s) of
#: a run on this project's CI machine; they only order the split.
Kernel = tuple[str, float, Callable[[], None]]


def _trace():
    """Three prefix-chained sessions with token counts and arrival times: every policy
    (the session ones included) and serve() run on it."""
    from sim_core import Trace

    reqs = [[1, 2], [1, 2, 3], [7, 8], [1, 2, 3, 4], [7, 8, 9], [11], [1, 2, 3, 4, 5], [7, 8, 9, 10]]
    return Trace.from_requests(reqs, arrival_s=[0.1 * i for i in range(len(reqs))],
                               session=[0, 0, 1, 0, 1, 2, 0, 1], block_tokens=16,
                               input_tokens=[16 * len(r) for r in reqs], output_tokens=[4] * len(reqs),
                               name="jit-warmup")


def kernels() -> list[Kernel]:
    from sim_core import simulate
    from sim_core.policies import REGISTRY

    t = _trace()
    out: list[Kernel] = []
    # the replay engine of every policy that replays (flat cache, default options); LRU's
    # one-pass curve is its own kernel
    for name, spec in REGISTRY.items():
        if spec.solve is None:
            out.append((f"replay {name}", 30.0,
                        lambda n=name: simulate(t, n, [4], mode="request", one_pass=False)))
    out.append(("one-pass lru", 15.0, lambda: simulate(t, "lru", [4, 8], mode="request")))
    return out


def split(items: list[Kernel], n: int) -> list[list[Kernel]]:
    """Longest first, each to the share with the least cost so far (ties: lowest index)."""
    shares: list[list[Kernel]] = [[] for _ in range(n)]
    load = [0.0] * n
    for k in sorted(items, key=lambda k: (-k[1], k[0])):
        i = min(range(n), key=lambda j: (load[j], j))
        shares[i].append(k)
        load[i] += k[1]
    return shares


def warm(index: int = 0, count: int = 1) -> dict:
    """Compile share `index` of `count`; {"kernels", "seconds", "failed": [names]}. A
    kernel that fails here is left to the tests (which report the real error)."""
    t0 = time.perf_counter()
    failed = []
    mine = split(kernels(), count)[index]
    for name, _, call in mine:
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the tests will say what is wrong
            failed.append(f"{name}: {type(e).__name__}: {e}"[:200])
    return {"kernels": len(mine), "seconds": round(time.perf_counter() - t0, 1), "failed": failed}
