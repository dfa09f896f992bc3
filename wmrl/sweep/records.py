"""What ``wmrl compare`` reads about one run, from wherever it is: a sweep directory, a saved
``records.jsonl``, or MLflow (a parent run's children, run ids, or a search filter)."""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmrl.io import atomic_write_text, read_json
from wmrl.sweep.state import MLFLOW_DONE, RESULT
from wmrl.tracking.run_tracker import COMPUTE_UNIT_TAG, INITIAL_POLICY_TAG

RECORDS = "records.jsonl"
# The score and cost curves: (score metric, GPU-hours metric) as `wmrl simulate` / a sweep logs them.
SCORE_METRIC = "sim/score"
COST_METRIC = "sim/gpu_hours"


@dataclass
class RunRecord:
    name: str
    variant: str
    seed: int
    anchor_frac: float
    w_max: float
    final_score: float
    gpu_hours: float
    eta2: float | None = None
    rho: float | None = None
    audit_warned: bool | None = None  # None: no audit (a variant without calibration)
    phase_hours: dict[str, float] = field(default_factory=dict)
    curve_hours: list[float] = field(default_factory=list)
    curve_score: list[float] = field(default_factory=list)
    run_id: str | None = None
    hours_unit: str = "GPU"  # what gpu_hours, phase_hours and curve_hours count: "GPU", "CPU" or "compute"
    initial_policy: str | None = None  # the checkpoint a trainer run started from (None: simulator, or not tagged)

    @property
    def setting(self) -> tuple[str, float, float]:
        return (self.variant, self.anchor_frac, self.w_max)


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- sweep directory


def from_sweep_dir(root: Path) -> list[RunRecord]:
    """Every computed run under ``root/runs`` (a run without ``result.json`` is not finished)."""
    import yaml


    records = []
    for run in sorted((root / "runs").iterdir()):
        if not (run / RESULT).exists():
            continue
        alg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))["algorithm"]  # written resolved
        done = run / MLFLOW_DONE
        records.append(from_result(run.name, alg, read_json(run / RESULT),
                                   read_json(done)["run_id"] if done.exists() else None))
    return records


def from_result(name: str, alg: dict[str, Any], res: dict[str, Any], run_id: str | None = None) -> RunRecord:
    """The record of a simulator run: ``alg`` its algorithm section, ``res`` its RunResult as a dict."""
    # the synthetic testbed off `wmrl --help`'s path (wmrl sweep, compare read records)
    from wmrl.simulate.simulator import audit_warned

    hist = res["history"]
    return RunRecord(
        name=name, variant=alg["variant"], seed=int(alg["seed"]),
        anchor_frac=float(alg["anchor_frac"]), w_max=float(alg["w_max"]),
        final_score=res["final_score"], gpu_hours=res["gpu_hours"],
        eta2=_num((hist.get("eta2") or [None])[-1]), rho=_num((hist.get("rho") or [None])[-1]),
        audit_warned=audit_warned(res["audit"]) if res.get("audit") else None,
        phase_hours={k: v / 3600.0 for k, v in (res.get("phase_seconds") or {}).items()},
        curve_hours=list(hist["gpu_hours"]), curve_score=list(hist["score"]), run_id=run_id,
    )


# --------------------------------------------------------------------------- records.jsonl


def write_records(records: list[RunRecord], path: Path) -> None:
    atomic_write_text(path, "".join(json.dumps(dataclasses.asdict(r), sort_keys=True) + "\n" for r in records))


def read_records(path: Path) -> list[RunRecord]:
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(RunRecord(**json.loads(line)))
            except (ValueError, TypeError) as err:
                raise ValueError(f"{path}:{i}: not a run record ({err})") from err
    return out


def _same(a: float, b: float) -> bool:
    """Equal numbers, or both unmeasured (NaN: a cost metric the run did not log)."""
    return a == b or (math.isnan(a) and math.isnan(b))


def pool_records(sources: list[tuple[str, list[RunRecord]]]) -> list[RunRecord]:
    """The runs of several sources (a sweep directory, a saved ``records.jsonl``...), each (setting, seed)
    once: a run found twice (a sweep read again after its records were saved) is kept once when its
    numbers agree, and refused when they differ (two runs of one seed would be counted twice)."""
    found: dict[tuple[tuple[str, float, float], int], tuple[str, RunRecord]] = {}
    for where, records in sources:
        for r in records:
            key = (r.setting, r.seed)
            if key not in found:
                found[key] = (where, r)
                continue
            first_where, first = found[key]
            if not (_same(first.final_score, r.final_score) and _same(first.gpu_hours, r.gpu_hours)):
                variant, frac, w_max = r.setting
                raise ValueError(
                    f"{variant} anchor_frac={frac:g} w_max={w_max:g} seed {r.seed} twice, with different numbers: "
                    f"in {first_where} (score {first.final_score:.4f}, {first.gpu_hours:.3g} h) and in {where} "
                    f"(score {r.final_score:.4f}, {r.gpu_hours:.3g} h); keep one of the two")
    return [r for _, r in found.values()]


