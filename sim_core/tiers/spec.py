"""A lower tier as `simulate(..., tiers=[...])` takes it: the spec, its checks (errors name
the field) and the state the compiled replay runs (sim_core/tiers/hierarchy.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .hierarchy import (ADMIT_AFTER_HITS, ADMIT_ALL, ADMIT_DOORKEEPER, ADMIT_FREQUENCY, ADMIT_LOOKUPS,
                        DOOR_WINDOW, MAX_TIERS, N_A, N_T_COUNTERS, NO_GATE, T_REQ, TOUCHES, WRITES, Gate, Tier)
from ..policies import PolicyContext, REGISTRY, get_policy
from ..result import Mode

FREQ_TICK_S = 600.0  # Dynamo KVBM's FrequencyFilter flush interval (offload.rs: 600 s)
ADMITS = "all, after_hits=N, doorkeeper, lookups=N, frequency=N or frequency=N/Ts (N >= 1)"
_FREQ = re.compile(r"^frequency=(\d+)(?:/(\d+(?:\.\d+)?)s)?$")


@dataclass(frozen=True)
class TierSpec:
    """One lower tier, as `simulate(..., tiers=[...])` takes it (a dict with these keys).
    The defaults are vLLM's CPU offload (sim_core/tiers/rules.py: `vllm_cpu`)."""

    name: str
    capacity: int  # blocks
    policy: str = "lru"
    write: str = "on_compute"  # on_evict | on_compute | on_hit
    inclusive: bool = True
    admit: str = "all"  # ADMITS
    touch: str = "request"  # loads | request
    promote: int = 0  # 0: never; N: a block is copied into the tier above on its N-th hit here
    params: dict = field(default_factory=dict)
    link: str = "host"  # which hardware bandwidth loads from it use (TTFT): host | ssd
    bandwidth_bps: float | None = None  # overrides the hardware's bandwidth for this tier (inf: copies are free)
    latency_s: float = 0.0  # seconds before a transfer's first byte (a remote tier's round trip)
    shared: bool = False  # one store for every replica of a fleet (serve); with one cache it is private

    def key(self) -> tuple:
        """What decides the tier's replay (a result's key). The bandwidth is not in it:
        it changes the TTFT estimate only."""
        return (self.name, int(self.capacity), self.policy, self.write, bool(self.inclusive), self.admit,
                tuple(sorted(self.params.items())), self.touch, int(self.promote))


RULES = ("policy", "write", "inclusive", "admit", "touch", "promote")  # what an engine's hierarchy sets
FIELDS = ("name", "capacity", *RULES, "params", "link", "bandwidth_bps", "latency_s", "shared")


def parse_admit(text, where: str) -> tuple[int, int, float]:
    """(kind, N, tick seconds) of an admission rule (ADMITS)."""
    s = "all" if text is None else str(text).strip().lower()
    if s == "all":
        return ADMIT_ALL, 0, 0.0
    if s == "doorkeeper":
        return ADMIT_DOORKEEPER, 0, 0.0
    m = _FREQ.match(s)
    kind, v, tick = None, None, 0.0
    if m:
        kind, v, tick = ADMIT_FREQUENCY, m.group(1), float(m.group(2) or FREQ_TICK_S)
    for name, k in (("after_hits=", ADMIT_AFTER_HITS), ("lookups=", ADMIT_LOOKUPS)):
        if s.startswith(name):
            kind, v = k, s[len(name):]
    if kind is not None and v.lstrip("-").isdigit():
        if int(v) < 1:
            raise ValueError(f"{where}: admission {text!r}: the threshold must be >= 1, got {int(v)}")
        if kind == ADMIT_FREQUENCY and not tick > 0:
            raise ValueError(f"{where}: admission {text!r}: the decay interval must be positive")
        return kind, int(v), tick
    raise ValueError(f"{where}: unknown admission {text!r}; valid: {ADMITS}")


