"""``wmrl compare``: one row per setting (variant, anchor_frac, w_max), aggregated over seeds.

Columns: final score (mean ± standard error over seeds), GPU-hours (mean; what they sum is in
docs/sweeps.md; CPU-hours for runs that ran on CPU, see :attr:`Comparison.unit`), the speedup against
``grpo_real`` measured two ways (GPU-hours to reach the target
score, and ``grpo_real``'s score at this setting's compute), and calibration health at the end (η̂², ρ,
how many seeds' Assumption-6 audits warned). The cheapest setting whose mean score is within one
standard error of the best mean is named below the table.

Below it, the settings paired by seed (a seed is the same start for every setting: same initial policy,
same task order): each minus ``grpo_real``, and each setting that trains on the world model minus
``grpo_anchor_only`` at its anchor fraction (the same executions without the world model's stream: does
the stream add anything?), with the t-interval of the mean difference (wmrl/sweep/paired.py).

A value read off a mean curve between two of its logged points (a trainer logs its score only at its
evaluations) is a linear interpolation, not a measurement: :func:`crossing_read` and
:func:`score_at_read` say how each was read, and the table marks interpolated values as such.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wmrl.algorithm import get_variant
from wmrl.simulate.report import mean_se, mean_se_text
from wmrl.sweep.paired import Paired, paired
from wmrl.sweep.records import RunRecord

REFERENCE = "grpo_real"
ANCHOR_ONLY = "grpo_anchor_only"  # the same executions as an anchored setting, without the world model
TARGET_FRACTION = 0.9  # default target: grpo_real's first logged score + 90% of its gain by the end
# How a value was read off a curve: at a logged point, between two (linear), or past the last one
EVALUATED, INTERPOLATED, FINAL = "evaluated", "interpolated", "final"
MARK = {EVALUATED: "", INTERPOLATED: " (interpolated)", FINAL: " (its final)"}


@dataclass
class Setting:
    variant: str
    anchor_frac: float
    w_max: float
    runs: list[RunRecord]
    score: float = math.nan
    score_se: float = math.nan
    gpu_hours: float = math.nan
    phase_hours: dict[str, float] = field(default_factory=dict)
    curve_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    curve_score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hours_to_target: float | None = None
    hours_to_target_read: str = EVALUATED
    speedup_to_target: float | None = None
    ref_score_at_compute: float | None = None
    ref_score_at_compute_read: str = EVALUATED
    eta2: float | None = None
    rho: float | None = None
    audits: str = "-"
    vs_reference: Paired | None = None  # this setting's final score minus grpo_real's, paired by seed
    vs_anchor_only: Paired | None = None  # minus grpo_anchor_only's at this anchor_frac, paired by seed

    @property
    def label(self) -> str:
        return f"{self.variant} anchor_frac={self.anchor_frac:g} w_max={self.w_max:g}"

    def by_start(self) -> dict[tuple[int, str], float]:
        """Final score by (seed, initial policy): two runs pair only when they started from one checkpoint."""
        return {(r.seed, r.initial_policy or ""): r.final_score for r in self.runs}


def _mean_or_none(values: list[float | None]) -> float | None:
    m, _ = mean_se([v for v in values if v is not None])  # type: ignore[misc]
    return None if math.isnan(m) else m


def first_crossing(hours: np.ndarray, score: np.ndarray, target: float) -> float | None:
    """GPU-hours at which a mean curve first reaches ``target`` (linear between logged points)."""
    above = np.nonzero(score >= target)[0]
    if len(above) == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(hours[0])
    h0, h1, s0, s1 = hours[i - 1], hours[i], score[i - 1], score[i]
    return float(h0 + (h1 - h0) * (target - s0) / (s1 - s0))


def score_at(hours: np.ndarray, score: np.ndarray, budget: float) -> float:
    """A mean curve's score after ``budget`` GPU-hours (its final score beyond its last point)."""
    if budget >= hours[-1]:
        return float(score[-1])
    return float(np.interp(budget, hours, score))


