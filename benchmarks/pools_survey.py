"""Every competition of MLE-Dojo's and MLE-bench's repositories through wmrl's loaders.

Each MLE-Dojo competition is laid out as ``prepare/mle.py`` writes it (its real description and
boards from ``info/``, a two-row synthetic answers file with the columns its ``metric.py`` grades)
and loaded with ``tasks.competitions_dir`` = the clone's ``mledojo/competitions``. Each MLE-bench
competition is loaded twice with ``competitions_dir`` = the clone's ``mlebench/competitions``: as
cloned (its board is a Git LFS pointer unless git-lfs fetched it), and with a synthetic two-row board
in place of the pointer, to show which metrics resolve.

    python benchmarks/pools_survey.py --mledojo-repo CLONE --mlebench-repo CLONE [--out results/pools]

Writes OUT/survey.csv and OUT/survey.md.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pools_reference import parse_repos

from wmrl.tasks.layouts import LoadOptions, load_task
from wmrl.tasks.metric_source import read_metric_source
from wmrl.tasks.task import TaskError


def _commit(repo: Path) -> str:
    result = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False)
    return result.stdout.strip() or "unknown"


def _calls(metric_py: Path) -> str:
    """Names the metric class's evaluate() calls: a hint of what it computes, for the reader."""
    tree = ast.parse(metric_py.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "evaluate":
            for call in ast.walk(node):
                if isinstance(call, ast.Call):
                    func = call.func
                    names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "?"))
    boring = {"astype", "sort_values", "reset_index", "set_index", "sort_index", "len", "str", "float", "list",
              "InvalidSubmissionError", "ValueError", "append", "isinstance", "range", "zip", "set", "copy"}
    return ", ".join(sorted(names - boring)[:8])


def _short(error: str, *roots: Path) -> str:
    for root in roots:
        error = error.replace(str(root) + "/", "")
    return error.split("; ")[0]


def survey_mledojo(repo: Path, work: Path) -> list[dict]:
    competitions = repo / "mledojo" / "competitions"
    rows = []
    for info in sorted(p for p in competitions.iterdir() if (p / "info").is_dir()):
        comp, task = info.name, work / "mledojo" / info.name
        row = {"benchmark": "MLE-Dojo", "competition": comp}
        try:
            columns = read_metric_source(info / "utils" / "metric.py").value_columns or ("target",)
        except TaskError:
            columns = ("target",)
        public, private = task / "data" / "public", task / "data" / "private"
        public.mkdir(parents=True)
        private.mkdir(parents=True)
        for name in ("description.txt",):
            if (info / "info" / name).is_file():
                shutil.copyfile(info / "info" / name, public / name)
        for name in ("private_leaderboard.csv", "public_leaderboard.csv"):
            if (info / "info" / name).is_file():
                shutil.copyfile(info / "info" / name, private / name)
        frame = pd.DataFrame({"id": [0, 1], **{c: [0, 1] for c in columns}})
        frame.to_csv(public / "sample_submission.csv", index=False)
        frame.to_csv(private / "test_answer.csv", index=False)
        try:
            loaded = load_task(task, LoadOptions(competitions_dir=competitions))
            row.update(loads=True, metric=loaded.metric_name, direction=loaded.direction, reason="")
        except TaskError as err:
            calls = _calls(info / "utils" / "metric.py") if (info / "utils" / "metric.py").is_file() else ""
            row.update(loads=False, metric="", direction="", reason=_short(str(err), work, competitions),
                       evaluate_calls=calls)
        rows.append(row)
    return rows