def new_admission(rule, n_unique: int, capacity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(admission array, per-block state) of a rule for a cache of `capacity` blocks; the
    per-block array (doorkeeper stamps, lookup or frequency counts) only where it is read."""
    kind, n, tick = parse_admit(rule, "admit")
    adm = np.zeros(N_A, np.int64)
    adm[:4] = [kind, n, DOOR_WINDOW * max(int(capacity), 1), 0]
    per_block = kind in (ADMIT_DOORKEEPER, ADMIT_LOOKUPS, ADMIT_FREQUENCY)
    door = np.full(n_unique if per_block else 1, -1 if kind == ADMIT_DOORKEEPER else 0, np.int64)
    return adm, door


def new_gate(rule, n_unique: int, capacity: int = 1):
    """HBM's admission as an engine argument: NO_GATE for `all` (compiled away)."""
    kind = parse_admit(rule, "hbm_admit")[0]
    if kind in (ADMIT_LOOKUPS, ADMIT_FREQUENCY):
        raise ValueError(f"hbm_admit: {rule!r} is a lower tier's rule (lookups and write attempts are counted "
                         f"there); HBM takes all, after_hits=N or doorkeeper")
    adm, door = new_admission(rule, n_unique, capacity)
    return NO_GATE if adm[0] == ADMIT_ALL else Gate(adm, door)


def as_tier_specs(tiers, n_max: int = MAX_TIERS) -> list[TierSpec]:
    """Checked TierSpecs from dicts (or TierSpecs); a bad field is named."""
    out: list[TierSpec] = []
    names = set()
    for i, t in enumerate(tiers or []):
        d = dict(t.__dict__) if isinstance(t, TierSpec) else dict(t)
        where = f"tiers[{i}]"
        unknown = set(d) - set(FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; valid: {sorted(FIELDS)}")
        name = str(d.get("name") or f"tier{i + 1}")
        where = f"tier {name!r}"
        if name in names or name == "hbm":
            raise ValueError(f"{where}: tier names must be unique and not 'hbm'")
        names.add(name)
        d = {k: v for k, v in d.items() if v is not None or k == "bandwidth_bps"}
        cap = d.get("capacity")
        if isinstance(cap, bool) or not isinstance(cap, (int, np.integer, float)) or \
                (isinstance(cap, float) and not cap.is_integer()) or cap < 0:
            raise ValueError(f"{where}: capacity must be a whole number of blocks >= 0, got {cap!r}")
        policy = str(d.get("policy", TierSpec.policy))
        spec = get_policy(policy)  # raises on an unknown name, listing the valid ones
        if spec.solve is not None or spec.train is not None:
            raise ValueError(f"{where}: policy {policy!r} cannot run a lower tier (it is solved or trained over "
                             f"the whole trace)")
        write = str(d.get("write", TierSpec.write))
        if write not in WRITES:
            raise ValueError(f"{where}: unknown write mode {write!r}; valid: {', '.join(WRITES)}")
        if write == "on_hit" and i == 0:
            raise ValueError(f"{where}: write=on_hit takes the blocks the tier above serves; the first lower "
                             f"tier has only HBM above it")
        touch = str(d.get("touch", TierSpec.touch))
        if touch not in TOUCHES:
            raise ValueError(f"{where}: unknown touch {touch!r}; valid: {', '.join(TOUCHES)}")
        promote = d.get("promote", TierSpec.promote)
        if isinstance(promote, bool) or not isinstance(promote, (int, np.integer)) or promote < 0:
            raise ValueError(f"{where}: promote must be 0 (never) or the hit on which a block is copied up "
                             f"(>= 1), got {promote!r}")
        if promote and i == 0:
            raise ValueError(f"{where}: promote copies a hit into the tier above; the first lower tier has only "
                             f"HBM above it")
        inclusive = d.get("inclusive", TierSpec.inclusive)
        if not isinstance(inclusive, (bool, np.bool_)):
            raise ValueError(f"{where}: inclusive must be true or false, got {inclusive!r}")
        if not inclusive and not spec.removable:
            raise ValueError(f"{where}: policy {policy!r} has no remove hook, so it can only run an inclusive tier "
                             f"(inclusive=true); exclusive tiers run: {', '.join(removable_policies())}")
        admit_rule = str(d.get("admit", TierSpec.admit))
        parse_admit(admit_rule, where)
        params = dict(d.get("params") or {})
        unknown = set(params) - set(spec.defaults)
        if unknown:
            raise ValueError(f"{where}: policy {policy!r} has no parameter(s) {sorted(unknown)}")
        link = str(d.get("link") or "host")
        if link not in ("host", "ssd"):
            raise ValueError(f"{where}: unknown link {link!r}; valid: host, ssd")
        bw = d.get("bandwidth_bps")
        if bw is not None and (isinstance(bw, bool) or not isinstance(bw, (int, float, np.number)) or not bw > 0):
            raise ValueError(f"{where}: bandwidth_bps must be a positive number of bytes/s (inf: copies are "
                             f"instantaneous), got {bw!r}")
        lat = d.get("latency_s", 0.0)
        if isinstance(lat, bool) or not isinstance(lat, (int, float, np.number)) or not 0 <= lat < float("inf"):
            raise ValueError(f"{where}: latency_s must be a finite number of seconds >= 0, got {lat!r}")
        shared = d.get("shared", False)
        if not isinstance(shared, (bool, np.bool_)):
            raise ValueError(f"{where}: shared must be true or false, got {shared!r}")
        if shared and i == 0:
            raise ValueError(f"{where}: shared: the first tier under HBM is each replica's own (host memory); a "
                             f"pool the replicas share goes below it")
        out.append(TierSpec(name, int(cap), spec.name, write, bool(inclusive), admit_rule, touch, int(promote),
                            {**spec.defaults, **params}, link, None if bw is None else float(bw), float(lat),
                            bool(shared)))
    if len(out) > n_max:
        raise ValueError(f"at most {n_max} lower tiers, got {len(out)}")
    for s in out[:-1]:
        if s.shared:
            raise ValueError(f"tier {s.name!r}: shared: a pool the replicas share is the last tier (the victims of "
                             f"a shared tier have no replica's tier to go to)")
    return out


def removable_policies() -> list[str]:
    return sorted(n for n, s in REGISTRY.items() if s.removable)


def build_tier(spec: TierSpec, trace, cost_per_depth, seed: int, stamped: bool = False) -> Tier:
    """A lower tier's state over `trace` (the replay's view); `stamped`: it records who wrote
    each block and when (Tier.owner: a pool the serving replay's replicas share)."""
    p = get_policy(spec.policy)
    cap = int(spec.capacity)
    U = trace.n_unique
    st = p.make_state(PolicyContext(trace=trace, capacity=max(cap, 1), mode=Mode.BLOCK,
                                    cost_per_depth=cost_per_depth, params=dict(spec.params), seed=seed))
    adm, door = new_admission(spec.admit, U, cap)
    kind, _, tick_s = parse_admit(spec.admit, spec.name)
    tick = np.zeros(1, np.int32)
    if kind == ADMIT_FREQUENCY and trace.n_requests:
        a = np.asarray(trace.arrival_s, np.float64)
        tick = np.floor((a - a[0]) / tick_s).astype(np.int32)  # the filter's decay clock, trace time
    cfg = np.array([cap, WRITES.index(spec.write), int(spec.inclusive), TOUCHES.index(spec.touch),
                    int(spec.promote)], np.int64)
    c = np.zeros(N_T_COUNTERS, np.int64)
    c[T_REQ] = -2
    return Tier(st, np.zeros(U, np.bool_), np.full(U, -1, np.int32), np.empty(max(cap, 1), np.int32),
                np.empty(max(cap, 1) + 1, np.int32), c, cfg, adm, door,
                np.zeros(U if spec.promote else 1, np.int32), tick,
                np.zeros(max(int(trace.max_request_blocks), 1), np.int8),
                np.zeros(U if stamped else 1, np.int64))

