"""The trace in memory, its loaders (one per file format), its native file form and configuration, synthesis, re-blocking, sessions, sampling, summaries and schedules."""
