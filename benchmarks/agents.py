"""Agent hints against LRU and Belady: the share of the LRU-to-Belady gap each recovers.

    python -m benchmarks.agents [--rate 0.01] [--seed 0] [--mode request]

Prints the markdown table of docs/agents.md. For each trace and regime (the paper's HBM
and memory-pool capacities, sweep/report/regimes.py), every policy's hit ratio at each
capacity and its share of the gap recovered, (hint - LRU) / (Belady - LRU), of hit
ratios summed over the regime's capacities (a capacity where Belady and LRU tie adds
nothing), and the mean TTFT over those capacities (service time on an H100, no queueing:
docs/tiers.md), HBM alone and, for the HBM regime, above a 1 TiB DRAM pool (LRU, written
on eviction from HBM, host link). Traces:

- `freeinference`: one full-scale week of sim_core.traces.synth's FreeInference stand-in (seed
  `--seed`, true sessions), every policy replayed sampled by depth at `--rate` as a sweep
  samples it (sim_core.traces.sample: every request and session kept, each m-th depth of each
  prefix tree; caches scaled by the rate, raised at small capacities by the floor). The
  generator's small scale is not a smaller copy of the workload (docs/traces.md), and a
  session sample keeps whole requests that a scaled HBM cache cannot hold;
- `freeinference + tool waits`: the same trace where each turn's tool wait is the gap to
  its session's next turn (Trace.tool_wait_s; an agent framework that knows how long its
  tool calls take); ttl_pin then holds a session for its wait plus `ttl`;
- `mooncake (inferred sessions)`: the bundled Mooncake conversation trace (no session
  ids; sessions inferred from prefix chains by sim_core.traces.sessions.infer_links), unscaled;
- `lmcache miniswe`, `lmcache magagent`: the bundled excerpt of LMCache's agent traces
  (sim_core/data/lmcache_agent_trace, one directory per agent kind, their own session
  ids), tokenized with a byte-level BPE of 8,192 entries trained here on the excerpt's
  prompts (no model's tokenizer ships with the repository; about 3.9 characters a token,
  near a code model's). Each kind fits whole in the smallest HBM size (24 GiB), where LRU
  and Belady both miss only first uses: their regime is `contexts`, room for 1, 2 and 4
  of the trace's largest prompts (the printed footprint says how small). The recorded
  sessions ran one after another; `sessions overlaid` starts them together (the i-th at
  i seconds, each with its own gaps between turns), as a server shared by concurrent
  agents would see them.

`--traces` picks the traces (freeinference, mooncake, lmcache; default all).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
from pathlib import Path

import numpy as np

from sim_core import QWEN3_CODER_30B, Trace, simulate, to_blocks
from sim_core.traces.loaders import DATA_DIR, bundled_path, load_trace
from sim_core.traces.sessions import infer_links, next_in_session
from sim_core.traces.synth import generate

#: (regime, sizes in GiB): inside the paper's HBM (24-120 GiB) and pool (0.25-12 TiB) ranges
REGIME_GIB = (("HBM", (24.0, 48.0, 96.0)), ("pool", (256.0, 1024.0, 4096.0)))
#: (label, policy, params)
HINTS = (("ttl_pin (10 s)", "ttl_pin", {"ttl": 10.0, "source": "fixed"}),
         ("ttl_pin (60 s)", "ttl_pin", {"ttl": 60.0, "source": "fixed"}),
         ("agent_end", "agent_end", None),
         ("agent_next", "agent_next", None))
TOOL_WAIT_HINT = ("ttl_pin (tool wait + 1 s)", "ttl_pin", {"ttl": 1.0, "source": "tool_wait"})
AGENT_DIR = DATA_DIR / "lmcache_agent_trace"
AGENT_KINDS = ("miniswe", "magagent")
#: the contexts regime: room for this many of the trace's largest prompts
CONTEXTS = (1, 2, 4)
OVERLAY_STAGGER_S = 1.0
TRACES = ("freeinference", "mooncake", "lmcache")


def excerpt_tokenizer(where: Path) -> Path:
    """A byte-level BPE (8,192 entries) trained on the prompts of the bundled excerpt,
    saved as tokenizer.json in `where`: a stand-in for a model's tokenizer that the
    repository cannot ship. Training is deterministic (the same file each run)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    texts = [json.loads(line)["input"] for kind in AGENT_KINDS
             for f in sorted((AGENT_DIR / kind).glob("*.jsonl")) for line in f.open()]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=8192, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    path = where / "tokenizer.json"
    tok.save(str(path))
    return path


def paper_regimes(t) -> list[tuple[str, list[int]]]:
    return [(regime, [to_blocks(f"{g}GiB", QWEN3_CODER_30B, t.block_tokens) for g in sizes])
            for regime, sizes in REGIME_GIB]


def contexts_regime(t) -> list[tuple[str, list[int]]]:
    """Room for 1, 2 and 4 of the trace's largest prompts (below its footprint)."""
    return [("contexts", [k * t.max_request_blocks for k in CONTEXTS])]


def overlaid(t, stagger_s: float = OVERLAY_STAGGER_S):
    """The same sessions started together, the i-th (by first arrival) at i * stagger_s,
    each keeping its own gaps between turns: the recorded runs were one after another."""
    first: dict[int, float] = {}
    for s, a in zip(t.session.tolist(), t.arrival_s.tolist()):
        first.setdefault(s, a)
    start = {s: i * stagger_s for i, s in enumerate(sorted(first, key=first.get))}
    arrival = np.array([a - first[s] + start[s] for s, a in zip(t.session.tolist(), t.arrival_s.tolist())])
    order = np.argsort(arrival, kind="stable")
    return Trace.from_requests([t.request_blocks(r) for r in order], arrival[order], t.session[order],
                               t.block_tokens, input_tokens=t.input_tokens[order],
                               output_tokens=t.output_tokens[order], name=f"{t.name}-overlaid", source="real")


