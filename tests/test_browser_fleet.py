"""A fleet sweep as a newcomer sees it in a real browser (Debian's `chromium` driven by
Playwright): its report.html in MLflow's artifact pane and its MLflow serving views.

- the report opens with the answer (per load, the cheapest fleet meeting the SLO), and its
  figures draw every configuration in a colour of its own, each of them and the SLO's
  bound present among the pixels the browser shows;
- each serving view (one per load) draws every run of that load, visible, each in its own
  colour and named, with TTFT p99 on a log axis over a log capacity axis.

A small fleet sweep (300 requests, 2 policies x 2 loads x 4 routes x 3 capacities) in a
module fixture; skipped without Chromium or Playwright unless KVSWEEP_REQUIRE_BROWSER=1.
The MLflow server is started here and stopped by its own process id.
"""
from __future__ import annotations

import json
import re

import pytest

from tests.helpers import child_runs, run_module
from tests.stack import mlflow_ui
from tests.test_browser import CHROMIUM, WINDOW, _require_browser

LOADS = [1, 4]
ARGS = ["trace=mooncake_conversation", "trace.max_requests=300", "policy=[lru,s3fifo]", "capacity=custom",
        "capacity.sizes=[300,1000,4000]", "fleet=dynamo", "fleet.replicas=[1,2]", "fleet.router=[round_robin,kv_router]",
        f"fleet.arrival_speedup=[{','.join(map(str, LOADS))}]", "fleet.slo_ttft=75s", "cluster.num_cpus=2"]


@pytest.fixture(scope="module")
def fleet_ui(tmp_path_factory):
    _require_browser()
    d = tmp_path_factory.mktemp("browser_fleet")
    db = d / "mlflow.db"
    p = run_module(d, *ARGS, f"tracking.uri=sqlite:///{db}")
    assert p.returncode == 0, p.stderr[-3000:]
    with mlflow_ui(db, d) as base:
        views = {float(x): base + "/#" + u.split("/#", 1)[1]
                 for x, u in re.findall(r"^  serve, ([\d.]+)x load: (http://\S+)$", p.stdout, re.M)}
        parent = re.search(r"sweep run ([0-9a-f]{32})", p.stdout).group(1)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield {"base": base, "views": views, "parent": parent, "db": db, "browser": browser}
            finally:
                browser.close()


def _page(ui, url: str):
    page = ui["browser"].new_page(viewport=WINDOW)
    page.goto(url)
    return page


#: In the browser: per colour, how many pixels of the decoded figure have it exactly.
COUNT_PIXELS = """(img, colours) => {
  const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data, want = {}, out = {};
  for (const k of colours) { want[k.toLowerCase()] = 0; }
  for (let i = 0; i < d.length; i += 4) {
    const h = '#' + [d[i], d[i + 1], d[i + 2]].map(v => v.toString(16).padStart(2, '0')).join('');
    if (h in want) want[h] += 1;
  }
  return want;
}"""


def test_the_report_leads_with_the_answer_and_draws_every_line_apart(fleet_ui):
    ui = fleet_ui
    run = child_runs(ui["db"])[0]
    page = _page(ui, f"{ui['base']}/#/experiments/{run.info.experiment_id}/runs/{ui['parent']}"
                     "/artifacts/report.html?workflowType=machine_learning")
    frame = page.locator("iframe").first
    frame.wait_for(timeout=60000)
    doc = frame.content_frame
    doc.locator("#answer").wait_for(timeout=60000)
    sections = doc.locator("section").evaluate_all("ss => ss.map(s => s.id)")
    assert sections[:3] == ["answer", "serving", "routing"], sections
    answers = doc.locator("li.answer").evaluate_all("ls => ls.map(l => [l.dataset.load, l.innerText])")
    assert [a for a, _ in answers] == [f"{x:g}" for x in LOADS]
    assert all("p99 TTFT" in t or "nothing swept meets" in t for _, t in answers), answers
    imgs = doc.locator("img.lines")
    assert imgs.count() == 2  # the serving figure and the routing figure
    for i in range(imgs.count()):
        img = imgs.nth(i)
        img.evaluate("i => i.decode()")
        lines = json.loads(img.get_attribute("data-lines"))
        assert len(lines) == 2 * 4 and len(set(lines.values())) == len(lines)  # a colour per configuration
        slo = img.get_attribute("data-slo-colour")
        counts = img.evaluate(COUNT_PIXELS, list(lines.values()) + [slo])
        assert all(counts[c] >= 20 for c in lines.values()), (i, lines, counts)  # every line drawn, visible
        assert counts[slo] >= 100, counts  # the SLO's bound, across the panels


def test_each_serving_view_draws_every_run_apart_on_log_axes(fleet_ui):
    ui = fleet_ui
    assert sorted(ui["views"]) == LOADS
    runs = child_runs(ui["db"])
    for load, url in ui["views"].items():
        names = sorted(r.info.run_name for r in runs if r.data.tags["load"] == f"{load:g}")
        assert len(names) == 2 * 4
        page = _page(ui, url)
        chart = page.locator(".js-plotly-plot").first
        chart.locator("g.trace.scatter").nth(len(names) - 1).wait_for(timeout=60000)
        drawn = chart.evaluate("e => e._fullData.filter(t => (t.mode || '').includes('markers')).map(t => "
                               "[t.name, t.visible === true && t.opacity > 0, (t.x || []).length, t.line.color])")
        assert sorted(n for n, *_ in drawn) == names, (load, drawn)
        assert all(v and k == 3 for _, v, k, _ in drawn), drawn
        assert len({c for *_, c in drawn}) == len(names), drawn  # every run its own colour
        assert chart.evaluate("e => e._fullLayout.yaxis.type") == "log"  # TTFT p99: the first chart
        assert chart.evaluate("e => e._fullLayout.xaxis.type") == "log"
        legend = page.evaluate("() => [...document.querySelectorAll('span')].map(s => s.textContent)"
                               ".filter(t => t.endsWith(' (curve/ttft_p99_s)'))")  # MLflow's legend box scrolls
        assert sorted(t.rsplit(" (", 1)[0] for t in legend) == names
        page.close()
