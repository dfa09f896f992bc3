"""``wmrl status RUN_DIR``: step, queue depth, live workers, last refit, rho, throughput, ETA.

``wmrl status SWEEP_DIR`` (a directory with ``sweep.json``, from ``wmrl sweep``): one line per run of the
sweep, each run's state read as ``wmrl status RUN_DIR`` reads it (a simulate run: computed, logged), with
its step, ETA, calibration and last evaluation; then the counts, and the runs superseded by ``--rerun``."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from wmrl.config import load_config
from wmrl.execution.service import live_workers, throughput_per_min
from wmrl.io import read_json
from wmrl.orchestration.coordinator import PROGRESS
from wmrl.progress import format_duration
from wmrl.sft.pipeline import initial_policy_label
from wmrl.slurm.client import ACTIVE_STATES, job_states, load_jobs
from wmrl.storage.health import (
    coordinator_health,
    latest_checkpoint_step,
    result_counts,
    slurm_final_states,
)
from wmrl.storage.rundir import RunDir
from wmrl.storage.spool import Spool
from wmrl.sweep.state import MLFLOW_DONE, RESULT, SWEEP_FILE, SweepDir, live_job
from wmrl.tracking.outbox import Outbox
from wmrl.tracking.run_tracker import MLFLOW_RUN_ID


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status", help="show a run's progress, queue, workers and calibration (or every run of a sweep)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory, or a sweep directory (sweep.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def collect(run: RunDir) -> dict[str, Any]:
    """Everything status shows, from files (and squeue/sacct when the run has Slurm jobs)."""
    cfg = load_config(run.config_path)
    spool = Spool(run, cfg.launch.max_attempts)
    try:
        progress = read_json(run.path / PROGRESS)
    except (OSError, ValueError):
        progress = {}
    health = coordinator_health(run, cfg.launch.timing.lock_stale_s)
    results = result_counts(run)
    counts = spool.counts()
    info: dict[str, Any] = {
        "run_dir": str(run.path), "ended": run.ended_reason() if run.is_ended() else None,
        "progress": progress, "checkpoint_step": latest_checkpoint_step(run),
        "coordinator": {"state": health.state, "detail": health.detail, "last_error": health.last_error},
        "queue": {"queued": counts["queued"], "claimed": counts["claimed"], "done": results.done,
                  "failed": results.failed, "invalid": results.invalid, "quarantined": counts["quarantined"]},
        "live_workers": live_workers(run, cfg.launch.timing.lease_s),
        "throughput_per_min": throughput_per_min(spool), "jobs": [],
        "tracking": _tracking(run, cfg), "initial_policy": initial_policy_label(run.path),
    }

    records = load_jobs(run)
    if records:
        try:
            states = job_states([r.job_id for r in records])
        except (OSError, RuntimeError) as err:
            states = {}
            info["squeue_error"] = str(err)
        over = slurm_final_states([r.job_id for r in records if not states.get(r.job_id)])
        for r in records:
            info["jobs"].append({"kind": r.kind, "job_id": r.job_id, "tasks": r.n_tasks,
                                 "states": states.get(r.job_id, []), "final": over.get(r.job_id)})
    info["state"] = run_state(info)
    return info


def _tracking(run: RunDir, cfg: Any) -> dict[str, Any]:
    if not cfg.tracking.enabled:
        return {"enabled": False}
    state = Outbox(run.path).state()
    try:
        run_id = (run.path / MLFLOW_RUN_ID).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        run_id = None
    return {"enabled": True, "uri": cfg.tracking.uri, "mlflow_run_id": run_id, "records": state.records,
            "pending": state.pending, "last_error": state.last_error, "failing_since": state.failing_since}


def run_state(info: dict[str, Any]) -> str:
    """One phrase that is true: ended / running / queued on Slurm / dead (why) / not started."""
    coordinator = info["coordinator"]
    jobs = [j for j in info["jobs"] if j["kind"] == "coordinator"]
    active = [j for j in jobs if any(s in ACTIVE_STATES for s in j["states"])]
    if info["ended"]:
        return f"ended ({info['ended']})"
    if coordinator["state"] == "alive":
        return "running"
    if active and any("PENDING" in j["states"] or "REQUEUED" in j["states"] for j in active):
        return f"waiting for Slurm: coordinator job {active[-1]['job_id']} is pending ({coordinator['detail']})"
    if active:
        return f"starting (coordinator job {active[-1]['job_id']} {', '.join(active[-1]['states'])})"
    if coordinator["state"] == "never" and not jobs:
        return "not started"
    finals = [f"Slurm job {j['job_id']} {j['final']}" for j in jobs if j.get("final")]
    parts = [coordinator["detail"], *finals[-1:]]
    if coordinator["last_error"]:
        parts.append(f"last error: {coordinator['last_error']}")
    return f"DEAD: coordinator not running, run not ended ({'; '.join(parts)}); relaunch: wmrl launch {info['run_dir']}"


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def render(info: dict[str, Any], brief: bool = False) -> str:
    p, q = info["progress"], info["queue"]
    state = info["state"]
    step = f"{p.get('step', 0)}/{p.get('total_steps', '?')}"
    running = state == "running"
    workers = info["live_workers"] if running or not info["ended"] else 0
    if brief:
        return (f"[{time.strftime('%H:%M:%S')}] {state}: step {step}, queue {q['queued']} waiting / "
                f"{q['claimed']} running / {q['done']} done, {workers} workers, rho {_fmt(p.get('rho'))}")
    age = time.time() - p["updated_at"] if "updated_at" in p else None
    eta = f", ETA {format_duration(p.get('eta_s'))}" if running else ""
    invalid = f", {q['invalid']} unreadable (not counted)" if q["invalid"] else ""
    lines = [
        f"run        {info['run_dir']}",
        f"state      {state}" + (f" (progress updated {age:.0f} s ago)" if age is not None else ""),
        f"step       {step}   checkpoint at step {_fmt(info['checkpoint_step'], 'd')}",
        f"policy     started from {info['initial_policy']} (pinned at the run's first start)"
        if info.get("initial_policy") else "",
        (f"queue      {q['queued']} waiting, {q['claimed']} running, {q['done']} done, {q['failed']} failed, "
         f"{q['quarantined']} quarantined{invalid}"),
        f"workers    {workers} live" + ("" if running or not workers else " (no coordinator: they exit when idle)"),
        (f"calibration rho {_fmt(p.get('rho'))}, pairs {_fmt(p.get('n_pairs'), '.0f')}, refits "
         f"{_fmt(p.get('n_refits'), '.0f')} (last at step {_fmt(p.get('last_refit_step'), 'd')}), "
         f"eta2 {_fmt(p.get('eta2'))}"),
        _audit_line(p),
        # the anchor rule's latest decision (issue 37; algorithm.anchor_rule)
        f"anchors    {_fmt(p.get('anchor_frac'), '.0%')} of the groups: {p['anchor_reason']}"
        if p.get("anchor_reason") else "",
        _world_model_line(p),
        _compute_line(p),
        _memory_line(p),
        _resume_line(p),
        _tracking_line(info["tracking"], info["run_dir"]),
        (f"throughput {info['throughput_per_min']:.1f} executions/min, "
         f"{_fmt(p.get('seconds_per_step'))} s/step{eta}"),
    ]
    for job in info["jobs"]:
        states = ", ".join(f"{n} {s}" for s, n in _count(job["states"]).items()) or \
            (job.get("final") or "not in squeue (over)")
        lines.append(f"slurm      {job['kind']} {job['job_id']} ({job['tasks']} task(s)): {states}")
    return "\n".join(line for line in lines if line)


def _world_model_line(progress: dict[str, Any]) -> str:
    """What the world model's answers were: fallbacks (unusable answers) and infrastructure failures."""
    wm = progress.get("world_model") or {}
    if not wm:
        return ""
    failures = ", ".join(f"{k.split(':', 1)[1]} {v:.0f}" for k, v in sorted(wm.items()) if k.startswith("failure:"))
    skipped = wm.get("precheck_skipped", 0)
    return (f"world model {wm.get('submissions', 0):.0f} submissions, {wm.get('calls', 0):.0f} calls, "
            f"{wm.get('verdict:fallback', 0):.0f} fallback verdicts, {wm.get('infrastructure_failures', 0):.0f} "
            f"infrastructure failures" + (f" ({failures})" if failures else "")
            + f", pre-check settled {wm.get('precheck_settled', 0):.0f}" + (f", skipped {skipped:.0f}" if skipped else "")
            + _memory_text(wm))


