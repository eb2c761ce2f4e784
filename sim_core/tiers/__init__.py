"""Tiers below HBM: the hierarchy replay, tier specifications, the engines' tier rules, per-request tier state."""
