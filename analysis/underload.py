"""One answer per question when `advise` also serves the trace (fleet=...).

The cache-replay steps (sec. 5.4) measure one cache of each capacity with no queue; the
serving step measures the deployment asked about: replicas of that capacity each, under
load. Where both name a policy at the same size they can disagree (S3-FIFO ahead in one
cache of 4,000 blocks, LRU ahead on 8 replicas of 4,000 blocks at 4x load), and an
advice that says both is no advice. So with a fleet, the quick-demotion step is decided
where the serving step deploys (its route and size, at each load), and the one-cache
numbers stay in its reasons as what they are.
"""
from __future__ import annotations

from sweep.report.slo import seconds

QUICK = "s3fifo"
BASE = "lru"


def quick_demotion(rec: dict, under: dict) -> dict:
    """The quick-demotion step decided under load: `under` is the serving section's
    `under_load` (load -> analysis.serving.compared, or None where nothing met the SLO)."""
    parts, verdicts = [], []
    for load, u in under.items():
        if u is None or QUICK not in u["policies"] or BASE not in u["policies"]:
            continue
        q, b = u["policies"][QUICK], u["policies"][BASE]
        where = u["where"] + (f" behind {u['route']}" if u["route"] else "")
        verdicts.append("enable" if u["policy"] == QUICK else "keep LRU" if u["policy"] == BASE
                        else f"neither: {u['policy']}")
        parts.append(f"at {load}x load, {where} (step 5's answer): "
                     + ("enable S3-FIFO" if u["policy"] == QUICK else f"evict with {u['policy']}, not S3-FIFO")
                     + f"; S3-FIFO there: p99 TTFT {seconds(q['ttft_p99_s'])}, reuse {q['reuse_ratio']:.4f}; "
                       f"LRU: {seconds(b['ttft_p99_s'])}, {b['reuse_ratio']:.4f}")
    if not parts:
        return rec
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "depends on the load"
    return {**rec, "verdict": f"{verdict} (under load)",
            "action": "Under load, where the serving step deploys: " + "; ".join(parts) + ".",
            "because": (f"{rec['because']} Those one-cache numbers (no queue, one cache of each size) are not the "
                        "deployment; the serving replays are, so they decide."),
            "numbers": {**rec.get("numbers", {}), "under_load": under, "one_cache_verdict": rec["verdict"]}}


def reconcile(recs: list[dict], section: dict) -> list[dict]:
    """The recommendations with the quick-demotion step decided under load."""
    under = section.get("under_load") or {}
    return [quick_demotion(r, under) if r["topic"] == "quick_demotion" and under else r for r in recs]
