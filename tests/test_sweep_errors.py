"""Bad overrides fail before any work (no Ray, no MLflow store) with a message that names
the bad value and lists the valid choices."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

CASES = [
    # (overrides, words the message must contain)
    (["policy=bogus"], ["bogus", "lru", "fifo", "belady"]),
    (["policy=[lru,nosuch]"], ["nosuch", "lru", "belady"]),
    (["trace=bogus"], ["bogus", "mooncake_conversation", "freeinference"]),
    (["cost=[uniform,nope]"], ["nope", "linear", "qwen3_coder_30b"]),
    (["capacity=huge"], ["huge", "paper65", "paper4"]),
    (["capacity=custom", "capacity.sizes=[abc]"], ["abc", "GiB", "blocks"]),
    (["capacity=custom", "capacity.sizes=[24GiB,0]"], ["0", "positive"]),
    (["capacity=custom"], ["capacity.sizes"]),
    (["trace=file"], ["trace.path"]),
    (["trace=file", "trace.path=/no/such/trace.jsonl"], ["/no/such/trace.jsonl", "does not exist"]),
    (["sim.mode=fast"], ["fast", "request", "block"]),
    (["sim.order=sideways"], ["sideways", "tail_first", "forward"]),
    (["sim.mode=block", "sim.order=tail_first"], ["sim.order", "mode=request"]),
    (["tracking=server"], ["tracking.uri"]),
]


@pytest.mark.parametrize("overrides,words", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_override_fails_early(tmp_path, overrides, words):
    proc = subprocess.run([sys.executable, "-m", "sweep", "trace=mooncake_conversation", *overrides,
                           "cluster.num_cpus=1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for w in words:
        assert w in out, (w, out[-3000:])
    assert "Traceback" not in out, out[-3000:]
    assert not (tmp_path / "mlflow.db").exists()  # nothing was written
    assert not (tmp_path / "outputs").exists()


def test_help_describes_the_tool_and_groups(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sweep", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    for w in ("prefix-cache", "== Configuration groups ==", "policy: agent_end, agent_next, all,", "capacity: custom",
              "trace: chutes", "cluster: local, ray", "tracking: local, server", "sim.mode"):
        assert w in proc.stdout, w
    # the summary comes before the long config dump
    assert proc.stdout.index("python -m sweep.sync") < proc.stdout.index("== Config ==")
