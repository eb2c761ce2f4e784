"""Gradient-boosted regression trees for the learned policies (LRB, 3L-Cache).

Training runs in Python with LightGBM (the booster libCacheSim links for both
policies); the fitted ensemble is exported with `Booster.dump_model()` into flat arrays
that njit code evaluates during replay:

Packed into two arrays (few fields keep numba's compile time low):

    feat[n]   split feature of internal node n
    thr[n]    split threshold (go left when x[feat] <= thr)
    miss[n]   LightGBM missing-value handling of the split (see _MISS_*)
    kid[2n], kid[2n+1]  left and right child; a negative child ~i is leaf i
    leaf[i]   leaf output (shrinkage and the boost-from-average bias already folded in)
    root[t]   root of tree t (node id, or ~leaf for a one-leaf tree)

Tree t owns node and leaf ids t*M .. t*M + M - 1 (M = 2 * num_leaves - 1); `n_trees[0]`
trees are live. The arrays have a fixed size (max_trees x M) so a retrain rewrites them
in place and the compiled replay keeps running on the same state. The prediction is the
sum of the trees' leaf values in tree order, exactly what LightGBM computes, so the njit
evaluator reproduces `Booster.predict` bit for bit (tests check it). Features must not
be NaN on the fast path (our policies never produce NaN); LightGBM's missing-value rules
are honoured exactly on the `special` path, taken when any split carries such a rule.

This module defines no policy (no SPEC); it is shared by lrb.py and threelcache.py.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jit import njit

# how a split treats missing values (LightGBM missing_type + default_left)
_MISS_NONE = 0  # NaN is read as 0.0, then compared
_MISS_ZERO_LEFT, _MISS_ZERO_RIGHT = 1, 2  # |x| <= 1e-35 (or NaN) takes the default side
_MISS_NAN_LEFT, _MISS_NAN_RIGHT = 3, 4  # NaN takes the default side
_K_ZERO = 1e-35  # LightGBM's kZeroThreshold


class Forest(NamedTuple):
    mi: np.ndarray  # int32: feat[T*M] | kid[2*T*M] | root[T] | miss[T*M]
    mf: np.ndarray  # float64: thr[T*M] | leaf[T*M]
    fm: np.ndarray  # int64[4]: max_trees T, max nodes per tree M, live trees, special


# views into the packed arrays (Python side)
def _views(f: Forest):
    t, m = int(f.fm[0]), int(f.fm[1])
    s = t * m
    return (f.mi[:s], f.mi[s:3 * s], f.mi[3 * s:3 * s + t], f.mi[3 * s + t:4 * s + t],
            f.mf[:s], f.mf[s:2 * s])


def new_forest(max_trees: int, num_leaves: int) -> Forest:
    t = max(1, int(max_trees))
    m = max(1, 2 * int(num_leaves) - 1)
    return Forest(np.full(4 * t * m + t, -1, np.int32), np.zeros(2 * t * m, np.float64),
                  np.array([t, m, 0, 0], np.int64))


@njit
def _go_left_special(v, t, m):
    if m == _MISS_NONE:
        if np.isnan(v):
            v = 0.0
        return v <= t
    if m <= _MISS_ZERO_RIGHT:
        if np.isnan(v) or (-_K_ZERO <= v <= _K_ZERO):
            return m == _MISS_ZERO_LEFT
        return v <= t
    if np.isnan(v):
        return m == _MISS_NAN_LEFT
    return v <= t


@njit
def predict_one(mi, mf, fm, x):
    """Sum of the live trees' outputs for one feature row x (float64[n_features]).

    The common path is branch-free per level (child = kid[2n + (x > thr)]); splits with
    a missing-value rule take LightGBM's exact semantics on the `special` path.
    """
    t_max = fm[0]
    size = t_max * fm[1]
    kid0 = size  # kid[i] = mi[kid0 + i]
    root0 = 3 * size
    miss0 = 3 * size + t_max
    leaf0 = size  # leaf[i] = mf[leaf0 + i]
    s = 0.0
    if fm[3] == 0:
        for t in range(fm[2]):
            n = mi[root0 + t]
            while n >= 0:
                n = mi[kid0 + 2 * n + (1 if x[mi[n]] > mf[n] else 0)]
            s += mf[leaf0 + ~n]
        return s
    for t in range(fm[2]):
        n = mi[root0 + t]
        while n >= 0:
            go_left = _go_left_special(x[mi[n]], mf[n], mi[miss0 + n])
            n = mi[kid0 + 2 * n + (0 if go_left else 1)]
        s += mf[leaf0 + ~n]
    return s


@njit
def predict_rows(mi, mf, fm, X):
    out = np.empty(X.shape[0], np.float64)
    for i in range(X.shape[0]):
        out[i] = predict_one(mi, mf, fm, X[i])
    return out


def forest_predict(f: Forest, X: np.ndarray) -> np.ndarray:
    """Evaluate the exported forest (njit) on rows X; for tests and diagnostics."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    return predict_rows(f.mi, f.mf, f.fm, X)


