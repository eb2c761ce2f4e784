"""Data structures the policies are built from: flat numpy arrays and njit functions.

A policy module imports from here and from `sim_core.policies.api`, never from another
policy: a structure two policies share lives here, once.

  dlist     intrusive doubly-linked list over block ids (LRU/FIFO order)
  mlist     several such lists packed in one pair of arrays (ARC, LIRS, S3-FIFO)
  fbuckets  frequency buckets with O(1) increment (LFU, LeCaR)
  heap      binary max-heaps: with positions (Belady), scored with lazy deletion (3L-Cache)
  kinetic   kinetic tournament of class heads (BeladyCompute)
  gbdt      LightGBM forests flattened for njit prediction (LRB, 3L-Cache)
  packed    segment layout of states packed into a few flat arrays
  learned   what LRB and 3L-Cache share inside their packed states
  log2hist  counts by log2 bucket and their quantile (3L-Cache)
  ring      rings in packed states: past distances (LRB, 3L-Cache), FIFO rings of ids (3L-Cache)
  pool      the RandomCompute sampling pool (RandomCompute and its variants)
  catlists  per-category LRU lists with a per-request "exhausted" mark (Workload-aware)
  rng       the seeded random number generators
"""
