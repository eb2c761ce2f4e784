"""What a newcomer sees, in a real browser: MLflow's UI and report.html after a small flat
and a small tiered sweep (Debian's `chromium` driven by Playwright). The flat sweep is
tests/test_sweep.py's end-to-end one (tests/conftest.py e2e_sweep, run once for both),
the tiered one (write modes as an axis) is this module's.

- each view a sweep links (sweep.views) draws every curve of its cost model, visible, on
  a log capacity axis, with every run listed and the runs table showing the ranking column;
- the sweep run's Description renders its tables as a code block (not as headings and
  reflowed text) and links the views;
- report.html, in MLflow's artifact pane: no table reaches past the pane (wide ones scroll
  inside themselves), and every figure is shown large enough that its tick labels are at
  least 10 px.

Skipped when Chromium or Playwright is missing, unless KVSWEEP_REQUIRE_BROWSER=1 (.ci/run
sets it, after installing Chromium), where that is a failure. The MLflow server is started
here and stopped by its own process id.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import require
from tests.stack import free_port, wait_until
from tests.test_sweep import E2E_COSTS as COSTS, _write_mooncake

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: The smallest tick label in the report's PNGs, in image pixels: 16 pt at 100 dpi
#: (sweep.report.plots) and 15 pt at 110 dpi (sweep.report.tierplot) are both above 22 px.
TICK_PX = 22.0
#: A 1,400 px window: MLflow's artifact pane beside the run's file tree and the assistant
#: MLflow opens on the right is then about 570 px wide, the narrowest we design for.
WINDOW = {"width": 1400, "height": 1000}


def _require_browser() -> None:
    missing = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install -e '.[test]')")
    if not Path(CHROMIUM).exists():
        missing.append("Chromium (apt-get install chromium)")
    require("the browser test", missing, "KVSWEEP_REQUIRE_BROWSER")


def _sweep(d: Path, trace: Path, db: Path, *extra: str) -> subprocess.CompletedProcess:
    """A sweep of the 4, 8 and 16-block capacities into the sqlite store `db`."""
    cmd = [sys.executable, "-m", "sweep", "trace=file", f"trace.path={trace}", "trace.format=mooncake",
           f"cost=[{','.join(COSTS)}]", "capacity=custom", "capacity.sizes=[4,8,16]", "cluster.num_cpus=2",
           f"tracking.uri=sqlite:///{db}", *extra]
    p = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _views(stdout: str, base: str) -> dict[str, str]:
    """cost model -> its view's address, from the lines the sweep printed."""
    got = dict(re.findall(r"^  (\w+): (http://\S+viewStateShareKey=\S+)$", stdout, re.M))
    return {m: base + u.split("/#", 1)[1].join(["/#", ""]) for m, u in got.items()}


