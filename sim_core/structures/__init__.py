"""Data structures the policies are built from: flat numpy arrays and njit functions.

A policy module imports from here and from `sim_core.policies.api`, never from another
policy: a structure two policies share lives here, once.

  dlist     intrusive doubly-linked list over block ids (LRU/FIFO order)
  mlist     several such lists packed in one pair of arrays (ARC, LIRS, S3-FIFO)
  fbuckets  frequency buckets with O(1) increment (LFU, LeCaR)
  heap      binary max-heap with positions (Belady)
  kinetic   kinetic tournament of class heads (BeladyCompute)
  gbdt      LightGBM forests flattened for njit prediction (LRB, 3L-Cache)
  pool      the RandomCompute sampling pool (RandomCompute and its variants)
  rng       the seeded random number generators
"""
