"""Is the default study representative? Its 24 GiB values against the 10-seed mean.

    python -m benchmarks.default_study weeks --seeds 0-9 --weeks 0 --rate 0.02   # the reference: week 0 of 10 seeds
    python -m benchmarks.default_study weeks --seeds 0 --weeks 0-7 --rate 0.01   # seed 0's weeks one by one
    python -m benchmarks.default_study study --weeks 4 --rate 0.00125            # the default study at 24 GiB
    python -m benchmarks.default_study table                                     # study against reference
    python -m benchmarks.default_study by-weeks --rate 0.01                      # k of seed 0's weeks against it

`python -m sweep trace=freeinference policy=all` replays `trace.weeks` independent
full-scale weeks of seed 0 back to back, sampled (sim.sample_rate=auto; the sampling
floor raises the rate of small capacities). Its results should not depend on which
seed generated the weeks: this script compares its 24 GiB values (hit ratio and compute
savings under every cost model, every policy of `policy=all`) with the mean over trace
seeds 0-9 of one week each, replayed at one capacity, 24 GiB, at a higher rate.

- `weeks`: one row per (seed, week, rate): every policy at 24 GiB on that one week,
  sampled by depth at `--rate` (sample seed = trace seed), as a one-week study would.
  The reference is `--seeds 0-9 --weeks 0`; seed 0's other weeks show how a study of k
  weeks moves with k (their access-weighted mean is what k weeks back to back give,
  within 0.02 point: docs/fidelity.md, "Independent weeks").
- `study`: the default study's own 24 GiB values: `--weeks` weeks of seed 0 sampled as
  the sweep samples them (sweep.weeks.sampled, base rate `--rate`, the floor's raised
  rate at 24 GiB), every policy replayed through them back to back, as the sweep does.
  A later row with `--policies` replaces those policies' values (after a policy's
  sampling changed).
- `table`: per policy and cost model, the study's value, the reference mean, their
  difference in points and the reference's standard error; a markdown table on stdout.
- `by-weeks`: for k = 1, 2, ... the mean of seed 0's weeks 0..k-1 (`weeks` rows at
  `--rate`) against the reference: the largest and the mean difference over every value.

Rows are appended to `--out` (default bench_results/default_study.jsonl); a row already
there is not recomputed. `--jobs` units (seed, week) run in parallel processes; each holds
one full-scale week (about 6 GB at its peak).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sim_core import QWEN3_CODER_30B, get_policy, policy_names, simulate, to_blocks
from sim_core.traces import synth
from sim_core.traces.sample import capacity_rates

COSTS = ("uniform", "linear", "qwen3_coder_30b")
CAPACITY = to_blocks("24GiB", QWEN3_CODER_30B, 16)  # 16,384 blocks of 16 tokens
OUT = Path("bench_results/default_study.jsonl")


def study_policies() -> list[str]:
    """The policies `policy=all` runs under sampled replay: not slow, in `all`, sampled."""
    out = []
    for name in policy_names():
        s = get_policy(name)
        if s.in_all and not s.slow and s.sample_ok and s.solve is None:
            out.append(name)
    return out


def _runs(policies):
    """(policy, cost models of one pass) as the sweep plans them: a cost-aware policy
    once per cost model, except a uniform pass that another policy of the study makes
    (PolicySpec.uniform_same_as: read off that policy's pass, sweep/derived.py)."""
    for p in policies:
        s = get_policy(p)
        if not s.cost_aware:
            yield p, COSTS
            continue
        for m in COSTS:
            if m == "uniform" and s.uniform_same_as is not None and \
                    s.uniform_same_as(dict(s.defaults))[0] in policies:
                continue
            yield p, (m,)


def replay(trace, policies, rate: float, sample_seed: int) -> dict:
    """'policy:cost' -> [hit ratio, savings] at 24 GiB, every policy replayed on `trace`
    sampled at `rate` (raised by the floor where needed, as simulate does)."""
    vals = {}
    for p, models in _runs(policies):
        r, = simulate(trace, p, [CAPACITY], cost_models=models, sample_rate=rate, sample_seed=sample_seed)
        for m in models:
            vals[f"{p}:{m}"] = [r.hit_ratio, r.compute_savings[m]]
    for p in policies:  # uniform passes read off another policy's
        s = get_policy(p)
        if s.cost_aware and f"{p}:uniform" not in vals:
            same = s.uniform_same_as(dict(s.defaults))[0]
            vals[f"{p}:uniform"] = vals[f"{same}:uniform"]
    return vals


SCALE = 1.0  # --scale: a smaller trace, to try the script out (not representative)


def _week(seed: int, week: int, scale: float):
    return synth.generate("freeinference", scale=scale, seed=seed, week=week)


def week_unit(seed: int, week: int, rates: list[float], policies: list[str], scale: float) -> list[dict]:
    t0 = time.perf_counter()
    t = _week(seed, week, scale)
    gen = time.perf_counter() - t0
    rows = []
    for rate in rates:
        t1 = time.perf_counter()
        vals = replay(t, policies, rate, seed)
        rows.append({"kind": "week", "seed": seed, "week": week, "rate": rate, "scale": scale, "values": vals,
                     "gen_s": round(gen, 1), "replay_s": round(time.perf_counter() - t1, 1)})
    return rows


def study_unit(weeks: int, rate: float, seed: int, policies: list[str], scale: float) -> list[dict]:
    from sweep import weeks as wk

    t0 = time.perf_counter()
    rules = list(dict.fromkeys((get_policy(p).sample_by, get_policy(p).sample_floor) for p in policies))
    samples = wk.sampled(lambda w: _week(seed, w, scale), weeks, [CAPACITY], rate, 0, "request", rules)
    gen = time.perf_counter() - t0
    t1 = time.perf_counter()
    vals = replay(samples, policies, rate, 0)
    raised = {f"{by}/{floor}": capacity_rates(samples, [CAPACITY], rate, 0, by, "request", floor)[CAPACITY]
              for by, floor in rules}
    return [{"kind": "study", "seed": seed, "weeks": weeks, "rate": rate, "scale": scale, "rate_24GiB": raised,
             "policies": policies, "values": vals,
             "gen_s": round(gen, 1), "replay_s": round(time.perf_counter() - t1, 1)}]


def _key(row: dict) -> tuple:
    return (row["kind"], row["seed"], row.get("week", row.get("weeks")), row["rate"], row.get("scale", 1.0),
            tuple(row.get("policies") or ()))


def load(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def at_scale(rows: list[dict], scale: float) -> list[dict]:
    return [r for r in rows if r.get("scale", 1.0) == scale]


def _ints(spec: str) -> list[int]:
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def run_units(units, out: Path, jobs: int) -> None:
    """Run (function, args) units, `jobs` at a time, appending their rows to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as ex:
        for fut in [ex.submit(f, *args) for f, args in units]:
            rows = fut.result()
            with out.open("a") as fh:
                for row in rows:
                    fh.write(json.dumps(row) + "\n")
            for row in rows:
                print(json.dumps({k: v for k, v in row.items() if k != "values"}), file=sys.stderr)


def reference(rows: list[dict], rate: float | None = None, weeks: int = 1) -> tuple[dict, dict, list[int]]:
    """(mean, standard error of the mean) per 'policy:cost' over the seeds that have
    `weeks` week rows (0..weeks-1; at `rate`, or each week's highest rate measured):
    each seed's mean over its weeks, then the mean over the seeds; and the seeds."""
    best = {}
    for r in rows:
        if r["kind"] == "week" and r["week"] < weeks and (rate is None or r["rate"] == rate):
            key = (r["seed"], r["week"])
            if key not in best or r["rate"] > best[key]["rate"]:
                best[key] = r
    seeds = sorted(s for s in {s for s, _ in best} if all((s, w) in best for w in range(weeks)))
    mean, sem = {}, {}
    for k in best[(seeds[0], 0)]["values"] if seeds else ():
        xs = [[sum(best[(s, w)]["values"][k][i] for w in range(weeks)) / weeks for i in (0, 1)] for s in seeds]
        mean[k] = [sum(x[i] for x in xs) / len(xs) for i in (0, 1)]
        sem[k] = [math.sqrt(sum((x[i] - mean[k][i]) ** 2 for x in xs) / max(1, len(xs) - 1) / len(xs))
                  for i in (0, 1)]
    return mean, sem, seeds


def table(rows: list[dict], weeks: int | None, rate: float | None, ref_rate: float | None, ref_weeks: int = 1) -> str:
    study = [r for r in rows if r["kind"] == "study" and (weeks is None or r["weeks"] == weeks)
             and (rate is None or r["rate"] == rate)]
    if not study:
        raise SystemExit("no study row: run `python -m benchmarks.default_study study` first")
    st = dict(study[0], values={k: v for r in study for k, v in r["values"].items()})  # a later row's policies win
    mean, sem, seeds = reference(rows, ref_rate, ref_weeks)
    if not seeds:
        raise SystemExit("no reference rows: run `python -m benchmarks.default_study weeks --seeds 0-9 --weeks 0`")
    lines = [f"Default study: seed 0, {st['weeks']} weeks, r = {st['rate']:g} (24 GiB at "
             f"{', '.join(f'{v:g}' for v in st['rate_24GiB'].values())}); reference: weeks 0-{ref_weeks - 1} of seeds "
             f"{seeds[0]}-{seeds[-1]} ({len(seeds)}). Values at 24 GiB; differences and the reference's "
             "standard error in points.", "",
             "| policy | pass | hit ratio: study, mean, difference | savings: study, mean, difference | s.e. |",
             "|---|---|---|---|---:|"]
    worst = (0.0, "")
    for p in dict.fromkeys(k.split(":")[0] for k in st["values"]):
        aware = get_policy(p).cost_aware
        for m in COSTS if aware else ("uniform", "linear", "qwen3_coder_30b"):
            k = f"{p}:{m}"
            cells = []
            for i in (0, 1):
                if (i == 0 and not aware and m != "uniform") or (i == 1 and m == "uniform"):
                    cells.append("")
                    continue
                v, ref = st["values"][k][i], mean[k][i]
                d = 100 * (v - ref)
                worst = max(worst, (abs(d), f"{p} {m} {('hit ratio', 'savings')[i]}"))
                cells.append(f"{v:.4f}, {ref:.4f}, {'**' if abs(d) > 0.5 else ''}{d:+.2f}"
                             f"{'**' if abs(d) > 0.5 else ''}")
            se = max(100 * sem[k][i] for i in (0, 1))
            pas = m if aware else ("(one pass)" if m == "uniform" else f"({m})")
            lines.append(f"| {p} | {pas} | {cells[0]} | {cells[1]} | {se:.2f} |")
    lines += ["", f"Largest difference: {worst[0]:.2f} point ({worst[1]})."]
    return "\n".join(lines)


def by_weeks(rows: list[dict], rate: float, ref_rate: float | None, ref_weeks: int = 1) -> str:
    """k = 1.. of seed 0's weeks (their plain mean) against the reference."""
    mean, _, seeds = reference(rows, ref_rate, ref_weeks)
    wk = {r["week"]: r["values"] for r in rows if r["kind"] == "week" and r["seed"] == 0 and r["rate"] == rate}
    lines = [f"Seed 0's weeks 0..k-1 at r = {rate:g} (mean of the weeks) against the mean of weeks 0-{ref_weeks - 1} of seeds "
             f"{seeds[0]}-{seeds[-1]}, in points, over every value of the table (hit ratios and savings).", "",
             "| k | largest difference | mean difference | values over 0.5 |", "|---:|---|---:|---:|"]
    k = 0
    while k in wk:
        k += 1
        devs = {}
        for key in wk[0]:
            for i in (0, 1):
                if (i == 1 and key.endswith(":uniform")) or \
                        (i == 0 and not key.endswith(":uniform") and not get_policy(key.split(":")[0]).cost_aware):
                    continue
                devs[(key, i)] = 100 * (sum(wk[w][key][i] for w in range(k)) / k - mean[key][i])
        (key, i), d = max(devs.items(), key=lambda x: abs(x[1]))
        lines.append(f"| {k} | {d:+.2f} ({key.replace(':', ' ')} {('hit ratio', 'savings')[i]}) | "
                     f"{sum(devs.values()) / len(devs):+.2f} | {sum(abs(v) > 0.5 for v in devs.values())} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.default_study", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.split("\n")[1:]))
    ap.add_argument("what", choices=("weeks", "study", "table", "by-weeks"))
    ap.add_argument("--seeds", default="0-9", help="weeks: trace seeds, e.g. 0-9 or 0,3 (default 0-9)")
    ap.add_argument("--weeks", default=None,
                    help="weeks: week numbers, e.g. 0 or 0-7 (default 0); study/table: how many weeks "
                         "(default: conf/trace/freeinference.yaml's trace.weeks)")
    ap.add_argument("--rate", default=None,
                    help="weeks: the sampling rate(s), e.g. 0.02 or 0.02,0.01 (default 0.02); study/table: the base rate "
                         "(default: what sim.sample_rate=auto picks for the weeks)")
    ap.add_argument("--ref-rate", type=float, default=None, help="table: the reference's rate (default: highest)")
    ap.add_argument("--ref-weeks", type=int, default=1,
                    help="table, by-weeks: weeks 0..n-1 of each seed in the reference (default 1)")
    ap.add_argument("--policies", default=None, help="comma-separated (default: those of policy=all)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"rows file (default {OUT})")
    ap.add_argument("--scale", type=float, default=SCALE, help="trace scale (default 1.0: the study's)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="parallel processes")
    a = ap.parse_args(argv)
    pols = a.policies.split(",") if a.policies else study_policies()
    rows = load(a.out)
    have = {_key(r) for r in rows}
    if a.what == "weeks":
        rates = [float(x) for x in (a.rate or "0.02").split(",")]
        units = []
        for s in _ints(a.seeds):
            for w in _ints(a.weeks or "0"):
                todo = [r for r in rates if ("week", s, w, r, a.scale, ()) not in have]
                if todo:
                    units.append((week_unit, (s, w, todo, pols, a.scale)))
        run_units(units, a.out, a.jobs)
        return 0
    if a.what == "by-weeks":
        print(by_weeks(at_scale(rows, a.scale), float(a.rate or 0.01), a.ref_rate, a.ref_weeks))
        return 0
    k = int(a.weeks) if a.weeks else _default_weeks()
    rate = float(a.rate) if a.rate else _auto_rate(k, a.scale)
    if a.what == "study":
        if ("study", 0, k, rate, a.scale, tuple(pols)) not in have:
            run_units([(study_unit, (k, rate, 0, pols, a.scale))], a.out, 1)
        return 0
    print(table(at_scale(load(a.out), a.scale), k, rate, a.ref_rate, a.ref_weeks))
    return 0


def _default_weeks() -> int:
    from omegaconf import OmegaConf

    return int(OmegaConf.load(Path(__file__).resolve().parent.parent / "conf/trace/freeinference.yaml").weeks)


def _auto_rate(k: int, scale: float) -> float | None:
    """sim.sample_rate=auto's rate for k weeks (about 671M accesses each at full scale)."""
    from sim_core.traces.sample import auto_rate

    return auto_rate(int(671_000_000 * scale) * k, k)


if __name__ == "__main__":
    raise SystemExit(main())