def crossing_read(hours: np.ndarray, score: np.ndarray, target: float) -> str:
    """How :func:`first_crossing` read its value: at a logged point, or interpolated between two."""
    above = np.nonzero(np.asarray(score) >= target)[0]
    if len(above) == 0 or above[0] == 0 or np.isclose(score[above[0]], target):
        return EVALUATED
    return INTERPOLATED


def score_at_read(hours: np.ndarray, budget: float) -> str:
    """How :func:`score_at` read its value: at a logged point, interpolated, or the curve's final
    score (``budget`` past its last point: what it ended at, with fewer hours)."""
    hours = np.asarray(hours, dtype=float)
    if np.isclose(hours, budget, rtol=1e-9, atol=0.0).any():
        return EVALUATED
    return FINAL if budget > hours[-1] else INTERPOLATED


def _settings(records: list[RunRecord]) -> list[Setting]:
    groups: dict[tuple[str, float, float], list[RunRecord]] = {}
    for r in records:
        groups.setdefault(r.setting, []).append(r)
    out = []
    for (variant, af, wm), runs in groups.items():
        s = Setting(variant, af, wm, sorted(runs, key=lambda r: r.seed))
        s.score, s.score_se = mean_se([r.final_score for r in runs])
        s.gpu_hours = mean_se([r.gpu_hours for r in runs])[0]
        phases = sorted({p for r in runs for p in r.phase_hours})
        s.phase_hours = {p: mean_se([r.phase_hours.get(p, 0.0) for r in runs])[0] for p in phases}
        n = min(len(r.curve_score) for r in runs)
        if n:  # seeds log at the same steps; the mean curve is taken point by point
            s.curve_hours = np.mean([r.curve_hours[:n] for r in runs], axis=0)
            s.curve_score = np.mean([r.curve_score[:n] for r in runs], axis=0)
        s.eta2 = _mean_or_none([r.eta2 for r in runs])
        s.rho = _mean_or_none([r.rho for r in runs])
        audited = [r for r in runs if r.audit_warned is not None]
        s.audits = f"{sum(bool(r.audit_warned) for r in audited)}/{len(audited)}" if audited else "-"
        out.append(s)
    order = {"grpo_real": 0, "grpo_anchor_only": 1, "pure_wm": 2, "mixture": 3, "debias_only": 4,
             "denoise_only": 5, "wmrl": 6}
    return sorted(out, key=lambda s: (order.get(s.variant, 99), s.variant, s.anchor_frac, s.w_max))


def default_target(ref: Setting) -> float:
    start, end = float(ref.curve_score[0]), float(ref.curve_score[-1])
    return start + TARGET_FRACTION * (end - start)


@dataclass
class Comparison:
    settings: list[Setting]
    target: float | None
    reference: Setting | None
    cheapest: Setting | None
    best: Setting | None
    unit: str = "GPU"  # the runs' hours: "GPU", "CPU", or "compute" when they mix units (or do not say)
    # initial policy -> the runs that started from it (trainer runs that say; simulator runs have none)
    initial_policies: dict[str, list[str]] = field(default_factory=dict)

    @property
    def mixed_initial_policies(self) -> bool:
        return len(self.initial_policies) > 1


def hours_unit(records: list[RunRecord]) -> str:
    units = {r.hours_unit for r in records}
    return units.pop() if len(units) == 1 else "compute"


def compare(records: list[RunRecord], target: float | None = None) -> Comparison:
    if not records:
        raise ValueError("no finished runs to compare")
    settings = _settings(records)
    refs = [s for s in settings if s.variant == REFERENCE and len(s.curve_score)]
    ref = refs[0] if len(refs) == 1 else None
    if target is None and ref is not None:
        target = default_target(ref)
    ref_hours = first_crossing(ref.curve_hours, ref.curve_score, target) if ref and target is not None else None
    for s in settings:
        if not len(s.curve_score):
            continue
        if target is not None:
            s.hours_to_target = first_crossing(s.curve_hours, s.curve_score, target)
            s.hours_to_target_read = crossing_read(s.curve_hours, s.curve_score, target)
            if s.hours_to_target and ref_hours:
                s.speedup_to_target = ref_hours / s.hours_to_target
        if ref is not None:
            s.ref_score_at_compute = score_at(ref.curve_hours, ref.curve_score, s.gpu_hours)
            s.ref_score_at_compute_read = score_at_read(ref.curve_hours, s.gpu_hours)
    pair_settings(settings)
    scored = [s for s in settings if math.isfinite(s.score)]
    best = max(scored, key=lambda s: s.score) if scored else None
    cheapest = None
    if best is not None:
        close = [s for s in scored if s.score >= best.score - best.score_se]
        cheapest = min(close, key=lambda s: s.gpu_hours)
    return Comparison(settings, target, ref, cheapest, best, hours_unit(records), initial_policies(records))


