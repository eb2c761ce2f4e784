"""MLflow records of a sweep, and what a new sweep can reuse from them.

experiment   one per trace (its name; synthetic traces get a "-synthetic" suffix), with
             the views of its sweeps (sweep.views)
parent run   one per sweep (tag kvsweep.sweep_key): resolved config, trace summary, tags
             trace_source / git commit / versions / driver host and pid; at the end
             curves.csv, summary.txt, report.html and its PNGs (sweep.report.html)
child run    one per curve = (policy, cost model, capacity list), tag kvsweep.curve_key:
             every sim_core.Result metric as `curve/<field>`, step = capacity in MiB (a
             serving sweep: one per (policy, load, route), cost model `serve`, every
             ServeResult field; tags load, route, router, replicas), params with the
             capacity list in blocks and GiB, curve.csv; FINISHED once every capacity is
             in, with summary metrics (sweep.report.regimes) a runs table can sort by.

Identity (sweep.keys): a re-run finds its parent by sweep key and its curves by curve
key. A FINISHED curve is reused, never duplicated; a partial one (KILLED, FAILED, or
RUNNING under a driver that is gone) is resumed into. Points are reused by point key
from any curve of the same base identity (another capacity list) and from the journal.
"""
from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Sequence

from sim_core import Result
from sim_core.result import required_fields

from .curves import Curve, LABEL_COLUMNS, SweepFacts, csv_columns, curves_by_model, row_dict, write_csv
from .metrics import CURVE_PREFIX, MAX_TAG, capacity_steps, chunks, finite, param_value, point_metrics
from .plan import Capacity
from .report.html import log_report, write_report
from .report.regimes import summary, vs_reference
from .report.slo import serve_summary
from .report.sweeps import SweepTable
from .serving import SERVE, complete as serve_complete, from_row as serve_from_row
from .store import quiet_mlflow, sqlite_path, store_lock
from .views import EXPERIMENT_NOTE, publish


log = logging.getLogger("sweep")

STALE_HEARTBEAT_S = 600  # a RUNNING sweep on another host is stale after this long without news
HEARTBEAT_S = 60

