"""How a plan (``wmrl simulate --from-run``) fared against the real sweep (``wmrl compare``'s CSV).

Both tables have ``wmrl compare``'s columns. Settings are matched on (variant, and the axes that change
that variant: ``anchor_frac`` for variants that draw anchor groups besides world-model groups, ``w_max``
with denoising), so a grpo_real row matches whatever anchor_frac its config carried. For compute and for
score: the predicted and the real ordering, Kendall's tau between them, and every pair of settings the
plan ordered wrongly. A pair whose real scores differ by less than the larger of their standard errors
is a tie in the real sweep: listed apart, not counted as wrong.
"""

from __future__ import annotations

import csv
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

from wmrl.algorithm import get_variant
from wmrl.simulate.report import mean_se_text

METRICS = (("gpu_hours", "compute (GPU-hours)", False), ("final_score", "final score", True))


@dataclass(frozen=True)
class Row:
    label: str
    score: float
    score_se: float
    gpu_hours: float
    seeds: int

    def value(self, metric: str) -> float:
        return self.score if metric == "final_score" else self.gpu_hours


def _key(variant: str, anchor_frac: float, w_max: float) -> tuple[str, float | None, float | None]:
    v = get_variant(variant)
    return (variant, round(anchor_frac, 6) if v.needs_anchors and not v.all_anchor else None,
            round(w_max, 6) if v.denoise else None)


def _label(key: tuple[str, float | None, float | None]) -> str:
    variant, af, wm = key
    return " ".join([variant, *([f"anchor_frac={af:g}"] if af is not None else []),
                     *([f"w_max={wm:g}"] if wm is not None else [])])


def read_table(path: Path) -> dict[tuple[str, float | None, float | None], Row]:
    """A ``wmrl compare`` CSV (``plan.csv`` / ``compare.csv``, or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in ("plan.csv", "compare.csv") if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"{path}: no plan.csv or compare.csv")
        path = found[0]
    out = {}
    with path.open(encoding="utf-8") as handle:
        for i, rec in enumerate(csv.DictReader(handle), 2):
            try:
                key = _key(rec["variant"], float(rec["anchor_frac"]), float(rec["w_max"]))
                out[key] = Row(_label(key), float(rec["final_score"]), float(rec["final_score_se"] or 0.0),
                               float(rec["gpu_hours"]), int(rec["seeds"]))
            except (KeyError, ValueError) as err:
                raise ValueError(f"{path}:{i}: not a `wmrl compare` row ({err})") from err
    return out


@dataclass
class MetricCheck:
    metric: str
    title: str
    predicted_order: list[str]
    real_order: list[str]
    tau: float
    wrong: list[str] = field(default_factory=list)
    ties: list[str] = field(default_factory=list)
    pairs: int = 0


def _check_metric(pred: dict, real: dict, keys: list, metric: str, title: str, higher_first: bool) -> MetricCheck:
    from scipy.stats import kendalltau

    def order(table: dict) -> list[str]:
        return [table[k].label for k in sorted(keys, key=lambda k: table[k].value(metric), reverse=higher_first)]

    p = [pred[k].value(metric) for k in keys]
    r = [real[k].value(metric) for k in keys]
    tau = float(kendalltau(p, r).statistic) if len(keys) > 1 else math.nan
    check = MetricCheck(metric, title, order(pred), order(real), tau)
    for a, b in itertools.combinations(keys, 2):
        dp, dr = pred[a].value(metric) - pred[b].value(metric), real[a].value(metric) - real[b].value(metric)
        check.pairs += 1
        if dp * dr >= 0 and (dp != 0) == (dr != 0):
            continue
        noise = max(real[a].score_se, real[b].score_se) if metric == "final_score" else 0.0
        what = (f"{pred[a].label} vs {pred[b].label}: predicted {pred[a].value(metric):.4g} vs "
                f"{pred[b].value(metric):.4g}, real {real[a].value(metric):.4g} vs {real[b].value(metric):.4g}")
        (check.ties if abs(dr) <= noise else check.wrong).append(what)
    return check


@dataclass
class PlanCheck:
    matched: list[str]
    only_predicted: list[str]
    only_real: list[str]
    metrics: list[MetricCheck]
    # (predicted, real) Row per matched setting: orderings can be right while the numbers are far off
    values: list[tuple[Row, Row]] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"Settings in both tables: {len(self.matched)}"]
        if self.values:
            lines += ["", "## Predicted and real values", "",
                      "| setting | predicted score | real score | predicted GPU-hours | real GPU-hours |",
                      "|---|---|---|---|---|"]
            lines += [f"| {p.label} | {mean_se_text(p.score, p.score_se, p.seeds)} | "
                      f"{mean_se_text(r.score, r.score_se, r.seeds)} | {p.gpu_hours:.3g} | {r.gpu_hours:.3g} |"
                      for p, r in self.values]
        if self.only_predicted:
            lines.append(f"Predicted but not run: {', '.join(self.only_predicted)}")
        if self.only_real:
            lines.append(f"Run but not predicted: {', '.join(self.only_real)}")
        for m in self.metrics:
            lines += ["", f"## Ordering by {m.title} ({'best first' if m.metric == 'final_score' else 'cheapest first'})",
                      "", "| rank | predicted | real |", "|---|---|---|"]
            lines += [f"| {i} | {p} | {r} |" for i, (p, r) in enumerate(zip(m.predicted_order, m.real_order), 1)]
            lines += ["", f"Kendall's tau {m.tau:.3f}; {len(m.wrong)} of {m.pairs} pairs ordered wrongly"
                      + (f", {len(m.ties)} more tied in the real sweep (within one standard error)" if m.ties else "")]
            lines += [f"- wrong: {w}" for w in m.wrong]
            lines += [f"- tie: {t}" for t in m.ties]
        return "\n".join(lines) + "\n"


def check_plan(predicted: Path, real: Path) -> PlanCheck:
    pred, actual = read_table(predicted), read_table(real)
    keys = sorted(set(pred) & set(actual), key=lambda k: (k[0], k[1] or 0.0, k[2] or 0.0))
    if not keys:
        raise ValueError(f"no setting is in both {predicted} and {real}: compare a plan with the sweep it planned")
    return PlanCheck(
        matched=[pred[k].label for k in keys],
        only_predicted=sorted(pred[k].label for k in set(pred) - set(actual)),
        only_real=sorted(actual[k].label for k in set(actual) - set(pred)),
        metrics=[_check_metric(pred, actual, keys, m, t, hi) for m, t, hi in METRICS],
        values=[(pred[k], actual[k]) for k in keys],
    )
