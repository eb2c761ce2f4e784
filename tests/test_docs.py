"""The documentation documents what the code has: every result field, every sweep switch;
the README stays short and free of commit hashes; every relative link resolves."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from sim_core.result import field_docs

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# Pages the README and docs link to that are being written elsewhere: remove a name here
# once its page exists (the lead writes docs/tiers.md; docs/engines.md follows).
PENDING: set[str] = set()  # pages linked before they are written


def test_every_result_field_is_in_the_concepts_table():
    text = (DOCS / "concepts.md").read_text()
    for name, doc in field_docs().items():
        assert f"| `{name}` |" in text, name
        assert f"| `{name}` | {doc} |" in text, f"{name}: the row differs from sim_core.result.field_docs()"


def test_every_sim_sweep_and_tracking_key_is_documented():
    text = (DOCS / "configuration.md").read_text()
    cfg = yaml.safe_load((CONF / "config.yaml").read_text())
    for section in ("sim", "sweep"):
        for k in cfg[section]:
            assert f"`{section}.{k}`" in text, k
    for k in yaml.safe_load((CONF / "tracking" / "local.yaml").read_text()):
        assert f"tracking.{k}" in text, k


def _hashes(text: str) -> list[str]:
    # 7-40 hex digits with at least one digit and one letter: a commit hash (or a run id)
    return [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text)
            if re.search(r"[0-9]", w) and re.search(r"[a-f]", w)]


def test_readme_is_short_and_names_no_commit():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert _hashes(text) == []


def test_hash_pattern():
    assert _hashes("measured at commit a51aad9 and 9157397f") == ["a51aad9", "9157397f"]
    assert _hashes("1234567 deadbeef 0.00125 policy=lru") == []


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of a page (headings inside fenced code are not headings)."""
    out, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#+ (.*)", line)):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_every_relative_link_points_to_a_file_and_heading():
    pages = [README, ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
    missing = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path = (page.parent / target.split("#")[0]).resolve() if not target.startswith("#") else page
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
            if not path.exists():
                if rel not in PENDING:
                    missing.append(f"{page.relative_to(ROOT)} -> {target}")
            elif "#" in target and path.suffix == ".md" and target.split("#", 1)[1] not in _anchors(path):
                missing.append(f"{page.relative_to(ROOT)} -> {target} (no such heading)")
    assert missing == []


def test_the_schema_types_every_sim_and_sweep_key_with_the_yaml_default():
    """sweep/schema.py and conf/config.yaml name the same keys with the same defaults (the
    yaml is what users read; the schema is what Hydra checks)."""
    import dataclasses

    from sweep.schema import SimSchema, SweepSchema

    cfg = yaml.safe_load((CONF / "config.yaml").read_text())
    for section, schema in (("sim", SimSchema), ("sweep", SweepSchema)):
        typed = {f.name: getattr(schema(), f.name) for f in dataclasses.fields(schema)}
        assert set(typed) == set(cfg[section]), section
        for k, v in cfg[section].items():
            got = typed[k]
            assert (got.value if hasattr(got, "value") else got) == v, (section, k)