T_KIND, T_SWEEP, T_CURVE, T_BASE = "kvsweep.kind", "kvsweep.sweep_key", "kvsweep.curve_key", "kvsweep.base_key"
T_HOST, T_PID, T_BEAT = "kvsweep.driver_host", "kvsweep.driver_pid", "kvsweep.heartbeat"
REFERENCE = "lru"  # the baseline of the *_vs_lru_* metrics
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Tracker:
    def __init__(self, uri: str, experiment: str, artifact_location: str | None = None):
        quiet_mlflow()
        from mlflow.tracking import MlflowClient

        self.uri = uri
        db = sqlite_path(uri)
        if db is not None and artifact_location is None:
            artifact_location = (db.parent / "mlruns").as_uri()
        with store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            self.experiment_id = self._experiment(experiment, artifact_location)
        self.experiment = experiment
        self.parent_id: str | None = None
        self.parent_name: str | None = None
        self.capacities: list[Capacity] = []
        self._last_beat = 0.0

    def _experiment(self, name: str, artifact_location: str | None) -> str:
        from mlflow.exceptions import MlflowException

        exp = self.client.get_experiment_by_name(name)
        if exp is None:
            try:
                # the kind is for MLflow versions that read it: 3.17's UI takes the mode from the
                # browser (?workflowType=machine_learning, or its switch), so the note says so
                return self.client.create_experiment(
                    name, artifact_location=artifact_location,
                    tags={"mlflow.experimentKind": "custom_model_development", "mlflow.note.content": EXPERIMENT_NOTE})
            except MlflowException:  # created by a concurrent sweep since we looked
                exp = self.client.get_experiment_by_name(name)
                if exp is None:
                    raise
        if exp.lifecycle_stage == "deleted":
            self.client.restore_experiment(exp.experiment_id)
        return exp.experiment_id

    # ------------------------------------------------------------------ reading
    def _search(self, filter_string: str) -> list:
        from mlflow.entities import ViewType

        out, token = [], None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string, ViewType.ACTIVE_ONLY,
                                           max_results=1000, page_token=token)
            out += list(page)
            token = page.token
            if not token:
                return out

    def _is_live(self, run) -> bool:
        """A RUNNING sweep run whose driver still runs (same host: its pid; elsewhere:
        a heartbeat in the last STALE_HEARTBEAT_S seconds)."""
        tags = run.data.tags
        if tags.get(T_HOST) == socket.gethostname() and tags.get(T_PID, "").isdigit():
            return _pid_alive(int(tags[T_PID]))
        try:
            beat = float(tags.get(T_BEAT, run.info.start_time / 1000))
        except ValueError:
            return False
        return time.time() - beat < STALE_HEARTBEAT_S

    def mark_stale(self) -> list[str]:
        """RUNNING sweeps whose driver is gone (killed, lost node) and their RUNNING
        curves: marked KILLED so they can be resumed. Returns their run ids."""
        sweeps = self._search(f"attributes.status = 'RUNNING' and tags.`{T_KIND}` = 'sweep'")
        stale = [r for r in sweeps if not self._is_live(r)]
        out = []
        for s in stale:
            kids = self._search(f"attributes.status = 'RUNNING' and tags.`mlflow.parentRunId` = '{s.info.run_id}'")
            for r in kids + [s]:
                self.client.set_tag(r.info.run_id, "kvsweep.stale", "driver gone; marked KILLED by a later sweep")
                self.client.set_terminated(r.info.run_id, "KILLED")
                out.append(r.info.run_id)
        return out

    def live_sweep(self, sweep_key: str):
        """The RUNNING run of a live driver with this sweep key, if any."""
        for r in self._search(f"attributes.status = 'RUNNING' and tags.`{T_SWEEP}` = '{sweep_key}'"):
            if self._is_live(r):
                return r
        return None

    def stored_points(self, curves: Sequence[Curve]) -> dict[str, Result]:
        """point key -> Result for every capacity already logged to a curve run with
        the same base identity (any capacity list); fills `curve.run_id/status/stored`
        for runs of the same curve key."""
        by_base: dict[str, list[Curve]] = {}
        for c in curves:
            by_base.setdefault(c.base_key, []).append(c)
        runs = self._search(f"tags.`{T_KIND}` = 'curve'")
        runs = [r for r in runs if r.data.tags.get(T_BASE) in by_base]
        # a FINISHED run of a curve key wins over partial ones; then the newest
        runs.sort(key=lambda r: (r.info.status != "FINISHED", -r.info.start_time))
        known: dict[str, Result] = {}
        for r in runs:
            steps = self._points_of(r.info.run_id)
            cm = r.data.tags.get("cost_model")
            base = by_base[r.data.tags[T_BASE]]
            ident = base[0].identity
            have = {ident.point_key(res.capacity_blocks) for res in steps.values()}
            for res in steps.values():
                known.setdefault(ident.point_key(res.capacity_blocks), res)
            for c in base:
                # a RUNNING run belongs to a live sweep (stale ones were marked KILLED)
                if (c.key == r.data.tags.get(T_CURVE) and c.run_id is None and c.cost_model == cm
                        and r.info.status != "RUNNING"):
                    c.run_id = r.info.run_id
                    c.status = "REUSED" if r.info.status == "FINISHED" else "RESUMED"
                    c.stored = {i for i, k in enumerate(c.point_keys) if k in have}
                    c.start_ms = r.info.start_time
        return known

    def _points_of(self, run_id: str) -> dict[int, Result]:  # keyed by blocks: steps changed meaning
        """capacity in blocks -> Result (compute_savings under the run's own cost model) from the run's
        metric histories (curve/<field>; a run recorded before that prefix: <field>).
        A metric absent at a step is NaN (unavailable on a sample, not logged); a step
        without the required counts is incomplete (a batch cut short) and left out."""
        run = self.client.get_run(run_id)
        cm = run.data.tags.get("cost_model", "uniform")
        prefix = CURVE_PREFIX if CURVE_PREFIX + "capacity_blocks" in run.data.metrics else ""
        names = [k[len(prefix):] for k in run.data.metrics if k.startswith(prefix)
                 and (prefix or "/" not in k) and k[len(prefix):] != "capacity_gib"]
        hist = {k: {m.step: m.value for m in self.client.get_metric_history(run_id, prefix + k)} for k in names}
        out = {}
        for step in hist.get("capacity_blocks", {}):
            row = {k: h.get(step, float("nan")) for k, h in hist.items()}
            if cm == SERVE:  # a serving curve (fleet=...)
                if serve_complete(row):
                    out[int(row["capacity_blocks"])] = serve_from_row(row, run.data.tags.get("router"))
                continue
            if any(row.get(k, float("nan")) != row.get(k, float("nan")) for k in required_fields()):
                continue
            res = Result.from_row(row, cm)
            out[int(res.capacity_blocks)] = res
        return out

    # ------------------------------------------------------------------ parent
    def start_parent(self, *, run_name: str, sweep_key: str, params: dict, tags: dict, metrics: dict,
                     texts: dict[str, str], capacities: Sequence[Capacity]) -> tuple[str, bool]:
        """Create the sweep's parent run, or resume the one with the same sweep key.
        Returns (run id, resumed)."""
        from mlflow.entities import Metric, Param

        self.capacities = list(capacities)
        driver = {T_KIND: "sweep", T_SWEEP: sweep_key, T_HOST: socket.gethostname(), T_PID: str(os.getpid()),
                  T_BEAT: f"{time.time():.0f}"}
        prior = self._search(f"tags.`{T_SWEEP}` = '{sweep_key}' and tags.`{T_KIND}` = 'sweep'")
        if prior:
            prior.sort(key=lambda r: -r.info.start_time)
            self.parent_id, self.parent_name = prior[0].info.run_id, prior[0].info.run_name
            self.client.update_run(self.parent_id, status="RUNNING")
            for k, v in {**driver, "kvsweep.resumed": "true"}.items():
                self.client.set_tag(self.parent_id, k, v)
            return self.parent_id, True
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={**{k: str(v) for k, v in tags.items()}, **driver})
        self.parent_id, self.parent_name = run.info.run_id, run_name
        ps = [Param(k[:250], param_value(v)) for k, v in params.items()]
        for chunk in chunks(ps, 100):
            self.client.log_batch(self.parent_id, params=chunk)
        now = int(time.time() * 1000)
        ms = [Metric(k[:250], float(v), now, 0) for k, v in metrics.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and finite(v)]
        for chunk in chunks(ms, 1000):
            self.client.log_batch(self.parent_id, metrics=chunk)
        for name, text in texts.items():
            self.client.log_text(self.parent_id, text, name)
        return self.parent_id, False

    def heartbeat(self) -> None:
        if self.parent_id and time.time() - self._last_beat > HEARTBEAT_S:
            self._last_beat = time.time()
            self.client.set_tag(self.parent_id, T_BEAT, f"{time.time():.0f}")

    # ------------------------------------------------------------------ children
    def open_curve(self, c: Curve, params: dict, tags: dict, run_name: str | None = None) -> None:
        """Give curve `c` a run under the parent: its own again (resumed) or a new one.
        A REUSED (finished) curve is left where it is."""
        from mlflow.entities import Param

        if c.status == "REUSED":
            return
        if c.supersede:  # sweep.resume=false: the old run goes (MLflow keeps it restorable)
            self.client.delete_run(c.supersede)
            c.supersede = None
        if c.status == "RESUMED":
            self.client.update_run(c.run_id, status="RUNNING")
            self.client.set_tag(c.run_id, "mlflow.parentRunId", self.parent_id)
            return
        caps = self.capacities
        run = self.client.create_run(
            self.experiment_id, run_name=run_name or f"{c.label} | {c.cost_model}",
            tags={"mlflow.parentRunId": self.parent_id, "policy": c.policy, "cost_model": c.cost_model,
                  **({"pool": c.pool} if c.pool else {}), **({"load": f"{c.load:g}"} if c.load else {}),
                  **({"route": c.route} if c.route else {}),
                  T_KIND: "curve", T_CURVE: c.key, T_BASE: c.base_key, **{k: str(v) for k, v in tags.items()}})
        c.run_id, c.status, c.start_ms = run.info.run_id, "CREATED", run.info.start_time
        ps = {"policy": c.policy, "cost_model": c.cost_model, **({"pool": c.pool} if c.pool else {}),
              **({"arrival_speedup": c.load} if c.load else {}),
              "n_capacities": len(caps),
              "capacities_blocks": [x.blocks for x in caps], "capacities_gib": [round(x.gib, 6) for x in caps],
              **params}
        for chunk in chunks([Param(k[:250], param_value(v)) for k, v in ps.items()], 100):
            self.client.log_batch(c.run_id, params=chunk)

    def log_points(self, c: Curve, points: dict[int, Result]) -> None:
        """Log capacity index -> Result into the curve's run (metrics, step = capacity in MiB)."""
        now = int(time.time() * 1000)
        ms, steps = [], capacity_steps(self.capacities)
        for idx, res in sorted(points.items()):
            cap = self.capacities[idx]
            if res.capacity_blocks != cap.blocks:
                raise RuntimeError(f"result for {cap.blocks} blocks came back as {res.capacity_blocks}")
            ms += point_metrics(res, c.cost_model, cap, steps[idx], now)
        for chunk in chunks(ms, 1000):
            self.client.log_batch(c.run_id, metrics=chunk)
        c.stored.update(points)

    def finish_curve(self, c: Curve, status: str, error: str | None = None) -> None:
        """End the curve's run: FINISHED with its summary metrics and curve.csv when every
        capacity is in; otherwise `status` (KILLED/FAILED), marked partial, and without
        summaries (a mean over the capacities that happened to finish would mislead).
        The run ends its jobs' replay time after it started, so MLflow's Duration is
        that time (the jobs themselves may have run at any moment of the sweep)."""
        from mlflow.entities import Metric

        if c.status == "REUSED" or c.run_id is None:
            return
        if error:
            self.client.set_tag(c.run_id, "error", error[:5000])
        complete = len(c.stored) == len(self.capacities)
        rows = self._rows(c)
        secs, cpu, n_jobs = c.replay_time()
        now = int(time.time() * 1000)
        if complete:
            ms = {k: v for k, v in (serve_summary(rows) if c.load else summary(rows)).items() if finite(v)}
            if n_jobs:
                ms.update(replay_seconds=secs, replay_cpu_seconds=cpu)
            self.client.log_batch(c.run_id, metrics=[Metric(k, float(v), now, 0) for k, v in ms.items()])
            status = "FINISHED"
            self.client.set_tag(c.run_id, "kvsweep.partial", "false")
        else:
            self.client.set_tag(c.run_id, "kvsweep.partial",
                                f"{len(c.stored)} of {len(self.capacities)} capacities; no summary metrics logged")
        timed = sum(1 for i in c.rows if i in c.times)
        self.client.set_tag(c.run_id, "kvsweep.replay",
                            f"{secs:.2f} s wall, {cpu:.2f} s CPU in {n_jobs} job(s); "
                            + (f"{timed} of {len(c.rows)} capacities timed (the others were reused without their "
                               f"job's time)" if timed < len(c.rows) else "every capacity timed"))
        if rows:
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "curve.csv"
                write_csv(path, rows, csv_columns(rows))
                self.client.log_artifact(c.run_id, str(path))
        end = c.start_ms + round(secs * 1000) if n_jobs and c.start_ms is not None else None
        self.client.set_terminated(c.run_id, status, end_time=end)
        c.done = True

    def log_vs_reference(self, curves: Sequence[Curve], references: dict) -> int:
        """`*_vs_lru_at_<size>` (points) on every FINISHED curve whose cost model has a
        complete LRU curve; a curve finished by an earlier sweep gets those it lacks.
        Returns the runs written to."""
        from mlflow.entities import Metric

        n_caps, done = len(self.capacities), 0
        now = int(time.time() * 1000)
        for c in curves:
            ref = references.get((c.cost_model, c.pool))
            finished = c.status == "REUSED" or (c.done and len(c.stored) == n_caps)
            if ref is None or len(ref.rows) < n_caps or len(c.rows) < n_caps or not finished or c.run_id is None:
                continue
            ms = vs_reference(self._rows(c), self._rows(ref), REFERENCE)
            if c.status == "REUSED":
                have = self.client.get_run(c.run_id).data.metrics
                ms = {k: v for k, v in ms.items() if k not in have}
            if ms:
                self.client.log_batch(c.run_id, metrics=[Metric(k, float(v), now, 0) for k, v in ms.items()])
                done += 1
        return done

    def _rows(self, c: Curve) -> list[dict]:
        return [row_dict(self.capacities, i, c.rows[i], c.cost_model) for i in sorted(c.rows)]

    # ------------------------------------------------------------------ end
    def log_parent_metrics(self, metrics: dict) -> None:
        """Numbers about the sweep as a whole (its work: accesses replayed, CPU-s). Never raises."""
        from mlflow.entities import Metric

        if self.parent_id is None:
            return
        now = int(time.time() * 1000)
        try:
            self.client.log_batch(self.parent_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
        except Exception as e:  # noqa: BLE001 - the status update matters more
            log.warning("could not log %s to the sweep run: %s", ", ".join(metrics), e)

    def set_parent_tag(self, key: str, value: str) -> None:
        """One tag on the sweep run (its description at the end). Never raises."""
        if self.parent_id is None:
            return
        try:
            self.client.set_tag(self.parent_id, key, value[:MAX_TAG])
        except Exception as e:  # noqa: BLE001 - the status update matters more
            log.warning("could not tag the sweep run with %s: %s", key, e)

    def log_parent_text(self, name: str, text: str) -> None:
        """A text artifact on the sweep run (summary.txt). Never raises."""
        if self.parent_id is None:
            return
        try:
            self.client.log_text(self.parent_id, text, name)
        except Exception as e:  # noqa: BLE001 - the status update matters more
            log.warning("could not attach %s to the sweep run: %s", name, e)

    def write_views(self, curves: Sequence[Curve], experiment_url: str) -> dict[str, str]:
        """The sweep's MLflow views and its runs' colours (sweep.views.publish): cost model
        -> the view's address. Never raises."""
        if self.parent_id is None:
            return {}
        try:
            return publish(self.client, self.experiment_id, self.parent_id, curves, [x.gib for x in self.capacities],
                           experiment_url)
        except Exception as e:  # noqa: BLE001 - the status update matters more
            log.warning("could not write the sweep's MLflow views: %s", e)
            return {}

    def log_parent_rows(self, tables: dict[str, list[dict]]) -> None:
        """CSV artifacts on the sweep run (file name -> rows). Never raises."""
        if self.parent_id is None:
            return
        try:
            with tempfile.TemporaryDirectory() as d:
                for name, rows in tables.items():
                    if rows:
                        write_csv(Path(d) / name, rows, csv_columns(rows, ()))
                        self.client.log_artifact(self.parent_id, str(Path(d) / name))
        except Exception as e:  # noqa: BLE001 - the status update matters more
            log.warning("could not attach %s to the sweep run: %s", ", ".join(tables), e)

    def close_parent(self, status: str, curves: Sequence[Curve], facts: SweepFacts | None = None) -> None:
        """Compare finished curves with LRU, attach every curve and the report to the
        parent, then mark it. Never raises."""
        if self.parent_id is None:
            return
        facts = facts or SweepFacts()
        try:
            self.log_vs_reference(curves, facts.references)
        except Exception as e:  # noqa: BLE001 - comparisons must not lose the status update
            log.warning("could not log the differences to LRU: %s", e)
        try:
            self._parent_artifacts(curves, facts)
        except Exception as e:  # noqa: BLE001 - the report must not lose the status update
            log.warning("could not attach curves/report to the parent run: %s", e)
        try:
            reused = [c.run_id for c in curves if c.status == "REUSED"]
            if reused:
                self.client.set_tag(self.parent_id, "kvsweep.reused_curves", ",".join(reused)[:5000])
            self.client.set_terminated(self.parent_id, status)
        except Exception as e:  # noqa: BLE001
            log.warning("could not mark the sweep run %s %s: %s", self.parent_id, status, e)

    def _parent_artifacts(self, curves: Sequence[Curve], facts: SweepFacts) -> None:
        per_model = curves_by_model(self.capacities, curves)
        if not per_model:
            return
        with tempfile.TemporaryDirectory() as d:
            rows = [{"policy": p, "cost_model": m, **r} for m, per in per_model.items()
                    for p, rs in per.items() for r in rs]
            path = Path(d) / "curves.csv"
            write_csv(path, rows, csv_columns(rows, ("policy", "cost_model") + LABEL_COLUMNS))
            self.client.log_artifact(self.parent_id, str(path))
            order = [m for m in facts.cost_models if m in per_model] + sorted(set(per_model) - set(facts.cost_models))
            table = SweepTable(experiment=self.experiment, run_id=self.parent_id,
                               run_name=self.parent_name or self.parent_id, trace_source=facts.trace_source,
                               n_capacities=len(self.capacities), curves=per_model, cost_models=order,
                               saturation_blocks=facts.saturation_blocks, sample_rate=facts.sample_rate,
                               windows=list(facts.windows), window_ranking=list(facts.window_ranking),
                               fleet=facts.fleet, tier_rules=facts.tier_rules, setup=facts.setup,
                               warnings=list(facts.warnings), partial=facts.partial)
            out = Path(d) / "report"
            write_report(table, out)
            log_report(self.client, self.parent_id, out)
