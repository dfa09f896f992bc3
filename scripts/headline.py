"""The headline comparison of the tiny default: wmrl against grpo_real, both reusing executions, paired by seed.

    wmrl sweep sweeps/headline_reuse.yaml --max-parallel 2
    python scripts/headline.py runs/sweeps/headline_reuse --out results/train

Reads the sweep's finished runs as ``scripts/train_learning.py`` does (same readers): per run the
training-task score after the last step (``sample_mean``: the mean over tasks x k samples of that
evaluation, really executed) and its CPU-hours (``compute_hours``: the measured seconds of every
phase). Writes ``OUT/headline.json`` and ``OUT/headline.md``:

- per variant: seeds, score mean ± s.e., CPU-hours of the runs and **one-time costs**: wmrl's
  executed-solution memory is built once per SFT build (its policy samples drawn, its own executions;
  ``RUN_DIR/memory_build.json``, written by the trainer), grpo_real needs nothing beyond the SFT, which
  both share (stated apart, not charged to either). ``cpu_hours_mean`` charges the whole one-time cost
  to each run (what one run from a fresh build pays: the headline's basis); ``cpu_hours_mean_amortised``
  spreads it over the sweep's runs of the variant.
- wmrl - grpo_real paired by seed (same seed = same start): mean, t-interval, t, p; and the design's
  power at true differences of 0.05 and 0.10 with the observed sd of the paired differences, and the
  seeds 80% power would need.
- ``sentence``: the README's headline sentence (``scripts/readme_numbers.py`` copies it in).
- the held-out tasks (the paper's metric; issue 35's transfer testbed, ``configs/tiny-transfer.yaml``):
  ``pool`` (its name and how many training and held-out tasks the runs evaluated), per variant the
  held-out score before and after (``heldout_before_mean``, ``heldout_after_mean`` ± ``heldout_after_se``)
  and the gain after - before paired by seed (``heldout_paired_gain_ci95``), and the share of distinct
  (task, code) among the executions (``distinct_code_share``, as ``scripts/execution_repeats.py`` counts
  them; the top-level one is grpo_real's, which executes every trajectory).

Runs whose memory was built by a wmrl that did not record the samples' draw yet: move the build's cached
samples aside (``~/.cache/wmrl/policy_samples/<key>.json``, the newest, with no ``<key>.cost.json``
beside it), run ``wmrl train train.steps=1 run_name=memory_build`` once on the same machine (the samples
are drawn again, the same seeds; their executions are read back from the outcome cache with the seconds
they were first run in), and pass ``--memory-build runs/memory_build/memory_build.json``.

A measurement longer than one machine's life: ``--save-records results/transfer/records`` writes each run's
record (every number this report reads from it: scores, held-out before and after, CPU-hours, execution
counts, anchor pairs, the memory's build; ``run_record``), to commit; a later report pools sweep
directories and record directories (``python scripts/headline.py runs/sweeps/transfer results/transfer/records
--out results/transfer``), each (variant, seed) once, refusing two different runs of one seed.

Every run must have ``launch.reuse_executions`` on (the fair baseline: any sane implementation runs an
identical code once); the script refuses a sweep where one has not.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_learning: the readers of a sweep's runs

import execution_repeats
import train_learning as tl

from wmrl.simulate.report import mean_se
from wmrl.sweep.paired import ALPHA, TARGET_POWER, paired, pairs_for_power, power

REPO = Path(__file__).resolve().parents[1]
REFERENCE, CANDIDATE = "grpo_real", "wmrl"
MEMORY_BUILD = "memory_build.json"  # wmrl.trainers.llm.MEMORY_BUILD (not imported: that pulls in torch)
INITIAL_POLICY = "initial_policy.json"  # wmrl.sft.pipeline.INITIAL_POLICY: {path, build_hash}
POWER_AT = (0.05, 0.10)


def final_train_score(run: Path) -> float:
    """The training-task score of the run's last evaluation (``after``), as learning.md reports it."""
    return float(tl.read_evals(run)[("after", "train")]["sample_mean"])


