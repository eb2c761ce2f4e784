"""Offline knowledge: each access's next use (for Belady and its kin) and the exact compute-savings optimum (ILP)."""