def _memory_text(wm: dict[str, Any]) -> str:
    """The executed-solution memory's share (world_model.memory): it answered the quality checks."""
    if "memory_solutions" not in wm:
        return ""
    return (f"; memory of {wm['memory_solutions']:.0f} executed solutions answered "
            f"{wm.get('memory_quality', 0):.0f} quality checks ({wm.get('memory_exact', 0):.0f} seen verbatim)")


def _resume_line(progress: dict[str, Any]) -> str:
    warning = progress.get("resume_warning")
    return f"resume     WARNING: {warning}" if warning else ""


def _tracking_line(tracking: dict[str, Any], run_dir: str) -> str:
    if not tracking.get("enabled"):
        return "tracking   off"
    where = f"MLflow run {tracking['mlflow_run_id'] or '(not created yet)'} at {tracking['uri']}"
    if not tracking["pending"]:
        return f"tracking   {where}: all {tracking['records']} record(s) sent"
    since = tracking.get("failing_since")
    why = f"; failing since {time.strftime('%H:%M:%S', time.localtime(since))}: {tracking['last_error'][:120]}" \
        if since and tracking.get("last_error") else ""
    return (f"tracking   {where}: {tracking['pending']} of {tracking['records']} record(s) NOT sent yet{why}; "
            f"they wait in {run_dir}/tracking/ (`wmrl sync {run_dir}` sends them)")