def heldout_score(run: Path, label: str = "after") -> float | None:
    """The held-out score of the run's evaluation ``label`` (``before`` step 0, ``after`` the last)."""
    e = tl.read_evals(run).get((label, "heldout"))
    return None if e is None else float(e["sample_mean"])


def evaluated_tasks(run: Path, split: str) -> int:
    """How many tasks of ``split`` the run's last evaluation scored (all of them unless train.eval_tasks)."""
    e = tl.read_evals(run).get(("after", split))
    return 0 if e is None else len(e["tasks"])


def anchor_pairs(run: Path) -> list[list[Any]] | None:
    """The run's anchor pairs as ``[group_id, r_hat, r]``, the first record of each id (the pool's rule);
    None when the run has no calibration log (not a wmrl run)."""
    from wmrl.calibration.pool import LOG_NAME, read_log

    if not (run / "calibration" / LOG_NAME).is_file():
        return None
    seen: dict[str, Any] = {}
    for _, batch, _ in read_log(run / "calibration"):
        for pair in batch:
            seen.setdefault(pair.pair_id, pair)
    return [[p.group_id, float(p.predicted), float(p.true)] for p in seen.values()]


def cpu_time_hours(run: Path) -> float | None:
    """The run's measured CPU time over its steps (``cpu_hours``: the trainer process's and the executed
    programs', RunTotals): None for a run from before round 22, which measured wall seconds only."""
    last = None
    for line in (run / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            last = json.loads(line)
    return None if last is None or last.get("cpu_hours") is None else float(last["cpu_hours"])


def run_record(run: Path, variant: str) -> dict[str, Any]:
    """Everything the headline reads from one finished run, in one small JSON object: what
    ``--save-records`` commits, so that a measurement spread over machines (whose run directories do not
    survive) still pools every seed it ran, each once."""
    cfg = tl.run_config(run)
    counts = execution_repeats.repeats(run)
    memory = run / MEMORY_BUILD
    return {"variant": variant, "seed": int(cfg["algorithm"]["seed"]), "run": run.name,
            "reuse_executions": bool(cfg["launch"].get("reuse_executions")),
            "initial_policy": (json.loads((run / INITIAL_POLICY).read_text()).get("build_hash")
                               if (run / INITIAL_POLICY).is_file() else None),
            "pool": cfg["tasks"].get("pool", "builtin"), "steps": int(cfg["train"]["steps"]),
            "train_tasks": evaluated_tasks(run, "train"), "heldout_tasks": evaluated_tasks(run, "heldout"),
            "score": final_train_score(run), "heldout_before": heldout_score(run, "before"),
            "heldout_after": heldout_score(run), "run_cpu_hours": tl.cost_curve(run)[0],
            "cpu_time_hours": cpu_time_hours(run),
            "executions": counts["executions"], "distinct_codes": counts["distinct"],
            "anchor_pairs": anchor_pairs(run),
            "memory_build": json.loads(memory.read_text()) if memory.is_file() else None,
            "source": f"run directory {run}"}


Records = dict[str, list[dict[str, Any]]]  # variant -> its runs' records, in seed order
SAME_RUN = ("score", "heldout_before", "heldout_after", "run_cpu_hours")  # what a second copy must repeat


def read_sources(sources: list[Path]) -> Records:
    """The records of every source: a sweep directory (its finished runs, read now) or a directory of
    records ``--save-records`` wrote. A (variant, seed) found twice is one run read twice when its numbers
    agree (kept once), and refused when they do not (two runs of one seed would be double-counted)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for source in sources:
        if (source / "runs").is_dir():
            records = [run_record(run, variant) for variant, runs in tl.finished_runs([source]).items()
                       for run in runs]
        elif source.is_dir():
            records = [read_record(p) for p in sorted(source.glob("*.json"))]
        else:
            raise SystemExit(f"{source}: neither a sweep directory (with runs/) nor a directory of run records")
        for r in records:
            key = (r["variant"], int(r["seed"]))
            other = found.setdefault(key, r)
            if other is not r and any(other[k] != r[k] for k in SAME_RUN):
                raise SystemExit(f"{r['variant']} seed {r['seed']} twice, with different numbers: {other['source']} "
                                 f"and {r['source']}; keep one")
    by_variant: Records = {}
    for (variant, _), r in sorted(found.items()):
        by_variant.setdefault(variant, []).append(r)
    return by_variant


RECORD_KEYS = ("variant", "seed", "run", "reuse_executions", "initial_policy", "steps", *SAME_RUN)


def read_record(path: Path) -> dict[str, Any]:
    """One record ``--save-records`` wrote; anything else in the directory is an error that names it."""
    try:
        record = json.loads(path.read_text())
    except ValueError as err:
        raise SystemExit(f"{path}: not a run record (not JSON: {err})") from None
    missing = [k for k in RECORD_KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise SystemExit(f"{path}: not a run record (no {', '.join(missing)}); a records directory holds only "
                         "the files --save-records wrote")
    return {**record, "source": f"record {path}"}


def save_records(records: Records, out: Path) -> None:
    """One ``<variant>-s<seed>.json`` per run (the path it was read from left out: it does not travel)."""
    out.mkdir(parents=True, exist_ok=True)
    for rs in records.values():
        for r in rs:
            body = {k: v for k, v in r.items() if k != "source"}
            (out / f"{r['variant']}-s{r['seed']}.json").write_text(json.dumps(body, indent=1) + "\n")


def distinct_code_share(records: list[dict[str, Any]]) -> float | None:
    """Distinct (task, code) among the runs' executions, each run counted on its own (a code two runs both
    executed counts in each); None without counted executions (records that lost their rollouts count none)."""
    counted = [r for r in records if r.get("executions")]
    executions = sum(r["executions"] for r in counted)
    return sum(r["distinct_codes"] for r in counted) / executions if executions else None


def heldout_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The held-out score before and after, and the gain paired by seed (the same run before and after)."""
    seeds = [r["seed"] for r in records]
    before = {r["seed"]: r["heldout_before"] for r in records if r["heldout_before"] is not None}
    after = {r["seed"]: r["heldout_after"] for r in records if r["heldout_after"] is not None}
    (after_mean, after_se), gain = mean_se(list(after.values())), paired(before, after)
    return {"heldout_before_mean": mean_se(list(before.values()))[0] if before else None,
            "heldout_after_mean": after_mean if after else None, "heldout_after_se": after_se if after else None,
            "heldout_before_per_seed": [before.get(s) for s in seeds],
            "heldout_after_per_seed": [after.get(s) for s in seeds],
            "heldout_paired_gain_mean": gain.mean, "heldout_paired_gain_ci95": list(gain.ci95)}