def survey_mlebench(repo: Path, work: Path) -> list[dict]:
    competitions = repo / "mlebench" / "competitions"
    rows = []
    for config in sorted(competitions.glob("*/config.yaml")):
        comp = config.parent.name
        data = work / "mlebench" / comp / "prepared"
        answers = Path((yaml.safe_load(config.read_text()).get("dataset") or {}).get("answers") or "x/test.csv").name
        for side, name in (("public", "sample_submission.csv"), ("private", answers)):
            (data / side).mkdir(parents=True)
            pd.DataFrame({"id": [0, 1], "target": [0, 1]}).to_csv(data / side / name, index=False)
        row = {"benchmark": "MLE-bench", "competition": comp}
        try:
            load_task(data.parent, LoadOptions(competitions_dir=competitions))
            row["as_cloned"] = "loads"
        except TaskError as err:
            row["as_cloned"] = _short(str(err), work, competitions)
        stand_in = work / "mlebench-boards" / comp
        stand_in.mkdir(parents=True)
        shutil.copyfile(config, stand_in / "config.yaml")
        try:
            for ordered in ((0.9, 0.1), (0.1, 0.9)):  # whichever order the metric's direction wants
                pd.DataFrame({"teamId": [1, 2], "score": ordered}).to_csv(stand_in / "leaderboard.csv", index=False)
                try:
                    task = load_task(data.parent, LoadOptions(competitions_dir=stand_in.parent))
                    break
                except TaskError as err:
                    if "the board is ranked" not in str(err):
                        raise
            row.update(loads=True, metric=task.metric_name, direction=task.direction, reason="")
        except TaskError as err:
            row.update(loads=False, metric="", direction="", reason=_short(str(err), work, competitions))
        rows.append(row)
    return rows


def write(rows: list[dict], out: Path, commits: dict[str, str]) -> None:
    frame = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "survey.csv", index=False)
    dojo, bench = frame[frame.benchmark == "MLE-Dojo"], frame[frame.benchmark == "MLE-bench"]
    lines = [
        "# Survey: every competition of MLE-Dojo and MLE-bench through wmrl's loaders", "",
        ("Rebuild: `python benchmarks/pools_survey.py --mledojo-repo MLE-Dojo --mlebench-repo mle-bench` "
         f"(MLE-Dojo @ {commits['MLE-Dojo']}, MLE-bench @ {commits['MLE-bench']})."), "",
        "| | competitions | load (metric and direction resolved) | refused |", "|---|---|---|---|",
        f"| MLE-Dojo | {len(dojo)} | {int(dojo.loads.sum())} | {int((~dojo.loads).sum())} |",
        f"| MLE-bench, board present | {len(bench)} | {int(bench.loads.sum())} | {int((~bench.loads).sum())} |",
        (f"| MLE-bench, as cloned without git-lfs | {len(bench)} | {int((bench.as_cloned == 'loads').sum())} | "
         f"{int((bench.as_cloned != 'loads').sum())} |"), "",
        "A competition loads when its files are found, its boards parse and its metric and direction resolve",
        "from its own metric code (MLE-Dojo: `utils/metric.py`; MLE-bench: the registry entry for its `grade.py`).",
        "Metrics of those that load: " + ", ".join(f"{m} {n}" for m, n in Counter(frame[frame.loads].metric).most_common()),
        (f"MLE-Dojo: all {len(dojo)} `metric.py` files and both boards of every competition parse; "
         f"{int(dojo.reason.str.contains('unknown metric').sum())} of the {int((~dojo.loads).sum())} refusals are "
         "'unknown metric' (a class wmrl has no reviewed mapping for: competition-specific metrics such as MAP@k, Dice,"),
        "Levenshtein, Gini, SMAPE, column-wise means, or scikit-learn's log_loss whose clipping differs from wmrl's).",
        "", "## Why the others do not load", "",
        (f"MLE-bench as cloned: {int(bench.as_cloned.str.contains('Git LFS pointer').sum())} competitions whose "
         "metric resolves stop at `<id>/leaderboard.csv: is a Git LFS pointer, not the leaderboard (the repository "
         "was cloned without git-lfs); run `git lfs install && git lfs pull`...`; the others stop earlier, at their "
         "metric (reasons below)."), "",
        "| benchmark | competition | reason | evaluate() calls (MLE-Dojo) |", "|---|---|---|---|",
    ]
    for r in frame[~frame.loads].itertuples():
        lines.append(f"| {r.benchmark} | {r.competition} | {r.reason} | {getattr(r, 'evaluate_calls', '') or ''} |")
    lines += ["", "## Loaded", "", "| benchmark | competition | metric | direction |", "|---|---|---|---|"]
    lines += [f"| {r.benchmark} | {r.competition} | {r.metric} | {r.direction} |" for r in frame[frame.loads].itertuples()]
    (out / "survey.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    args = parse_repos(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        rows = survey_mledojo(args.mledojo_repo, Path(tmp)) + survey_mlebench(args.mlebench_repo, Path(tmp))
    write(rows, args.out, {"MLE-Dojo": _commit(args.mledojo_repo), "MLE-bench": _commit(args.mlebench_repo)})
    print(f"wrote {args.out}/survey.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