def lightgbm_params(num_iterations: int, num_leaves: int, learning_rate: float, seed: int,
                    **extra) -> dict:
    """libCacheSim's training parameters (gbdt regression, row/feature bagging 0.8 every 5
    iterations) made deterministic: one thread, fixed seeds."""
    p = dict(boosting="gbdt", objective="regression", num_leaves=int(num_leaves),
             learning_rate=float(learning_rate), feature_fraction=0.8, bagging_freq=5,
             bagging_fraction=0.8, num_threads=1, deterministic=True, force_row_wise=True,
             seed=int(seed), verbosity=-1)
    p.update(extra)
    p["_rounds"] = int(num_iterations)
    return p


def fit(X: np.ndarray, y: np.ndarray, params: dict):
    """Train a LightGBM booster on dense rows X (zeros stand for LightGBM's absent CSR
    entries, as in libCacheSim) and labels y."""
    import lightgbm as lgb

    p = dict(params)
    rounds = p.pop("_rounds")
    ds = lgb.Dataset(np.ascontiguousarray(X, dtype=np.float64), label=np.asarray(y, np.float64),
                     params={"verbosity": -1}, free_raw_data=True)
    return lgb.train(p, ds, num_boost_round=rounds)


def export(booster, f: Forest) -> int:
    """Write the booster's trees into f in place; returns the number of trees."""
    trees = booster.dump_model()["tree_info"]
    t_max, m = int(f.fm[0]), int(f.fm[1])
    if len(trees) > t_max:
        raise ValueError(f"forest holds {t_max} trees, booster has {len(trees)}")
    feat, kid, root, miss, thr, leaf = _views(f)
    f.mi[:] = -1
    miss[:] = 0
    f.mf[:] = 0.0
    special = 0
    for t, info in enumerate(trees):
        counters = [t * m, t * m]  # next internal node id, next leaf id of tree t

        def put(node) -> int:
            nonlocal special
            if "split_feature" not in node:
                i = counters[1]
                counters[1] += 1
                if i >= (t + 1) * m:
                    raise ValueError(f"tree {t} has more than {m} leaves")
                leaf[i] = float(node["leaf_value"])
                return ~i
            if node.get("decision_type", "<=") != "<=":
                raise ValueError(f"unsupported split {node.get('decision_type')!r} (categorical?)")
            n = counters[0]
            counters[0] += 1
            if n >= (t + 1) * m:
                raise ValueError(f"tree {t} has more than {m} nodes")
            feat[n] = int(node["split_feature"])
            thr[n] = float(node["threshold"])
            mt = node.get("missing_type", "None")
            dl = bool(node.get("default_left", True))
            miss[n] = (_MISS_NONE if mt == "None" else
                       (_MISS_ZERO_LEFT if dl else _MISS_ZERO_RIGHT) if mt == "Zero" else
                       (_MISS_NAN_LEFT if dl else _MISS_NAN_RIGHT))
            special = special or int(miss[n] != _MISS_NONE)
            kid[2 * n] = put(node["left_child"])
            kid[2 * n + 1] = put(node["right_child"])
            return n

        root[t] = put(info["tree_structure"])
    f.fm[3] = special
    f.fm[2] = len(trees)
    return len(trees)
