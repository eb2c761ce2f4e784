"""Sessions inferred from prefix chains (sim_core/traces/sessions.py) against known sessions.

    python -m benchmarks.sessions [--scale 0.05] [--seeds 0,1,2] [--max-fanout 3] [--file trace.jsonl]

Prints markdown tables:

1. scores on traces whose sessions are known: the generated FreeInference and Chutes
   traces (sim_core.traces.synth, true session ids), the FreeInference one again with each
   partial last block re-hashed (as an engine that hashes partial blocks logs it:
   sim_core.traces.sessions.rehash_partial_tails), and any `--file` (a trace file with session
   ids, e.g. a Qwen Bailian JSONL, whose parent links give them). Pair precision and
   recall are over consecutive-turn pairs; ARI, homogeneity and completeness over the
   whole partition (sim_core.traces.sessions.pair_scores, partition_scores).
2. the bundled Mooncake conversation trace, which has no session ids: what is inferred.
3. the same scores over max_fanout (the shared-prompt guard).
"""
from __future__ import annotations

import argparse
import platform
import sys

import numpy as np

from sim_core.traces.loaders import bundled_path, load_trace
from sim_core.traces.sessions import (DEFAULT_MAX_FANOUT, infer_links, pair_scores, partition_scores,
                               rehash_partial_tails)
from sim_core.traces.synth import DEFAULT_SCALE, generate

FANOUTS = (1, 2, 3, 4, 8, 16)


def _known(args) -> list[tuple[str, object, str]]:
    """(label, trace, partial_last) for every trace with true session ids."""
    out = []
    for seed in args.seeds:
        t = generate("freeinference", scale=args.scale, seed=seed)
        out.append((f"freeinference synthetic, seed {seed}", t, "auto"))
    t = generate("freeinference", scale=args.scale, seed=args.seeds[0])
    r = rehash_partial_tails(t)
    for pl in ("auto", "never"):
        out.append((f"freeinference synthetic, seed {args.seeds[0]}, partial tails re-hashed", r, pl))
    out.append((f"chutes synthetic, seed {args.seeds[0]}", generate("chutes", scale=args.scale, seed=args.seeds[0]),
                "auto"))
    for path in args.file:
        t = load_trace(path)
        if not (t.session >= 0).any():
            print(f"{path}: no session ids, left out of the scores", file=sys.stderr)
            continue
        out.append((f"{t.name} ({t.meta.get('format', 'file')})", t, "auto"))
    return out


def _sessions(labels: np.ndarray) -> tuple[int, int]:
    """(sessions, multi-turn sessions); a label < 0 is a session of its own."""
    known = labels[labels >= 0]
    _, counts = np.unique(known, return_counts=True)
    return len(counts) + int((labels < 0).sum()), int((counts >= 2).sum())


def scores_table(known, fanout: int) -> list[str]:
    rows = ["| trace | partial_last | requests | true sessions (multi-turn) | inferred (multi-turn) | "
            "pair precision | pair recall | ARI | homogeneity | completeness |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, t, pl in known:
        _, inferred = infer_links(t, partial_last=pl, max_fanout=fanout)
        ps, pa = pair_scores(t.session, inferred), partition_scores(t.session, inferred)
        ts, tm = _sessions(t.session)
        is_, im = _sessions(inferred)
        rows.append(f"| {label} | {pl} | {t.n_requests:,} | {ts:,} ({tm:,}) | {is_:,} ({im:,}) | "
                    f"{ps['precision']:.4f} | {ps['recall']:.4f} | {pa['ari']:.4f} | {pa['homogeneity']:.4f} | "
                    f"{pa['completeness']:.4f} |")
    return rows


def mooncake_table(fanout: int) -> list[str]:
    t = load_trace(bundled_path("mooncake_conversation"))
    rows = ["| partial_last | requests | linked to an earlier request | sessions | multi-turn sessions | "
            "requests in multi-turn sessions | largest session (requests) | match covers (median share of the "
            "request's blocks) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lengths = t.request_lengths
    for pl in ("auto", "never"):
        parent, sess = infer_links(t, partial_last=pl, max_fanout=fanout)
        linked = parent >= 0
        per = np.bincount(sess)
        multi = per >= 2
        cover = (np.minimum(lengths[parent[linked]], lengths[linked]) / lengths[linked]) if linked.any() else [np.nan]
        rows.append(f"| {pl} | {t.n_requests:,} | {int(linked.sum()):,} ({linked.mean():.1%}) | {len(per):,} | "
                    f"{int(multi.sum()):,} | {(multi[sess]).mean():.1%} | {int(per.max()):,} | "
                    f"{float(np.median(cover)):.2f} |")
    return rows


def fanout_table(known) -> list[str]:
    rows = ["| trace | partial_last | " + " | ".join(f"max_fanout={f}" for f in FANOUTS) + " |",
            "|---|---|" + "---:|" * len(FANOUTS)]
    for label, t, pl in known:
        cells = []
        for f in FANOUTS:
            ps = pair_scores(t.session, infer_links(t, partial_last=pl, max_fanout=f)[1])
            cells.append(f"{ps['precision']:.4f} / {ps['recall']:.4f}")
        rows.append(f"| {label} | {pl} | " + " | ".join(cells) + " |")
    moon = load_trace(bundled_path("mooncake_conversation"))
    linked = [int((infer_links(moon, max_fanout=f)[0] >= 0).sum()) for f in FANOUTS]
    rows.append("| mooncake_conversation (no truth: requests linked) | auto | "
                + " | ".join(f"{n:,}" for n in linked) + " |")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sessions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.05,
                    help="generated traces' size, a fraction of the full week (0.05: about 400 multi-turn "
                         f"sessions; the generator's default is {DEFAULT_SCALE:g})")
    ap.add_argument("--seeds", default="0,1,2", help="generator seeds of the FreeInference rows")
    ap.add_argument("--max-fanout", type=int, default=DEFAULT_MAX_FANOUT,
                    help=f"the shared-prompt guard of tables 1 and 2 ({DEFAULT_MAX_FANOUT})")
    ap.add_argument("--file", action="append", default=[],
                    help="a trace file with session ids to score as well (repeatable; format sniffed)")
    args = ap.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",")]
    known = _known(args)
    cmd = " ".join(["python -m benchmarks.sessions"] + (argv if argv is not None else sys.argv[1:]))
    print(f"`{cmd}` ({platform.node()}, Python {platform.python_version()}); generated traces at scale "
          f"{args.scale:g}; max_fanout={args.max_fanout}\n")
    print("### Against known sessions\n")
    print("\n".join(scores_table(known, args.max_fanout)))
    print("\n### Mooncake conversation (bundled, no session ids)\n")
    print("\n".join(mooncake_table(args.max_fanout)))
    print("\n### Pair precision / recall over max_fanout\n")
    print("\n".join(fanout_table(known)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
