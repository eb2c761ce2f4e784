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

#: kernels: (name, relative compile cost, call). Costs only order the split: cold compile
#: seconds of one engine measured beside a loaded machine's other work (tests' cold run),
#: COST_OF a policy's flat engine (DEFAULT_COST if not listed)
Kernel = tuple[str, float, Callable[[], None]]
COST_OF = {"belady_compute": 130, "lirs": 85, "partial_node": 75, "ttl_pin": 70, "lhd": 70, "asymcache": 70,
           "lrb": 65, "s4fifo": 60, "lecar": 60, "lru": 60, "s3fifo": 55, "threelcache": 55, "belady": 45,
           "sieve": 45, "wtinylfu": 45, "random_compute": 45, "lru_session": 40, "fifo": 40, "lfu": 40, "arc": 40,
           "random_compute_session": 30, "workload_aware": 30, "s3fifo_compute": 25}
DEFAULT_COST = 50


def _trace():
    """Three prefix-chained sessions with token counts and arrival times: every policy
    (the session ones included) and serve() run on it."""
    from sim_core import Trace

    reqs = [[1, 2], [1, 2, 3], [7, 8], [1, 2, 3, 4], [7, 8, 9], [11], [1, 2, 3, 4, 5], [7, 8, 9, 10]]
    return Trace.from_requests(reqs, arrival_s=[0.1 * i for i in range(len(reqs))],
                               session=[0, 0, 1, 0, 1, 2, 0, 1], block_tokens=16,
                               input_tokens=[16 * len(r) for r in reqs], output_tokens=[4] * len(reqs),
                               name="jit-warmup")


#: policies the sweeps of the suite run in Ray actors, whose trace arrays are read-only
#: (the object store's): another signature of the same engine
IN_ACTORS = ("arc", "belady", "fifo", "lecar", "lfu", "lhd", "lirs", "lru", "random_compute", "s3fifo", "s4fifo",
             "sieve", "wtinylfu")
#: (HBM policy, lower tiers' policies) of tiered replays in the suite (each combination is
#: an engine of its own); _RO: also from Ray actors
TIERED = [("lru", ("lru",)), ("lru", ("lru", "lru")), ("lru", ("lru", "lru", "lru")), ("lru", ("fifo",)),
          ("lru", ("fifo", "fifo")), ("lru", ("fifo", "fifo", "fifo")), ("lru", ("arc",)), ("lru", ("arc", "arc")),
          ("lru", ("belady", "belady")), ("lru", ("s3fifo", "lru")), ("lru", ("s3fifo", "s3fifo")),
          ("lru", ("sieve", "sieve")), ("fifo", ("lru",)), ("fifo", ("lru", "lru")), ("fifo", ("lru", "lru", "lru")),
          ("fifo", ("fifo",)), ("fifo", ("fifo", "fifo")), ("fifo", ("fifo", "fifo", "fifo")),
          ("belady", ("lru",)), ("s3fifo", ("lru",)), ("s3fifo", ("lru", "lru"))]
TIERED_RO = [("lru", ("lru",)), ("fifo", ("lru",))]
#: (policy, replicas) of serve() runs in the suite (the replicas' states are a tuple: one
#: engine per count)
SERVED = [("lru", 1), ("lru", 2), ("lru", 3), ("lru", 4), ("belady", 1), ("belady", 2), ("belady", 3), ("fifo", 1),
          ("lfu", 1), ("arc", 1), ("sieve", 1), ("s3fifo", 1), ("s3fifo", 2), ("lru_session", 1),
          ("partial_node", 1), ("partial_node", 2), ("random_compute", 1)]


def _read_only(t):
    import dataclasses

    offsets = t.req_offsets.copy()
    offsets.setflags(write=False)
    return dataclasses.replace(t, req_offsets=offsets)


def kernels() -> list[Kernel]:
    from sim_core import serve, simulate
    from sim_core.policies import REGISTRY

    t = _trace()
    ro = _read_only(t)

    def tiers(names):
        return [{"name": f"t{i}", "capacity": 4, "policy": p} for i, p in enumerate(names)]

    def cost(name):
        return COST_OF.get(name, DEFAULT_COST)

    out: list[Kernel] = []
    # the replay engine of every policy that replays (a flat cache, default options);
    # the policies of one module together (the agent ones share their state type: one
    # engine, which two workers would otherwise both compile)
    by_module: dict = {}
    for name, spec in REGISTRY.items():
        if spec.solve is None and name != "tier_bound":
            by_module.setdefault(spec.make_state.__module__, []).append(name)
    for names in by_module.values():
        out.append((f"replay {', '.join(names)}", cost(names[0]) + sum(cost(n) for n in names[1:] if n in COST_OF),
                    lambda ns=tuple(names): [simulate(t, n, [4], one_pass=False) for n in ns]))
    for name in IN_ACTORS:
        out.append((f"replay {name}, read-only trace", cost(name),
                    lambda n=name: simulate(ro, n, [4], one_pass=False)))
    out.append(("replay lru, hbm_admit", cost("lru"), lambda: simulate(t, "lru", [4], one_pass=False,
                                                                       hbm_admit="after_hits=1")))
    out.append(("one-pass lru", 50.0, lambda: simulate(t, "lru", [4, 8])))
    for hbm, below in TIERED:
        out.append((f"replay {hbm} over {'+'.join(below)}", 40.0 + 10 * len(below),
                    lambda h=hbm, b=below: simulate(t, h, [4], one_pass=False, tiers=tiers(b))))
    for hbm, below in TIERED_RO:
        out.append((f"replay {hbm} over {'+'.join(below)}, read-only trace", 50.0,
                    lambda h=hbm, b=below: simulate(ro, h, [4], one_pass=False, tiers=tiers(b))))
    for name, n in SERVED:
        out.append((f"serve {name} x{n}", 40.0 + 10 * n, lambda p=name, k=n: serve(t, p, 8, replicas=k)))
    out.append(("serve lru over lru", 50.0, lambda: serve(t, "lru", 8, tiers=tiers(["lru"]), hardware="h100_sxm")))
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
    """Compile share `index` of `count`; {"kernels", "seconds", "slowest": [(s, name)],
    "failed": [names]}. A kernel that fails here is left to the tests (which report the
    real error)."""
    t0 = time.perf_counter()
    failed, took = [], []
    mine = split(kernels(), count)[index]
    for name, _, call in mine:
        t1 = time.perf_counter()
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the tests will say what is wrong
            failed.append(f"{name}: {type(e).__name__}: {e}"[:200])
        took.append((round(time.perf_counter() - t1, 1), name))
    return {"kernels": len(mine), "seconds": round(time.perf_counter() - t0, 1), "failed": failed,
            "slowest": sorted(took, reverse=True)[:3]}
