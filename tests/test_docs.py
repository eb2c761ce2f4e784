"""The README documents what the code has: every result field, every sweep switch."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from sim_core import Result

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
CONF = Path(__file__).resolve().parent.parent / "conf"


def test_every_result_field_is_in_the_readme_table():
    for f in dataclasses.fields(Result):
        assert f"| `{f.name}` |" in README, f.name


def test_every_sweep_and_tracking_key_is_documented():
    sweep = yaml.safe_load((CONF / "config.yaml").read_text())["sweep"]
    for k in sweep:
        assert f"`sweep.{k}`" in README, k
    for k in yaml.safe_load((CONF / "tracking" / "local.yaml").read_text()):
        assert f"tracking.{k}" in README, k
