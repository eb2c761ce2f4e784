"""The trace a sweep replays from the `trace` config group: sim_core.traces.config, re-exported
under its old name (analysis imports sim_core.traces.config directly)."""
from __future__ import annotations

from sim_core.traces.config import (check_trace_config, experiment_name, flatten, formats, from_payload, load,
                               payload_bytes, summarize, to_payload, week_maker, weeks)

__all__ = ["check_trace_config", "experiment_name", "flatten", "formats", "from_payload", "load",
           "payload_bytes", "summarize", "to_payload", "week_maker", "weeks"]