def _compute_line(progress: dict[str, Any]) -> str:
    """Compute spent so far, per phase, and whether it was measured or modelled."""
    phases = ", ".join(f"{name} {_fmt(progress.get(f'seconds_{name}'), '.0f')} s"
                       for name in ("generation", "world_model", "execution", "update"))
    line = (f"compute    {_fmt(progress.get('compute_hours'), '.3g')} h "
            f"({progress.get('cost_source', 'unknown')}): {phases}")
    if progress.get("cpu_hours") is not None:  # measured CPU time (RunTotals.cpu_seconds), since round 22
        line += (f"; CPU time {_fmt(progress['cpu_hours'], '.3g')} h (trainer "
                 f"{_fmt(progress.get('cpu_seconds_learner'), '.0f')} s, executed programs "
                 f"{_fmt(progress.get('cpu_seconds_execution'), '.0f')} s)")
    return line


def _memory_line(progress: dict[str, Any]) -> str:
    """Peak resident memory of the coordinator process (and of its largest ended child)."""
    if progress.get("peak_rss_mb") is None:
        return ""
    return (f"memory     coordinator peak RSS {progress['peak_rss_mb']:.0f} MB "
            f"(largest ended child process {_fmt(progress.get('peak_rss_children_mb'), '.0f')} MB)")


def _audit_line(progress: dict[str, Any]) -> str:
    """Assumption-6 audit of the last refit: can the debiasing correction be trusted?"""
    ok = progress.get("audit_ok")
    if ok is None:
        return "audit      not yet (runs at the end of warm-up, then every refit_every anchor pairs)"
    if not ok:
        return "audit      WARNING: " + " | ".join(progress.get("audit_warnings") or ["see logs/coordinator.log"])
    skipped = progress.get("audit_skipped") or []
    if skipped:
        return "audit      no warning; not checked: " + " | ".join(skipped)
    return "audit      ok: bias looks monotone and stationary, anchors cover the high scores"


