"""Analyses of a trace and of sweep results (`python -m analysis ...`), and the deployment planner."""
from .planner import Plan, plan

__all__ = ["Plan", "plan"]