def gap_to_next_turn(trace) -> np.ndarray:
    """float64[R]: as a tool wait (Trace.tool_wait_s: the wait before each request), the
    whole gap from the previous turn of its session to it (0 for a session's first)."""
    out = np.zeros(trace.n_requests)
    a, b = next_in_session(trace)
    out[b] = trace.arrival_s[b] - trace.arrival_s[a]
    return out


def traces(args):
    """(label, trace, sampling rate, hints, [(regime, capacities in blocks)]) per trace."""
    if "freeinference" in args.traces:
        t = generate("freeinference", scale=1.0, seed=args.seed)
        yield "freeinference", t, args.rate, HINTS, paper_regimes(t)
        # a new Trace, not an assignment: the replay views cached on `t` would not see it
        t = dataclasses.replace(t, tool_wait_s=gap_to_next_turn(t))
        yield "freeinference + tool waits", t, args.rate, HINTS[2:] + (TOOL_WAIT_HINT,), paper_regimes(t)
    if "mooncake" in args.traces:
        m = load_trace(bundled_path("mooncake_conversation"))
        m = dataclasses.replace(m, session=infer_links(m)[1])
        yield "mooncake (inferred sessions)", m, 1.0, HINTS, paper_regimes(m)
    if "lmcache" in args.traces:
        with tempfile.TemporaryDirectory() as tmp:
            tok = excerpt_tokenizer(Path(tmp))
            for kind in AGENT_KINDS:
                t = load_trace(AGENT_DIR / kind, tokenizer=tok)
                hbm = to_blocks("24GiB", QWEN3_CODER_30B, t.block_tokens)
                unique = int(t.blocks.max()) + 1
                args.notes.append(f"lmcache {kind}: {t.n_requests} requests in {t.meta['sessions']} sessions, "
                                  f"{int(t.input_tokens.sum()):,} prompt tokens, {unique:,} unique blocks "
                                  f"({100 * unique / hbm:.1f}% of 24 GiB = {hbm:,} blocks)")
                yield f"lmcache {kind}", t, 1.0, HINTS, contexts_regime(t)
                yield f"lmcache {kind}, sessions overlaid", overlaid(t), 1.0, HINTS, contexts_regime(t)


def _ttft_ms(results) -> float:
    return 1e3 * float(np.mean([r.ttft_mean_s for r in results]))


def rows(args) -> list[str]:
    out = ["| trace | regime | capacities (blocks) | LRU | Belady | policy | hit ratio | gap recovered | "
           "TTFT ms, HBM alone (LRU: hint) | TTFT ms, over 1 TiB DRAM (LRU: hint) |",
           "|---|---|---|---:|---:|---|---:|---:|---:|---:|"]
    for label, t, rate, hints, regimes in traces(args):
        for regime, caps in regimes:
            kw = dict(mode=args.mode, hardware="h100_sxm")
            if rate < 1:
                kw.update(sample_rate=rate, sample_by="depth", sample_seed=args.seed)
            lru_r = simulate(t, "lru", caps, **kw)
            lru = [r.hit_ratio for r in lru_r]
            lru_ms = _ttft_ms(lru_r)
            dram = None
            if regime == "HBM":
                dram = [{"name": "dram", "capacity": to_blocks("1TiB", QWEN3_CODER_30B, t.block_tokens),
                         "policy": "lru", "write": "on_evict", "link": "host"}]
                lru_dram = _ttft_ms(simulate(t, "lru", caps, tiers=dram, **kw))
            # hit ratios, not hits: a sampled replay's counts are estimates at each capacity's rate
            opt = [r.hit_ratio for r in simulate(t, "belady", caps, **kw)]
            k = len(caps)
            first = True
            for name, policy, params in hints:
                res = simulate(t, policy, caps, params=params, **kw)
                got = [r.hit_ratio for r in res]
                ms = _ttft_ms(res)
                tiered = (f"{lru_dram:.1f}: {_ttft_ms(simulate(t, policy, caps, params=params, tiers=dram, **kw)):.1f}"
                          if dram else "-")
                gap = sum(opt) - sum(lru)
                share = (sum(got) - sum(lru)) / gap if gap > 0 else float("nan")
                head = (f"| {label} | {regime} | {', '.join(f'{c:,}' for c in caps)} | {sum(lru) / k:.4f} | "
                        f"{sum(opt) / k:.4f} |") if first else "| | | | | |"
                out.append(f"{head} {name} | {sum(got) / k:.4f} | {share:+.1%} | "
                           f"{lru_ms:.1f}: {ms:.1f} | {tiered} |")
                first = False
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.agents", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=0.01, help="depth sampling rate of the generated week")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mode", default="request", choices=("request", "block"))
    ap.add_argument("--traces", nargs="+", default=list(TRACES), choices=TRACES)
    args = ap.parse_args(argv)
    args.notes = []
    cmd = " ".join(["python -m benchmarks.agents"] + (argv if argv is not None else sys.argv[1:]))
    print(f"`{cmd}` ({platform.node()}, Python {platform.python_version()}); mode={args.mode}, hits=block, "
          f"order=tail_first; hit ratios are means over the regime's capacities\n")
    print("\n".join(rows(args)))
    if args.notes:
        print("\n" + "\n".join(f"- {n}" for n in args.notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