def _count(states: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in states:
        out[s] = out.get(s, 0) + 1
    return out


# --------------------------------------------------------------------------- a sweep


def collect_sweep(root: Path) -> dict[str, Any]:
    """Each run of the sweep in its spec's order: its state as ``collect`` reads it (launch runs) or from
    its files (simulate runs), and the runs ``--rerun`` superseded."""
    sweep = SweepDir(root)
    state = sweep.read() or {}
    runs = []
    for name in state.get("runs", []):
        path = sweep.run_path(name)
        row: dict[str, Any] = {"name": name}
        if state.get("kind") == "simulate":
            row.update(_simulate_row(path))
        elif not (path / "config.yaml").exists():
            job = live_job(path)
            row["state"] = f"queued (Slurm job {job})" if job else "not started"
        else:
            info = collect(RunDir.open(path))
            p = info["progress"]
            row.update(state=info["state"], step=p.get("step"), total_steps=p.get("total_steps"),
                       eta_s=p.get("eta_s") if info["state"] == "running" else None, rho=p.get("rho"),
                       anchor_frac=p.get("anchor_frac"), cpu_hours=p.get("cpu_hours"),
                       scores={k: v for k, v in (p.get("last_eval") or {}).items()
                               if k.startswith("eval/") and k.count("/") == 2 and k.endswith("/score")})
        runs.append(row)
    return {"sweep_dir": str(root), "name": state.get("name"), "kind": state.get("kind"),
            "parent_run_id": state.get("parent_run_id"), "tracking_uri": state.get("tracking_uri"),
            "runs": runs, "superseded": state.get("superseded", [])}


def _simulate_row(path: Path) -> dict[str, Any]:
    if not (path / RESULT).exists():
        return {"state": "not computed"}
    try:
        result = read_json(path / RESULT)
    except (OSError, ValueError):
        return {"state": "result unreadable"}
    logged = (path / MLFLOW_DONE).exists()
    return {"state": "ended (finished)" if logged else "computed, not logged to MLflow (re-issue the sweep)",
            "step": len(result.get("history", {}).get("step", [])) or None,
            "scores": {"final/score": result.get("final_score")}}


def render_sweep(info: dict[str, Any]) -> str:
    rows = info["runs"]
    width = max([len(r["name"]) for r in rows] + [3])
    lines = [f"sweep      {info['name']} ({info['kind']}, {len(rows)} runs) in {info['sweep_dir']}"]
    if info.get("parent_run_id"):
        lines.append(f"mlflow     parent run {info['parent_run_id']} at {info['tracking_uri']}")
    lines.append(f"{'run':<{width}}  {'step':>7}  {'rho':>5}  {'anchors':>7}  {'CPU-h':>6}  last evaluation / state")
    for r in rows:
        step = f"{r.get('step') or 0}/{r['total_steps']}" if r.get("total_steps") else _fmt(r.get("step"), "d")
        scores = ", ".join(f"{k.split('/')[1]} {v:.3f}" for k, v in (r.get("scores") or {}).items() if v is not None)
        eta = f", ETA {format_duration(r['eta_s'])}" if r.get("eta_s") else ""
        lines.append(f"{r['name']:<{width}}  {step:>7}  {_fmt(r.get('rho'), '.2f'):>5}  "
                     f"{_fmt(r.get('anchor_frac'), '.0%'):>7}  {_fmt(r.get('cpu_hours'), '.3f'):>6}  "
                     f"{scores + '; ' if scores else ''}{r['state']}{eta}")
    counts = _count([_state_kind(r["state"]) for r in rows])
    lines.append("runs       " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for e in info["superseded"]:
        lines.append(f"superseded {e['name']} at {time.strftime('%Y-%m-%d %H:%M', time.gmtime(e['at']))} UTC "
                     f"({e['why']}); kept in {e['dir']}")
    return "\n".join(lines)


def _state_kind(state: str) -> str:
    """A run's state without its details, to count the sweep's runs by: finished, DEAD, running, ..."""
    if state == "ended (finished)":
        return "finished"
    if state.startswith("ended"):
        return "ended otherwise"
    return re.split(r"[:(]", state, maxsplit=1)[0].strip()


def run(args: argparse.Namespace) -> int:
    if (Path(args.run_dir) / SWEEP_FILE).exists():
        info = collect_sweep(Path(args.run_dir).absolute())
        print(json.dumps(info, indent=1, default=str) if args.json else render_sweep(info))
        return 0
    run_dir = RunDir.open(args.run_dir)  # not there: main() says so and exits 2
    info = collect(run_dir)
    print(json.dumps(info, indent=1, default=str) if args.json else render(info))
    return 0
