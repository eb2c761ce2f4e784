"""The cache replay: the numba engine, the units of replay work, counting (accounting, warm-up, windows), simulate's checked options, and the bridge to libCacheSim that cross-checks it."""