# --------------------------------------------------------------------------- MLflow


def from_mlflow(uri: str, *, parent: str | None = None, run_ids: list[str] | None = None,
                filter_string: str = "", experiment: str | None = None,
                score_metric: str = SCORE_METRIC, cost_metric: str = COST_METRIC) -> list[RunRecord]:
    """FINISHED runs: children of ``parent``, the given ids, or those matching ``filter_string``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    if run_ids:
        runs = [client.get_run(r) for r in run_ids]
    else:
        if experiment:
            exp = client.get_experiment_by_name(experiment)
            if exp is None:
                raise ValueError(f"no MLflow experiment named {experiment!r} at {uri}")
            exp_ids = [exp.experiment_id]
        elif parent:
            exp_ids = [client.get_run(parent).info.experiment_id]
        else:
            exp_ids = [e.experiment_id for e in client.search_experiments()]
        clauses = [c for c in (filter_string, f"tags.mlflow.parentRunId = '{parent}'" if parent else "") if c]
        runs = client.search_runs(exp_ids, " and ".join(clauses), max_results=50000)
    return [_record(client, run, score_metric, cost_metric) for run in runs if run.info.status == "FINISHED"
            and run.data.tags.get("wmrl.kind") != "sweep"]


def score_curve(score: list[tuple[int, float]], cost: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """(GPU-hours, score) at each step that logged a score, from ``(step, value)`` histories.

    A trainer logs its cost every step but its score only at evaluations (steps 0, eval_every, ...):
    each score is paired with the cost logged at its step, or the last one before it (0 before the
    first step). The simulator logs both at the same steps. A run that never logged the cost metric (e.g.
    ``cpu_hours``, which runs before round 22 did not measure) has no curve: its hours are unknown, not 0.
    """
    if not cost:
        return [], []
    steps = [step for step, _ in cost]
    hours = [cost[i][1] if (i := bisect.bisect_right(steps, step) - 1) >= 0 else 0.0 for step, _ in score]
    return hours, [value for _, value in score]


def _phase_hours(metrics: dict[str, float]) -> dict[str, float]:
    """GPU-hours per phase: the simulator's priced ``cost/<phase>_gpu_hours``, or a trainer's measured
    ``seconds_<phase>`` totals (generation, world_model, execution, update, weight_sync, io)."""
    priced = {k.removeprefix("cost/").removesuffix("_gpu_hours"): v for k, v in metrics.items()
              if k.startswith("cost/") and k.endswith("_gpu_hours")}
    return priced or {k.removeprefix("seconds_"): v / 3600.0 for k, v in metrics.items()
                      if k.startswith("seconds_") and k != "seconds_per_step"}


def _record(client: Any, run: Any, score_metric: str, cost_metric: str) -> RunRecord:
    params, metrics = run.data.params, run.data.metrics
    missing = [p for p in ("algorithm.variant", "algorithm.seed") if p not in params]
    if missing:
        raise ValueError(f"MLflow run {run.info.run_id} has no param(s) {', '.join(missing)}: not a wmrl run")

    def history(key: str) -> list[tuple[int, float]]:
        """(step, value) by step; a step logged twice (a resumed run) keeps its latest value."""
        latest = {m.step: m.value for m in sorted(client.get_metric_history(run.info.run_id, key),
                                                   key=lambda m: (m.step, m.timestamp))}
        return sorted(latest.items())

    score_at, hours_at = history(score_metric), history(cost_metric)
    curve_hours, curve_score = score_curve(score_at, hours_at)
    score, hours = [v for _, v in score_at], [v for _, v in hours_at]
    warned = metrics.get("final/audit_warned")
    simulated = "final/gpu_hours" in metrics
    return RunRecord(
        name=run.info.run_name or run.info.run_id, variant=params["algorithm.variant"],
        seed=int(params["algorithm.seed"]), anchor_frac=float(params.get("algorithm.anchor_frac", "nan")),
        w_max=float(params.get("algorithm.w_max", "nan")),
        final_score=metrics.get("final/score", score[-1] if score else float("nan")),
        gpu_hours=metrics.get("final/gpu_hours", hours[-1] if hours else float("nan")),
        # simulator runs log final/*; a trainer run's last step logs eta2 and rho themselves
        eta2=metrics.get("final/eta2", metrics.get("eta2")), rho=metrics.get("final/rho", metrics.get("rho")),
        audit_warned=None if warned is None else bool(warned),
        phase_hours=_phase_hours(metrics),
        curve_hours=curve_hours, curve_score=curve_score, run_id=run.info.run_id,
        hours_unit="GPU" if simulated else run.data.tags.get(COMPUTE_UNIT_TAG, "compute"),
        initial_policy=run.data.tags.get(INITIAL_POLICY_TAG),
    )
