"""``wmrl status RUN_DIR``: step, queue depth, live workers, last refit, rho, throughput, ETA."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from wmrl.config import load_config
from wmrl.io import read_json
from wmrl.orchestration.coordinator import PROGRESS
from wmrl.orchestration.rundir import RunDir
from wmrl.orchestration.service import live_workers, throughput_per_min
from wmrl.orchestration.spool import Spool


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="show a run's progress, queue, workers and calibration")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def collect(run: RunDir) -> dict[str, Any]:
    """Everything status shows, from files only (and squeue when the run has Slurm jobs)."""
    cfg = load_config(run.config_path)
    spool = Spool(run, cfg.launch.max_attempts)
    try:
        progress = read_json(run.path / PROGRESS)
    except (OSError, ValueError):
        progress = {}
    info: dict[str, Any] = {
        "run_dir": str(run.path), "ended": run.ended_reason() if run.is_ended() else None,
        "progress": progress, "queue": spool.counts(),
        "live_workers": live_workers(run, cfg.launch.lease_s),
        "throughput_per_min": throughput_per_min(spool), "jobs": [],
    }
    from wmrl.orchestration.slurm import job_states, load_jobs

    records = load_jobs(run)
    if records:
        try:
            states = job_states([r.job_id for r in records])
        except (OSError, RuntimeError) as err:
            states = {}
            info["squeue_error"] = str(err)
        for r in records:
            info["jobs"].append({"kind": r.kind, "job_id": r.job_id, "tasks": r.n_tasks,
                                 "states": states.get(r.job_id, [])})
    return info


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%H:%M:%S", time.gmtime(max(0.0, seconds))) if seconds < 86400 else f"{seconds / 86400:.1f} d"


def render(info: dict[str, Any], brief: bool = False) -> str:
    p, q = info["progress"], info["queue"]
    state = f"ended ({info['ended']})" if info["ended"] else p.get("state", "not started")
    step = f"{p.get('step', 0)}/{p.get('total_steps', '?')}"
    if brief:
        return (f"[{time.strftime('%H:%M:%S')}] {state}: step {step}, queue {q['queued']} waiting / "
                f"{q['claimed']} running / {q['done']} done, {info['live_workers']} workers, rho {_fmt(p.get('rho'))}")
    age = time.time() - p["updated_at"] if "updated_at" in p else None
    lines = [
        f"run        {info['run_dir']}",
        f"state      {state}" + (f" (updated {age:.0f} s ago)" if age is not None else ""),
        f"step       {step}   checkpoint at step {_fmt(p.get('checkpoint_step'), 'd')}",
        f"queue      {q['queued']} waiting, {q['claimed']} running, {q['done']} done, {q['quarantined']} quarantined",
        f"workers    {info['live_workers']} live",
        (f"calibration rho {_fmt(p.get('rho'))}, pairs {_fmt(p.get('n_pairs'), '.0f')}, refits "
         f"{_fmt(p.get('n_refits'), '.0f')} (last at step {_fmt(p.get('last_refit_step'), 'd')}), "
         f"eta2 {_fmt(p.get('eta2'))}"),
        _audit_line(p),
        _compute_line(p),
        (f"throughput {info['throughput_per_min']:.1f} executions/min, "
         f"{_fmt(p.get('seconds_per_step'))} s/step, ETA {_duration(p.get('eta_s'))}"),
    ]
    for job in info["jobs"]:
        states = ", ".join(f"{n} {s}" for s, n in _count(job["states"]).items()) or "not in squeue (over)"
        lines.append(f"slurm      {job['kind']} {job['job_id']} ({job['tasks']} task(s)): {states}")
    return "\n".join(lines)


def _compute_line(progress: dict[str, Any]) -> str:
    """Compute spent so far, per phase, and whether it was measured or modelled."""
    phases = ", ".join(f"{name} {_fmt(progress.get(f'seconds_{name}'), '.0f')} s"
                       for name in ("generation", "world_model", "execution", "update"))
    return (f"compute    {_fmt(progress.get('compute_hours'), '.3g')} h "
            f"({progress.get('cost_source', 'unknown')}): {phases}")


def _audit_line(progress: dict[str, Any]) -> str:
    """Assumption-6 audit of the last refit: can the debiasing correction be trusted?"""
    ok = progress.get("audit_ok")
    if ok is None:
        return "audit      not yet (runs at each refit of the debiasing map)"
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


def run(args: argparse.Namespace) -> int:
    try:
        run_dir = RunDir.open(args.run_dir)
    except FileNotFoundError as err:
        print(f"wmrl status: {err}", file=sys.stderr)
        return 2
    info = collect(run_dir)
    print(json.dumps(info, indent=1, default=str) if args.json else render(info))
    return 0