def world_model_in_run(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How well the run's world model ranked what the policy really wrote: its anchor pairs (r_hat, r), on the
    training tasks (the anchor groups), pooled over the runs that kept them. None when none has any.

    ``spearman_per_run``: rank correlation of r_hat with r in each run; ``within_group_concordance``: of the
    pairs of trajectories of one group with different real scores, the share r_hat orders the same way (what
    a group-relative advantage needs); ``verbatim_share``: pairs with r_hat == r (the memory answered with
    the real score of that very code); ``bias_mean``: mean r_hat - r (what the calibration must remove)."""
    from scipy.stats import spearmanr

    per_run, every, agree, total = [], [], 0, 0
    for record in records:
        pairs = record.get("anchor_pairs")
        if not pairs:
            continue
        if len(pairs) >= 3:
            per_run.append(float(spearmanr([p[1] for p in pairs], [p[2] for p in pairs])[0]))
        groups: dict[str, list[Any]] = {}
        for p in pairs:
            groups.setdefault(p[0], []).append(p)
        for members in groups.values():
            for a, (_, x_hat, x) in enumerate(members):
                for _, y_hat, y in members[a + 1:]:
                    if x != y:
                        total += 1
                        agree += bool(np.sign(x_hat - y_hat) == np.sign(x - y))
        every += pairs
    if not every:
        return None
    predicted, true = np.array([p[1] for p in every]), np.array([p[2] for p in every])
    return {"what": "anchor pairs (r_hat, r) of the runs, on training tasks", "runs": len(per_run),
            "pairs": len(every), "spearman_per_run": per_run,
            "spearman_mean": float(np.mean(per_run)) if per_run else None,
            "within_group_concordance": agree / total if total else None, "within_group_pairs": total,
            "verbatim_share": float(np.mean(np.abs(predicted - true) < 1e-6)),
            "bias_mean": float(np.mean(predicted - true)), "valid_share": float(np.mean(true > 0))}


def memory_build_hours(records: list[dict[str, Any]], record: Path | None) -> tuple[float, dict[str, Any]]:
    """(CPU-hours, the record) of the memory's one-time build of these runs (one initial policy): generation
    of its policy samples plus its own executions. ``record`` (a ``memory_build.json``) overrides theirs."""
    found = ([json.loads(record.read_text())] if record else
             [r["memory_build"] for r in records if r.get("memory_build")])
    timed = [f for f in found if f.get("seconds_generation") is not None]
    if not timed:
        raise SystemExit(
            f"no {MEMORY_BUILD} with the samples' generation seconds in the {CANDIDATE} runs: their memory was "
            "built before it was recorded. Re-measure it (see this script's docstring) and pass that run's "
            f"{MEMORY_BUILD} with --memory-build, or give --one-time-cpu-hours and --one-time-source")
    builds = {f.get("build") for f in found}
    if len(builds) > 1:
        raise SystemExit(f"the {CANDIDATE} runs' memories were built from different SFTs: {sorted(map(str, builds))}")
    first = timed[0]
    seconds = float(first["seconds_generation"]) + float(first.get("seconds_execution", 0.0))
    # measured CPU time (since round 23: the draw's process CPU and the programs' own), None before
    cpu = [first.get("cpu_seconds_generation"), first.get("cpu_seconds_execution")]
    return seconds / 3600, {**first, "cpu_time_hours": None if None in cpu else sum(cpu) / 3600,
                            "source": str(record) if record else f"the {CANDIDATE} runs' {MEMORY_BUILD}"}


def starts_by_seed(runs: Records) -> dict[str, list[int]]:
    """The initial policies the runs started from, each with its seeds. A seed pairs only when both variants
    started from one policy; seeds may differ (an SFT built on another kind of machine is another build:
    results/reproducibility/README.md), which is a nuisance factor like the seed itself."""
    by_seed: dict[int, set[str | None]] = {}
    for v in (REFERENCE, CANDIDATE):
        for r in runs[v]:
            by_seed.setdefault(r["seed"], set()).add(r["initial_policy"])
    mixed = {seed: sorted(map(str, starts)) for seed, starts in by_seed.items() if len(starts) > 1}
    if mixed:
        raise SystemExit("the runs did not start from one initial policy: "
                         + "; ".join(f"seed {seed}: {', '.join(st)}" for seed, st in sorted(mixed.items())))
    out: dict[str, list[int]] = {}
    for seed, (start,) in sorted(by_seed.items()):
        out.setdefault(str(start), []).append(seed)
    return out


def one_time_costs(runs: list[dict[str, Any]], starts: dict[str, list[int]], memory_record: Path | None,
                   one_time: tuple[float, str] | None) -> tuple[list[float], float, dict[str, Any]]:
    """wmrl's one-time cost: (each run's, charged whole to it; the sweep's total; what it was): one memory
    build per initial policy, charged to the runs that started from it."""
    if one_time is not None:
        return [one_time[0]] * len(runs), one_time[0] * len(starts), {"source": one_time[1]}
    if memory_record is not None and len(starts) > 1:
        raise SystemExit("--memory-build gives one build; these runs started from "
                         f"{len(starts)} initial policies: {', '.join(starts)}")
    hours, builds = {}, {}
    for start in starts:
        hours[start], builds[start] = memory_build_hours([r for r in runs if str(r["initial_policy"]) == start],
                                                         memory_record)
        built = builds[start].get("build")
        if built and start != "None" and built != start:
            raise SystemExit(f"the memory build {built} is not of the runs' initial policy {start}")
    first = builds[next(iter(starts))]
    detail = first if len(starts) == 1 else {**first, "per_initial_policy": {
        start: {**builds[start], "cpu_hours": hours[start]} for start in starts}}
    return [hours[str(r["initial_policy"])] for r in runs], sum(hours.values()), detail


def variant_summary(records: list[dict[str, Any]], one_time_per_run: list[float] | None = None,
                    one_time_total: float = 0.0) -> dict[str, Any]:
    """One variant's numbers; ``one_time_per_run``: each run's one-time cost charged whole to it (the
    headline's basis), ``one_time_total``: the sweep's one-time costs, spread over its runs (amortised)."""
    scores, hours = [r["score"] for r in records], [r["run_cpu_hours"] for r in records]
    (score, score_se), (run_hours, run_hours_se) = mean_se(scores), mean_se(hours)
    one_time_hours = float(np.mean(one_time_per_run)) if one_time_per_run else 0.0
    heldout = heldout_summary(records)
    cpu_time = {r["seed"]: r["cpu_time_hours"] for r in records if r.get("cpu_time_hours") is not None}
    return {"seeds": [r["seed"] for r in records], "score_mean": score, "score_se": score_se,
            "score_per_seed": scores, "heldout_score_mean": heldout["heldout_after_mean"], **heldout,
            "distinct_code_share": distinct_code_share(records),
            "distinct_code_runs": sum(bool(r.get("executions")) for r in records),
            "steps": records[0]["steps"],
            "run_cpu_hours_mean": run_hours, "run_cpu_hours_se": run_hours_se, "run_cpu_hours_per_seed": hours,
            "one_time_cpu_hours": one_time_hours,
            # measured CPU time (load-independent), for the runs that measured it (since round 22)
            "run_cpu_time_hours_by_seed": cpu_time,
            "cpu_hours_mean": run_hours + one_time_hours,
            "cpu_hours_mean_amortised": run_hours + one_time_total / len(records)}


def cpu_time_ratio(ref: dict[str, Any], cand: dict[str, Any], one_time_hours: float | None) -> dict[str, Any] | None:
    """wmrl's run CPU time over grpo_real's, on the seeds where both runs measured it (None: no such seed);
    unlike the wall-clock CPU-hours, not inflated by whatever else ran on the machine. With the memory's
    build measured in CPU time too (``one_time_hours``), the ratio with it charged to each run as well."""
    a, b = ref["run_cpu_time_hours_by_seed"], cand["run_cpu_time_hours_by_seed"]
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    ref_mean, cand_mean = float(np.mean([a[s] for s in seeds])), float(np.mean([b[s] for s in seeds]))
    out = {"seeds": seeds, "grpo_real_hours_mean": ref_mean, "wmrl_hours_mean": cand_mean,
           "ratio": cand_mean / ref_mean, "one_time_hours": one_time_hours}
    if one_time_hours is not None:
        out["ratio_with_one_time"] = (cand_mean + one_time_hours) / ref_mean
    return out


def headline(sources: list[Path] | Path, memory_record: Path | None = None,
             one_time: tuple[float, str] | None = None, sft_cpu_hours: float | None = None,
             records: Records | None = None) -> dict[str, Any]:
    sources = [sources] if isinstance(sources, Path) else sources
    runs = read_sources(sources) if records is None else records
    missing = [v for v in (REFERENCE, CANDIDATE) if v not in runs]
    if missing:
        raise SystemExit(f"no finished {' or '.join(missing)} run in {', '.join(map(str, sources))}")
    off = [r["run"] for v in (REFERENCE, CANDIDATE) for r in runs[v]
           if not r["reuse_executions"]]
    if off:
        raise SystemExit(f"launch.reuse_executions is off in {', '.join(off)}: not the fair baseline")
    starts = starts_by_seed(runs)  # a seed is the same start for both variants only from one initial policy
    per_run, total, build = one_time_costs(runs[CANDIDATE], starts, memory_record, one_time)
    ref = variant_summary(runs[REFERENCE])
    cand = variant_summary(runs[CANDIDATE], per_run, total)
    cand["one_time"] = {"what": "the executed-solution memory's build: its policy samples drawn and its own "
                                "executions (once per SFT build)", **build}
    ref["one_time"] = {"what": "none beyond the SFT, which both variants share"}
    diff = paired(dict(zip(ref["seeds"], ref["score_per_seed"])), dict(zip(cand["seeds"], cand["score_per_seed"])))
    heldout_diff = paired(*({s: x for s, x in zip(v["seeds"], v["heldout_after_per_seed"]) if x is not None}
                            for v in (ref, cand)))
    if heldout_diff.n:  # wmrl - grpo_real on the held-out tasks after training (the paper's metric)
        cand.update(heldout_paired_diff=heldout_diff.to_dict(),
                    heldout_within_1se_of_grpo_real=bool(heldout_diff.n >= 2
                                                         and heldout_diff.mean >= -heldout_diff.se))
    cand["world_model_in_run"] = world_model_in_run(runs[CANDIDATE])
    cand.update(paired_diff_mean=diff.mean, paired_diff_ci95=list(diff.ci95), paired=diff.to_dict(),
                cpu_hours_vs_grpo_real=cand["cpu_hours_mean"] / ref["cpu_hours_mean"],
                cpu_hours_vs_grpo_real_amortised=cand["cpu_hours_mean_amortised"] / ref["cpu_hours_mean_amortised"],
                run_cpu_hours_vs_grpo_real=cand["run_cpu_hours_mean"] / ref["run_cpu_hours_mean"],
                run_cpu_time_vs_grpo_real=cpu_time_ratio(ref, cand, build.get("cpu_time_hours")))
    design = {"alpha": ALPHA, "test": "two-sided paired t-test, n - 1 degrees of freedom",
              "pairs": diff.n, "sd_paired_diff": diff.sd,
              "power": {f"{d:.2f}": power(d, diff.sd, diff.n) for d in POWER_AT},
              f"pairs_for_{TARGET_POWER:.0%}_power": {f"{d:.2f}": pairs_for_power(d, diff.sd) for d in POWER_AT}}
    first = runs[REFERENCE][0]
    pool = {"name": first["pool"], "train_tasks": first["train_tasks"], "heldout_tasks": first["heldout_tasks"]}
    out = {"reuse_executions": True, "sweep": " + ".join(s.name for s in sources),
           "initial_policy": next(iter(starts)) if len(starts) == 1 else sorted(starts), "initial_policy_seeds": starts,
           "pool": pool, "distinct_code_share": ref["distinct_code_share"],
           "distinct_code_share_of": f"{REFERENCE}'s executions (every trajectory of its runs executed; "
                                     f"{ref['distinct_code_runs']} of its {len(ref['seeds'])} runs kept them)",
           "score": "training-task score after the last step: mean over the evaluated samples (tasks x k), really "
                    "executed; mean ± standard error over seeds",
           "cost": "CPU-hours: the measured seconds of every phase / 3600 (one torch thread per run)",
           "cost_basis": "per_run",
           "cost_basis_note": "cpu_hours_mean charges each variant's whole one-time cost to every run (what one run "
                              "from a fresh build pays); cpu_hours_mean_amortised spreads it over the sweep's runs",
           "shared_one_time": {"sft_cpu_hours": sft_cpu_hours,
                               "note": "the SFT (its examples and training) is shared by both variants and charged "
                                       "to neither"},
           "variants": {REFERENCE: ref, CANDIDATE: cand}, "design": design}
    out["sentence"] = sentence(out)
    return out


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _number(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def sentence(h: dict[str, Any]) -> str:
    """The README's headline: what was compared, the paired difference with its interval, the costs."""
    ref, cand, design = h["variants"][REFERENCE], h["variants"][CANDIDATE], h["design"]
    lo, hi = cand["paired_diff_ci95"]
    power_text = ", ".join(f"{p:.0%} at {d}" for d, p in design["power"].items() if math.isfinite(p))
    return (f"Over {len(cand['seeds'])} seeds, both variants reusing executions, wmrl's {cand['steps']} steps reach "
            f"{cand['score_mean']:.3f} ± {cand['score_se']:.3f} on the training tasks against grpo_real's "
            f"{ref['score_mean']:.3f} ± {ref['score_se']:.3f} (paired by seed: {cand['paired_diff_mean']:+.3f}, "
            f"95% CI [{lo:+.3f}, {hi:+.3f}]; the design's power {power_text}), at "
            f"{_pct(cand['cpu_hours_vs_grpo_real'])} of grpo_real's CPU-hours with the memory's one-time build "
            f"({cand['one_time_cpu_hours']:.3f} CPU-hours) charged to each run, "
            f"{_pct(cand['cpu_hours_vs_grpo_real_amortised'])} spread over the sweep's {len(cand['seeds'])} runs.")


def markdown(h: dict[str, Any], command: str) -> str:
    ref, cand, design = h["variants"][REFERENCE], h["variants"][CANDIDATE], h["design"]
    rows = [("| variant | seeds | training-task score (mean ± s.e.) | CPU-hours of a run | one-time CPU-hours | "
             "CPU-hours per run, one-time charged to each (headline) | one-time spread over the sweep |"),
            "|---|---|---|---|---|---|---|"]
    for name, v in ((REFERENCE, ref), (CANDIDATE, cand)):
        rows.append(f"| {name} | {len(v['seeds'])} | {v['score_mean']:.3f} ± {v['score_se']:.3f} | "
                    f"{v['run_cpu_hours_mean']:.3f} ± {v['run_cpu_hours_se']:.3f} | {v['one_time_cpu_hours']:.3f} | "
                    f"{v['cpu_hours_mean']:.3f} | {v['cpu_hours_mean_amortised']:.3f} |")
    p = cand["paired"]
    lo, hi = p["ci95"]
    power_rows = [f"| {d} | {pw:.0%} | {design[f'pairs_for_{TARGET_POWER:.0%}_power'][d]} |"
                  for d, pw in design["power"].items()]
    sft = h["shared_one_time"]["sft_cpu_hours"]
    paired_line = (f"**wmrl - grpo_real, paired by seed** (same seed = same start): {p['mean']:+.4f} (sd {p['sd']:.4f}, "
                   f"{p['n']} pairs), 95% t-interval [{lo:+.4f}, {hi:+.4f}], t = {p['t']:.2f}, p = {p['p']:.2f}.")
    cost_line = (f"CPU-hours, wmrl / grpo_real: **{cand['cpu_hours_vs_grpo_real']:.0%}** with the one-time cost "
                 f"charged to each run (the headline's basis), {cand['cpu_hours_vs_grpo_real_amortised']:.0%} spread "
                 f"over the sweep, {cand['run_cpu_hours_vs_grpo_real']:.0%} without it.")
    measured = cand["run_cpu_time_vs_grpo_real"]
    if measured is not None:
        cost_line += (f" Measured CPU time of a run (the trainer process and the executed programs; not inflated "
                      f"by load; seeds {', '.join(map(str, measured['seeds']))}): wmrl {measured['wmrl_hours_mean']:.3f} h, "
                      f"grpo_real {measured['grpo_real_hours_mean']:.3f} h, **{measured['ratio']:.2f}x** before "
                      "the one-time cost" + ("." if measured["one_time_hours"] is None else
                                             f", **{measured['ratio_with_one_time']:.2f}x** with the memory's build "
                                             f"({measured['one_time_hours']:.3f} h of CPU time) charged to each run."))
    one_time_line = (f"One-time costs: wmrl: {cand['one_time']['what']} ({cand['one_time']['source']}); grpo_real: "
                     f"{ref['one_time']['what']}. SFT: "
                     + (f"{sft:.3f} CPU-hours, " if sft is not None else "not measured here, ")
                     + "shared, charged to neither.")
    if len(h["initial_policy_seeds"]) > 1:
        one_time_line += (" Initial policies (each seed's runs share one; each build's memory is charged to its "
                          "own runs): " + "; ".join(f"`{start[:16]}` seeds {', '.join(map(str, seeds))}"
                                                    for start, seeds in h["initial_policy_seeds"].items()) + ".")
    power_line = (f"The design's power ({design['test']}, alpha {design['alpha']}, the observed sd of the paired "
                  "differences):")
    pool = h["pool"]
    heldout_rows = [(f"Held-out tasks ({pool['heldout_tasks']} of the `{pool['name']}` pool; {pool['train_tasks']} "
                     "training tasks): score before -> after (mean ± s.e.), gain after - before paired by seed "
                     "(95% t-interval), share of distinct codes among the executions:"), "",
                    "| variant | held-out before | held-out after | paired gain, 95% CI | distinct codes |",
                    "|---|---|---|---|---|"]
    for name, v in ((REFERENCE, ref), (CANDIDATE, cand)):
        glo, ghi = v["heldout_paired_gain_ci95"]
        share, counted = v["distinct_code_share"], v["distinct_code_runs"]
        of_runs = "" if counted == len(v["seeds"]) else f" ({counted} of {len(v['seeds'])} runs)"
        heldout_rows.append(f"| {name} | {_number(v['heldout_before_mean'])} | {_number(v['heldout_after_mean'])} ± "
                            f"{_number(v['heldout_after_se'])} | [{glo:+.3f}, {ghi:+.3f}] | "
                            f"{'-' if share is None else _pct(share) + of_runs} |")
    d = cand.get("heldout_paired_diff")
    if d:
        verdict = "within" if cand["heldout_within_1se_of_grpo_real"] else "not within"
        heldout_rows += ["", (f"Held-out after, {CANDIDATE} - {REFERENCE} paired by seed ({d['n']} pairs): "
                              f"{d['mean']:+.3f} ± {d['se']:.3f} (s.e.), 95% CI [{d['ci95'][0]:+.3f}, "
                              f"{d['ci95'][1]:+.3f}]: {verdict} 1 s.e. of {REFERENCE}.")]
    wm = cand.get("world_model_in_run")
    if wm:
        conc = wm["within_group_concordance"]
        heldout_rows += ["", (f"The world model in the {CANDIDATE} runs ({wm['what']}; {wm['pairs']} pairs, "
                              f"{wm['runs']} runs): Spearman(r_hat, r) {_number(wm['spearman_mean'])} (mean over "
                              f"runs), within-group order right for {'-' if conc is None else _pct(conc)} of "
                              f"{wm['within_group_pairs']} pairs of trajectories with different real scores, "
                              f"{_pct(wm['verbatim_share'])} answered verbatim (the memory held that code), "
                              f"mean r_hat - r {wm['bias_mean']:+.3f} before calibration.")]
    return "\n".join([
        "# The headline: wmrl against grpo_real, both reusing executions", "",
        f"Report: `{command}`. {h['score']}. {h['cost']}.", "",
        *rows, "", paired_line, "", cost_line, "", one_time_line, "", *heldout_rows, "", power_line, "",
        f"| true difference | power with {design['pairs']} pairs | pairs for {TARGET_POWER:.0%} power |", "|---|---|---|",
        *power_rows, "",
        "Headline sentence (README): " + h["sentence"], ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path,
                        help="sweep directories (runs/sweeps/headline_reuse) and directories of run records "
                             "(--save-records), pooled; a run found twice counts once")
    parser.add_argument("--save-records", type=Path, metavar="DIR",
                        help="write each pooled run's record to DIR (<variant>-s<seed>.json), to commit: a run "
                             "directory does not outlive its machine, its record does")
    parser.add_argument("--out", default=str(REPO / "results" / "train"))
    parser.add_argument("--memory-build", type=Path, help=f"a {MEMORY_BUILD} to read the one-time cost from "
                        f"(default: the {CANDIDATE} runs' own)")
    parser.add_argument("--one-time-cpu-hours", type=float, help="wmrl's one-time CPU-hours, measured elsewhere")
    parser.add_argument("--one-time-source", default="", help="where --one-time-cpu-hours was measured")
    parser.add_argument("--sft-cpu-hours", type=float, help="the shared SFT's CPU-hours, to state (charged to neither)")
    args = parser.parse_args(argv)
    if (args.one_time_cpu_hours is None) != (not args.one_time_source):
        parser.error("--one-time-cpu-hours and --one-time-source go together")
    one_time = None if args.one_time_cpu_hours is None else (args.one_time_cpu_hours, args.one_time_source)
    records = read_sources(args.sources)
    if args.save_records:
        save_records(records, args.save_records)
    h = headline(args.sources, args.memory_build, one_time, args.sft_cpu_hours, records=records)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "headline.json").write_text(json.dumps(h, indent=1, default=_json_default) + "\n")
    command = "python scripts/headline.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    (out / "headline.md").write_text(markdown(h, command))
    print(h["sentence"])
    return 0


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")


if __name__ == "__main__":
    sys.exit(main())
