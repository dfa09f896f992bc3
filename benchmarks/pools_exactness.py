"""wmrl's grade vs MLE-Dojo's and MLE-bench's own code, submission by submission.

Competitions are laid out as the benchmarks' prepare steps write them (``wmrl.tasks.fixtures``:
their real boards, synthetic answers); wmrl loads them through the registry from the real
``utils/metric.py`` of the MLE-Dojo clone. For each competition, >= 20 submissions: best, worst,
exact ties with board entries (found by searching the submission's one parameter), near-ties within
1e-6 relative on both sides, below the last entry, unnormalised probabilities. The reference is
``benchmarks/pools_reference.py`` (the benchmarks' code from their clones).

    python benchmarks/pools_exactness.py --mledojo-repo CLONE --mlebench-repo CLONE [--out results/pools]

Writes OUT/exactness.csv and OUT/exactness.md.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pools_reference import MLEBench, MLEDojo, parse_repos

from wmrl.grading.grader import grade_submission
from wmrl.tasks.fixtures import FIXTURES, make_mlebench_competition, make_mledojo_competition
from wmrl.tasks.layouts import LoadOptions, load_task
from wmrl.tasks.task import Task

Family = Callable[[float], pd.DataFrame]


def _closest(family: Family, score: Callable[[pd.DataFrame], float], target: float, lo: float, hi: float) -> float:
    """The parameter whose submission scores ``target`` exactly if one exists near the bisection's answer."""
    increasing = score(family(hi)) > score(family(lo))
    for _ in range(200):
        mid = (lo + hi) / 2
        if (score(family(mid)) < target) == increasing:
            lo = mid
        else:
            hi = mid
    best = lo
    for theta in (lo, hi):
        probe = theta
        for step in range(64):
            probe = np.nextafter(probe, hi if step < 32 else lo) if step != 32 else theta
            if score(family(probe)) == target:
                return float(probe)
        if abs(score(family(theta)) - target) < abs(score(family(best)) - target):
            best = theta
    return float(best)


def _log_loss_cases(truth: pd.DataFrame, targets: tuple[str, ...], board: np.ndarray, score) -> list[tuple[str, pd.DataFrame]]:
    t = truth[list(targets)].to_numpy(float)

    def conf(p: float, scale: float = 1.0) -> pd.DataFrame:
        out = truth.copy()
        out[list(targets)] = np.where(t == 1, p, (1 - p) / (len(targets) - 1)) * scale
        return out

    ranked = np.sort(board)
    mixed = conf(0.9)
    mixed.loc[mixed.index % 2 == 1, list(targets)] = 1 / len(targets)
    cases = [("best: one-hot answers", conf(1.0)), ("worst: 0 on the true class", conf(0.0)),
             ("uniform", conf(1 / len(targets))), ("mixed confident/uniform", mixed)]
    cases += [(f"p_true={p}", conf(p)) for p in (0.35, 0.5, 0.7, 0.9, 0.97, 0.995)]
    for name, entry in (("top", ranked[0]), ("position 12", ranked[11]), ("position 62", ranked[61]),
                        ("position 124", ranked[123]), ("median", np.median(ranked)), ("last", ranked[-1])):
        for label, target in (("tie", entry), ("near-tie worse (+5e-7 rel)", entry * (1 + 5e-7)),
                              ("near-tie better (-5e-7 rel)", entry * (1 - 5e-7))):
            if label != "tie" and name not in ("top", "position 12"):
                continue
            cases.append((f"{label} {name} {entry:g}", conf(_closest(conf, score, target, 1e-300, 1.0)), target))
    cases += [("unnormalised rows (sum 0.7)", conf(0.7, 0.7)), ("unnormalised rows (sum 1.3)", conf(0.7, 1.3))]
    return cases


def _rmse_cases(truth: pd.DataFrame, column: str, board: np.ndarray, score) -> list[tuple[str, pd.DataFrame]]:
    def shift(theta: float) -> pd.DataFrame:
        out = truth.copy()
        out[column] = truth[column] + theta
        return out

    ranked, rng = np.sort(board), np.random.default_rng(0)
    cases = [("best: the answers", shift(0.0)), ("below the last entry: +5000", shift(5000.0)),
             ("mean prediction", truth.assign(**{column: truth[column].mean()})),
             ("negative predictions", shift(-200.0))]
    cases += [(f"noise sd={sd}", truth.assign(**{column: truth[column] + rng.normal(0, sd, len(truth))}))
              for sd in (20, 50)]
    cases += [(f"shift {c}", shift(float(c))) for c in (5, 20, 25, 40)]
    for name, entry in (("top", ranked[0]), ("position 10", ranked[9]), ("position 100", ranked[99]),
                        ("median", np.median(ranked)), ("last", ranked[-1])):
        for label, target in (("tie", entry), ("near-tie worse (+5e-7 rel)", entry * (1 + 5e-7)),
                              ("near-tie better (-5e-7 rel)", entry * (1 - 5e-7))):
            if label != "tie" and name not in ("top", "position 10"):
                continue
            cases.append((f"{label} {name} {entry:g}", shift(_closest(shift, score, target, 0.0, 1e4)), target))
    return cases