def _trains_on_world_model(variant: str) -> bool:
    try:
        return get_variant(variant).trains_on_wm
    except ValueError:  # a record from a variant this wmrl does not know: no baseline to pair it with
        return False


def pair_settings(settings: list[Setting]) -> None:
    """Set each setting's paired differences against grpo_real and, for a setting that trains on the
    world model, against grpo_anchor_only at its anchor fraction (the first such setting when several)."""
    refs = [s for s in settings if s.variant == REFERENCE]
    anchor_only = {}
    for s in settings:
        if s.variant == ANCHOR_ONLY:
            anchor_only.setdefault(s.anchor_frac, s)
    for s in settings:
        if len(refs) == 1 and s is not refs[0]:
            s.vs_reference = paired(refs[0].by_start(), s.by_start())
        base = anchor_only.get(s.anchor_frac)
        if base is not None and _trains_on_world_model(s.variant):
            s.vs_anchor_only = paired(base.by_start(), s.by_start())


def initial_policies(records: list[RunRecord]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for r in sorted(records, key=lambda r: r.name):
        if r.initial_policy:
            found.setdefault(r.initial_policy, []).append(r.name)
    return found


def initial_policy_note(c: Comparison) -> str | None:
    """One line on what the runs started from; a warning when they did not all start from one checkpoint."""
    if not c.initial_policies:
        return None
    if not c.mixed_initial_policies:
        return f"Every run started from the initial policy `{next(iter(c.initial_policies))}`."
    parts = "; ".join(f"`{p}`: {', '.join(names)}" for p, names in c.initial_policies.items())
    return (f"**The runs did not start from one initial policy** ({parts}): their scores are not comparable "
            "seed for seed (e.g. two machines that built different SFTs of the default).")


# --------------------------------------------------------------------------- table

def columns(unit: str = "GPU") -> tuple[str, ...]:
    return ("variant", "anchor_frac", "w_max", "seeds", "final score", f"{unit}-hours", f"{unit}-h to target",
            "speedup to target", f"grpo_real at equal {unit}-h", "eta2 (end)", "rho (end)", "audit warned")


def _hours(value: float | None) -> str:
    """Three significant digits at least (0.358 CPU-hours of a tiny run), never an exponent (1234 GPU-hours)."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, fmt)


def _score_text(s: Setting) -> str:
    return mean_se_text(s.score, s.score_se, len(s.runs))


def _marked(text: str, read: str) -> str:
    return text if text == "-" else text + MARK[read]


def rows(c: Comparison) -> list[list[str]]:
    out = []
    for s in c.settings:
        out.append([
            s.variant, f"{s.anchor_frac:g}", f"{s.w_max:g}", str(len(s.runs)),
            _score_text(s), _hours(s.gpu_hours), _marked(_hours(s.hours_to_target), s.hours_to_target_read),
            # grpo_real's own speedup is 1 by definition, however its hours were read
            _marked((_f(s.speedup_to_target, ".2f") + "x") if s.speedup_to_target else "-",
                    EVALUATED if s is c.reference else s.hours_to_target_read),
            _marked(_f(s.ref_score_at_compute, ".4f"), s.ref_score_at_compute_read),
            _f(s.eta2, ".3f"), _f(s.rho, ".2f"), s.audits,
        ])
    return out


def paired_text(d: Paired | None) -> str:
    if d is None or d.n == 0:
        return "-"
    if d.n < 2:
        return f"{d.mean:+.4f} (1 seed)"
    return f"{d.mean:+.4f} [{d.ci95[0]:+.4f}, {d.ci95[1]:+.4f}] ({d.n} seeds)"


def paired_lines(c: Comparison) -> list[str]:
    """The settings paired by seed against the baselines (none when no setting has a baseline)."""
    shown = [s for s in c.settings if s.vs_reference is not None or s.vs_anchor_only is not None]
    if not shown:
        return []
    lines = ["", ("Paired by seed (same seed and initial policy = same start): final score minus the baseline's, "
                  "mean and 95% t-interval over the seeds both ran."), "",
             f"| setting | − {REFERENCE} | − {ANCHOR_ONLY} at its anchor_frac |", "|---|---|---|"]
    lines += [f"| {s.label} | {paired_text(s.vs_reference)} | {paired_text(s.vs_anchor_only)} |" for s in shown]
    return lines


def markdown(c: Comparison) -> str:
    header = columns(c.unit)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(c)]
    lines.append("")
    if c.target is not None:
        lines.append(f"Target score {c.target:.4f}" + (
            f" ({REFERENCE}'s first logged score + {TARGET_FRACTION:.0%} of its gain)" if c.reference else ""
        ) + f"; speedup = grpo_real's {c.unit}-hours to the target / the setting's.")
    if any(INTERPOLATED in (s.hours_to_target_read, s.ref_score_at_compute_read) for s in c.settings):
        lines.append("(interpolated): read linearly between two logged points of a mean curve (a trainer logs its "
                     "score only at its evaluations), not measured at that point.")
    if any(s.ref_score_at_compute_read == FINAL for s in c.settings if s.ref_score_at_compute is not None):
        lines.append(f"(its final): {REFERENCE}'s last logged score, reached with fewer {c.unit}-hours.")
    if c.best is not None and c.cheapest is not None:
        lines.append(f"Best mean score: {c.best.label} ({_score_text(c.best)}).")
        lines.append(f"Cheapest within one standard error of the best: **{c.cheapest.label}** "
                     f"({_score_text(c.cheapest)}, {_hours(c.cheapest.gpu_hours)} {c.unit}-hours).")
    note = initial_policy_note(c)
    if note:
        lines.append(note)
    if c.unit == "compute":
        lines.append("The runs do not share one unit (GPU-hours, CPU-hours, or runs logged before wmrl tagged "
                     "the unit): their hours are compared as they were measured.")
    lines += paired_lines(c)
    return "\n".join(lines) + "\n"


PAIRED_PARTS = ("mean", "ci95_low", "ci95_high", "seeds")


def _paired_values(d: Paired | None) -> list[Any]:
    if d is None or d.n == 0:
        return [None] * len(PAIRED_PARTS)
    return [d.mean, *(x if math.isfinite(x) else None for x in d.ci95), d.n]


def csv_text(c: Comparison) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    phases = sorted({p for s in c.settings for p in s.phase_hours})
    writer.writerow(["variant", "anchor_frac", "w_max", "seeds", "final_score", "final_score_se", "gpu_hours",
                     *(f"gpu_hours_{p}" for p in phases), "gpu_hours_to_target", "speedup_to_target",
                     "grpo_real_score_at_equal_gpu_hours", "eta2_end", "rho_end", "audit_warned",
                     "gpu_hours_to_target_read", "grpo_real_score_at_equal_gpu_hours_read", "hours_unit",
                     *(f"minus_{base}_{part}" for base in (REFERENCE, ANCHOR_ONLY) for part in PAIRED_PARTS)])
    for s in c.settings:
        values: list[Any] = [s.variant, s.anchor_frac, s.w_max, len(s.runs), s.score, s.score_se, s.gpu_hours,
                             *(s.phase_hours.get(p, 0.0) for p in phases), s.hours_to_target,
                             s.speedup_to_target, s.ref_score_at_compute, s.eta2, s.rho, s.audits,
                             s.hours_to_target_read if s.hours_to_target is not None else "",
                             s.ref_score_at_compute_read if s.ref_score_at_compute is not None else "", c.unit,
                             *_paired_values(s.vs_reference), *_paired_values(s.vs_anchor_only)]
        writer.writerow(["" if v is None else (f"{v:.6g}" if isinstance(v, float) else v) for v in values])
    return buf.getvalue()