@pytest.fixture(scope="module")
def ui(tmp_path_factory, e2e_sweep):
    _require_browser()
    from mlflow.tracking import MlflowClient

    d = tmp_path_factory.mktemp("browser")
    trace, db = d / "tiny_mooncake.jsonl", d / "mlflow.db"
    _write_mooncake(trace)  # the end-to-end sweep's trace (its experiment: tiny_mooncake)
    flat = e2e_sweep["proc"]
    assert flat.returncode == 0, flat.stderr[-3000:]
    # a copy of its store (its runs' artifacts stay where they are), to add the tiered sweep to
    shutil.copyfile(e2e_sweep["db"], db)
    tier = _sweep(d, trace, db, "policy=[lru,fifo]", "tier=hbm_dram", "tier.dram.capacities=[0,12]",
                  "tier.dram.write=[on_evict,on_compute]", "hardware=h100_sxm")
    port = free_port()
    log = open(d / "mlflow.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              cwd=d, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        def healthy() -> bool:
            if server.poll() is not None:
                raise RuntimeError(f"the MLflow server exited ({server.returncode}): "
                                   f"{(d / 'mlflow.log').read_text()[-3000:]}")
            try:
                return urllib.request.urlopen(base + "/health", timeout=2).read() == b"OK"
            except OSError:
                return False

        # a bound for a server that never comes up: on a loaded machine (the other xdist
        # worker compiling) it has taken over 60 s to import and start
        wait_until(healthy, 240, "the MLflow server")
        client = MlflowClient(f"sqlite:///{db}")
        sweeps = {}
        for kind, proc in (("flat", flat), ("tiered", tier)):
            pid = re.search(r"sweep run ([0-9a-f]{32})", proc.stdout).group(1)
            kids = client.search_runs([client.get_run(pid).info.experiment_id],
                                      f"tags.`mlflow.parentRunId` = '{pid}'", max_results=1000)
            sweeps[kind] = {"run": client.get_run(pid), "views": _views(proc.stdout, base),
                            "curves": {m: sorted(k.info.run_name for k in kids if k.data.tags["cost_model"] == m)
                                       for m in COSTS},
                            "points": len(json.loads(client.get_run(pid).data.params["capacities_blocks"]))}
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield {"base": base, "sweeps": sweeps, "browser": browser}
            finally:
                browser.close()
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # its own session: the server and its workers
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(5)
        log.close()


def _open(ui, url: str):
    """A new page (closing the last): a newcomer's first look, with nothing remembered."""
    if ui.get("page") is not None:
        ui["page"].close()
    ui["page"] = ui["browser"].new_page(viewport=WINDOW)
    ui["page"].goto(url)
    return ui["page"]


@pytest.mark.parametrize("kind", ["flat", "tiered"])
def test_every_curve_of_a_cost_model_is_drawn_on_a_log_capacity_axis(ui, kind):
    sw = ui["sweeps"][kind]
    assert set(sw["views"]) == set(COSTS)
    for m, url in sw["views"].items():
        names = sw["curves"][m]
        page = _open(ui, url)  # as a link opens it: MLflow applies a shared view when the page loads
        chart = page.locator(".js-plotly-plot").first
        chart.locator("g.trace.scatter").nth(len(names) - 1).wait_for(timeout=60000)
        # plotly's own record of what it drew: per run, the curve (lines+markers; MLflow adds a
        # faint copy, the line before smoothing, under it)
        drawn = chart.evaluate("e => e._fullData.filter(t => (t.mode || '').includes('markers')).map(t => "
                               "[t.name, t.visible === true && t.opacity > 0, (t.x || []).length, t.line.color])")
        assert sorted(n for n, *_ in drawn) == names, (m, drawn)
        for name, visible, points, colour in drawn:
            assert visible and points == sw["points"] and re.fullmatch(r"#[0-9a-f]{6}", colour), \
                (name, visible, points, colour)
        lines = chart.locator("path.js-line").evaluate_all(
            "ps => ps.filter(p => (p.getAttribute('d') || '').length > 10 && p.getBoundingClientRect().width > 0)")
        assert len(lines) >= len(names)
        assert chart.evaluate("e => e._fullLayout.xaxis.type") == "log"
        listed = page.locator("body").inner_text()
        assert all(n in listed or n[:20] in listed for n in names)  # the run list, names maybe cut short


@pytest.mark.parametrize("kind", ["flat", "tiered"])
def test_the_runs_table_shows_the_ranking_column(ui, kind):
    page = _open(ui, ui["sweeps"][kind]["views"]["uniform"].replace("&compareRunsMode=CHART", ""))
    # 4-16 and 20-400 blocks are in neither regime: the ranking is the mean over every capacity
    # (sweep.views.rank_key)
    page.locator(".ag-header-cell").filter(has_text="compute_savings_mean").first.wait_for(timeout=60000)
    assert "compute_savings_vs_lru" not in page.locator(".ag-header-row").first.inner_text()  # no headline size


@pytest.mark.parametrize("kind", ["flat", "tiered"])
def test_the_description_renders_its_tables_as_a_code_block(ui, kind):
    run = ui["sweeps"][kind]["run"]
    page = _open(ui, f"{ui['base']}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
                     "?workflowType=machine_learning")
    block = page.locator("pre").filter(has_text="compute-savings ratio").first
    block.wait_for(timeout=60000)
    assert "policy" in block.inner_text()
    for h in ("h1", "h2", "h3"):  # a lost fence would turn the table's rules into headings
        assert not any("policy" in t for t in page.locator(h).all_inner_texts())
    assert page.locator("a[href*='viewStateShareKey']").count() == len(COSTS)


@pytest.mark.parametrize("kind", ["flat", "tiered"])
def test_report_fits_the_artifact_pane_with_legible_ticks(ui, kind):
    run = ui["sweeps"][kind]["run"]
    page = _open(ui, f"{ui['base']}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
                     "/artifacts/report.html?workflowType=machine_learning")
    frame = page.locator("iframe").first
    frame.wait_for(timeout=60000)
    doc = frame.content_frame
    doc.locator("h1").wait_for(timeout=60000)
    width = doc.locator("html").evaluate("e => e.clientWidth")
    assert 450 < width <= 1100  # the pane, not the window
    rights = doc.locator("table").evaluate_all("ts => ts.map(t => t.getBoundingClientRect().right)")
    assert rights and max(rights) <= width, (max(rights), width)
    assert doc.locator("html").evaluate("e => e.scrollWidth") <= width  # nothing else overflows either
    imgs = doc.locator("img")
    doc.locator("img").last.evaluate("i => i.decode()")
    scales = imgs.evaluate_all("is => is.map(i => i.getBoundingClientRect().width / i.naturalWidth)")
    assert len(scales) == len(COSTS) + (kind == "tiered")  # a figure per cost model (and the pools')
    assert min(scales) * TICK_PX >= 10, scales