def _auc_cases(truth: pd.DataFrame, column: str, board: np.ndarray) -> list[tuple[str, pd.DataFrame]]:
    labels = truth[column].to_numpy()
    pos, neg = np.flatnonzero(labels == 1), np.flatnonzero(labels == 0)
    pairs = len(pos) * len(neg)

    def wins(m: int) -> pd.DataFrame:  # AUC = m / pairs: negatives at 0..N-1, positive i above w_i of them
        score = np.empty(len(labels))
        score[neg] = np.arange(len(neg))
        w = np.full(len(pos), m // len(pos))
        w[: m % len(pos)] += 1
        score[pos] = w - 0.5
        return truth.assign(**{column: score / len(neg)})

    ranked = np.sort(board)[::-1]
    cases = [("best: perfect ranking", wins(pairs)), ("worst: reversed ranking (below the last entry)", wins(0)),
             ("random", truth.assign(**{column: np.random.default_rng(0).random(len(labels))}))]
    cases += [(f"AUC {a}", wins(round(a * pairs))) for a in (0.6, 0.7, 0.8, 0.9, 0.95)]
    below_top = ranked[ranked < 1.0]
    for name, entry in (("first below 1.0", below_top[0]), ("position 100", ranked[99]),
                        ("median", np.median(ranked)), ("last", ranked[-1])):
        m = round(entry * pairs)
        cases.append((f"tie {name} {entry:g}", wins(m), entry))
        if name in ("first below 1.0", "position 100"):
            cases += [(f"near-tie worse {name} (-1 pair)", wins(m - 1)), (f"near-tie better {name} (+1 pair)", wins(m + 1))]
    return cases


def _label(case: tuple) -> tuple[str, pd.DataFrame, float | None]:
    return case if len(case) == 3 else (case[0], case[1], None)


def _named(name: str, target: float | None, raw: float | None) -> str:
    """Say whether a tie/near-tie row reached its target exactly (clipping can make one unreachable)."""
    if target is None or not name.startswith("tie"):
        return name
    return name + (" (exact)" if raw == target else f" (closest reachable: {raw!r})")


def _write(frame: pd.DataFrame, folder: Path, index: int) -> Path:
    path = folder / f"sub{index:03d}.csv"
    frame.to_csv(path, index=False)
    return path


def run_mledojo(dojo: MLEDojo, repo: Path, work: Path) -> list[dict]:
    rows = []
    sizes = {"random-acts-of-pizza": 3000}
    for comp in ("spooky-author-identification", "petfinder-pawpularity-score", "random-acts-of-pizza"):
        folder = make_mledojo_competition(work / "mledojo", comp, boards_from=dojo.competitions,
                                          rows=sizes.get(comp, 64), metric_stub=False)
        task: Task = load_task(folder, LoadOptions(competitions_dir=dojo.competitions))
        answers = task.answers_path
        truth = pd.read_csv(answers)
        metric = dojo.metric(comp)
        boards = [task.leaderboard_path, task.public_leaderboard_path]
        private = pd.read_csv(boards[0]).iloc[:, 1].to_numpy(float)

        def score(frame: pd.DataFrame, metric=metric, truth=truth) -> float:
            return float(metric.evaluate(truth.copy(), frame.copy()))

        if task.metric_name.startswith("log_loss"):
            cases = _log_loss_cases(truth, task.target_columns, private, score)
        elif task.metric_name == "rmse":
            cases = _rmse_cases(truth, task.target_columns[0], private, score)
        else:
            cases = _auc_cases(truth, task.target_columns[0], private)
        for i, (name, frame, target) in enumerate(map(_label, cases)):
            path = _write(frame, folder.parent, i)
            ref_raw = dojo.raw_score(comp, path, answers)
            name = _named(name, target, ref_raw)
            ref = dojo.position_score(ref_raw, boards, metric.higher_is_better) if ref_raw is not None else None
            grade = grade_submission(task, path)
            rows.append({
                "benchmark": "MLE-Dojo", "competition": comp, "metric": task.metric_name, "submission": name,
                "ref_raw": ref_raw, "wmrl_raw": grade.raw_score,
                "ref_private": ref and ref["private_leaderboard"], "ref_public": ref and ref["public_leaderboard"],
                "ref_score": ref["avg_score"] if ref else 0.0, "wmrl_score": grade.position_score,
                "equal": (ref["avg_score"] if ref else 0.0) == grade.position_score,
            })
    return rows


def run_mlebench(bench: MLEBench, work: Path) -> list[dict]:
    comp = "spooky-author-identification"
    competitions = FIXTURES / "mlebench"
    folder = make_mlebench_competition(work / "mlebench", comp)
    task = load_task(folder, LoadOptions(competitions_dir=competitions))
    truth = pd.read_csv(task.answers_path)
    board = pd.read_csv(task.leaderboard_path)["score"].to_numpy(float)

    def score(frame: pd.DataFrame) -> float:
        return bench.score(comp, frame.copy(), truth.copy()) or 0.0

    rows = []
    for i, (name, frame, target) in enumerate(map(_label, _log_loss_cases(truth, task.target_columns, board, score))):
        path = _write(frame, work, i)
        ref = bench.grade(comp, path, task.answers_path, task.leaderboard_path)
        name = _named(name, target, ref["score"])
        grade = grade_submission(task, path)
        medal = next((m for m in ("gold", "silver", "bronze") if ref[f"{m}_medal"]), "")
        rows.append({
            "benchmark": "MLE-bench", "competition": comp, "metric": task.metric_name, "submission": name,
            "ref_raw": ref["score"], "wmrl_raw": grade.raw_score, "ref_medal": medal, "wmrl_medal": grade.medal,
            "ref_above_median": ref["above_median"], "wmrl_above_median": grade.above_median,
            "wmrl_score": grade.position_score,
            "equal": ref["score"] == grade.raw_score and medal == grade.medal
            and ref["above_median"] == grade.above_median,
        })
    return rows


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "invalid"
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def write_tables(rows: list[dict], out: Path, command: str) -> None:
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "exactness.csv", index=False)
    lines = ["# wmrl's grade vs the benchmarks' own code", "", f"Rebuild: `{command}`", "",
             "MLE-Dojo rows: raw score from the competition's own `utils/metric.py`, position score from MLE-Dojo's",
             "`_calculate_leaderboard_position` (mean of private and public boards), vs `wmrl.grading.grade_submission`.",
             "MLE-bench rows: score, medal and above-median flag from MLE-bench's `Grader` and `rank_score`.", "",
             "| competition | submissions | all equal |", "|---|---|---|"]
    for (bench, comp), group in frame.groupby(["benchmark", "competition"], sort=False):
        lines.append(f"| {bench} {comp} | {len(group)} | {'yes' if group['equal'].all() else 'NO'} |")
    for (bench, comp), group in frame.groupby(["benchmark", "competition"], sort=False):
        lines += ["", f"## {bench}: {comp} ({group['metric'].iloc[0]})", ""]
        if bench == "MLE-Dojo":
            lines += ["| submission | MLE-Dojo raw | wmrl raw | MLE-Dojo private / public | MLE-Dojo score | wmrl score | equal |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {r.submission} | {_fmt(r.ref_raw)} | {_fmt(r.wmrl_raw)} | {_fmt(r.ref_private)} / "
                      f"{_fmt(r.ref_public)} | {_fmt(r.ref_score)} | {_fmt(r.wmrl_score)} | {r.equal} |"
                      for r in group.itertuples()]
        else:
            lines += [("| submission | MLE-bench score | wmrl raw | medal (MLE-bench / wmrl) | above median "
                       "(MLE-bench / wmrl) | wmrl position score | equal |"), "|---|---|---|---|---|---|---|"]
            lines += [f"| {r.submission} | {_fmt(r.ref_raw)} | {_fmt(r.wmrl_raw)} | {r.ref_medal or '-'} / "
                      f"{r.wmrl_medal or '-'} | {r.ref_above_median} / {r.wmrl_above_median} | {_fmt(r.wmrl_score)} "
                      f"| {r.equal} |" for r in group.itertuples()]
    (out / "exactness.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    args = parse_repos(__doc__.splitlines()[0])
    warnings.simplefilter("ignore", FutureWarning)  # scikit-learn's y_pred -> y_proba rename, in MLE-bench's code
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_mledojo(MLEDojo(args.mledojo_repo), args.mledojo_repo, Path(tmp))
        rows += run_mlebench(MLEBench(args.mlebench_repo), Path(tmp))
    command = "python benchmarks/pools_exactness.py --mledojo-repo MLE-Dojo --mlebench-repo mle-bench"
    write_tables(rows, args.out, command)
    bad = [r for r in rows if not r["equal"]]
    print(f"{len(rows)} submissions, {len(bad)} differ; wrote {args.out}/exactness.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
