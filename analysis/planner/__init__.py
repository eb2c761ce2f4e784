"""The deployment planner: the cheapest deployment that meets an SLO on your traffic
(`python -m analysis plan`, docs/planning.md).

space.py   the candidates (GPU part, tensor parallelism, replicas, router, policy) and prices
slo.py     the SLO's bounds
bound.py   the prefill bound: candidates that cannot meet a TTFT bound, without a replay
search.py  bisection over replicas, dominance, the monotonicity check and its fallback
evaluate.py  replaying candidates: identity, the in-process evaluator, the driving loop
plan.py    `plan(...)`: the searches put together, and the answer (`Plan`)
runner.py  the CLI's evaluator: the sweep's Ray runner and journal
cli.py, report.py  `python -m analysis plan`: the printed answer, report files, MLflow
"""
from .plan import Plan, plan

__all__ = ["Plan", "plan"]
