"""Fit the synthetic simulator to a real run (``wmrl simulate --from-run RUN_DIR``, issue 11 item 5).

What a run directory offers, and where (docs/run-directory.md):

- ``calibration/pairs.jsonl`` (a ``wmrl simulate`` run: ``runs/VARIANT-seedS/pairs.jsonl``): the anchor
  pairs (r_hat, r, task, group, step), appended by the calibration layer as they arrive. The anchor
  trajectories are the really executed ones, so their true scores are also the executed score
  distribution the policy reached.
- ``metrics.jsonl``: the coordinator's per-step rows; the last one holds the run's measured totals
  (``seconds_<phase>`` for generation, world_model, execution, update, weight_sync; ``executions``,
  ``wm_calls``), which give the measured seconds per unit of work.
- ``config.yaml``: the resolved config (m, n, min_pairs, ..., steps).

The fit, each part a plain estimator stated in :meth:`Fit.describe`:

- world model ``E[r_hat | r] = phi(r) + o_task``: least squares on a piecewise-linear (degree-1 spline,
  scikit-learn's ``SplineTransformer``) basis in r plus one offset per task; knots at 0, 1, quantiles
  of the running solutions' r and (with crashes) their smallest r, so ``phi`` is the simulator's
  ``phi: knots`` table; outside the observed r it is extended linearly (then clipped to [0, 1] as the
  simulator clips r_hat).
- per-task offsets: centred on the pairs' mean; their spread net of the noise each estimate carries
  (``var(o_hat) - mean(sigma^2 / n_task)``). The simulator has one offset on a fraction of the tasks, so
  the spread s becomes ``+s`` on half the tasks and ``-s`` on the other half (phi shifted by ``-s``):
  same mean, same variance.
- noise: the residual sd (degrees of freedom corrected); Student-t (scale, df by maximum likelihood) when
  its likelihood beats the Gaussian's by more than its extra parameter costs (AIC).
- benchmark: the crash rate (true score 0) and a Beta(alpha, beta) for the scores of solutions that run
  (method of moments) give the simulator's ``crash_base`` and ``quality_*``; ``crash_slope`` is not
  identified from one run's scores (0, override it to test the risk trade-off), nor is ``lr``.
- cost: measured seconds per execution, world-model call, trajectory and update (weight sync counted
  with the update), or the config's price list when the run measured nothing (a simulated run).
- the anchor rule (issue 37): its settings (``algorithm.anchor_rule``, ``anchor_frac``,
  ``min_anchor_groups``, ``anchor_max_gap``, ``on_flat_world_model``, ``world_model_from``, ``w_max``)
  carried over; what it saw and chose per step (:mod:`wmrl.sweep.rule_trace`); the noise relative to warm-up, so that the simulated eta2/eta2_cal
  moves as the run's: the residual sd over the warm-up's pairs, and a change point in the residual sd
  (one step where it jumps, Gaussian likelihood, kept when it beats one sd by more than its BIC penalty)
  becomes the simulator's ``degrade_step`` / ``degrade_noise``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.calibration.pool import LOG_NAME, read_log
from wmrl.config import WMRLConfig, load_config, to_yaml
from wmrl.storage.metrics_log import METRICS, read_rows
from wmrl.sweep.rule_trace import RULE_SETTINGS, RuleTrace, read_trace

MIN_PAIRS = 30  # default: below this a fit of phi, offsets and noise is mostly noise
MAX_SEGMENTS = 12
MIN_FIRST_KNOT = 1e-3  # the smallest running score is a knot from this far above a crash's 0 (others 0.02 apart)
PAIRS_PER_SEGMENT = 60
ZERO = 1e-9  # a true score at or below this is a crash (an invalid or missing submission scores 0)
MIN_SEGMENT = 20  # pairs on each side of a noise change point, at least


class FromRunError(ValueError):
    """The run directory cannot be fitted; the message says why and what would do."""


@dataclass
class RunEvidence:
    run_dir: Path
    cfg: WMRLConfig
    predicted: np.ndarray
    true: np.ndarray
    tasks: np.ndarray  # task id of each pair
    steps: np.ndarray
    rule: RuleTrace  # what the anchor rule saw and chose per step
    totals: dict[str, Any] = field(default_factory=dict)  # the last metrics row (measured totals)


def _pairs_dir(run_dir: Path) -> Path:
    for candidate in (run_dir / "calibration", run_dir):
        if (candidate / LOG_NAME).is_file():
            return candidate
    raise FromRunError(f"{run_dir}: no anchor pairs (looked for calibration/{LOG_NAME} and {LOG_NAME}); "
                       "give a `wmrl train`/`wmrl launch` run directory of a variant that draws anchors and "
                       "scores them with the world model (wmrl, debias_only, denoise_only, mixture)")


def load_run(run_dir: Path) -> RunEvidence:
    """Read a run directory without changing anything in it."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise FromRunError(f"{run_dir}: no config.yaml; is this a run directory?")
    cfg = load_config(run_dir / "config.yaml")
    seen: dict[str, Any] = {}
    pairs_dir = _pairs_dir(run_dir)
    for _, batch, _ in read_log(pairs_dir):
        for pair in batch:
            seen.setdefault(pair.pair_id, pair)  # the pool's rule: the first record of an id counts
    pairs = list(seen.values())
    rows = read_rows(run_dir / METRICS)
    return RunEvidence(
        run_dir=run_dir, cfg=cfg,
        predicted=np.array([p.predicted for p in pairs], dtype=float),
        true=np.array([p.true for p in pairs], dtype=float),
        tasks=np.array([p.task_id for p in pairs], dtype=object),
        steps=np.array([p.step for p in pairs], dtype=int),
        rule=read_trace(cfg.algorithm, pairs_dir, rows, cfg.train.steps),
        totals=rows[max(rows)] if rows else {},
    )


@dataclass
class Fit:
    run_dir: str
    n_pairs: int
    phi_knots: list[list[float]]  # [[r, phi(r)], ...], r from 0 to 1, offsets' mean included
    task_offsets: dict[str, float]  # centred, as estimated
    task_offset_sd: float  # spread net of estimation noise
    noise_family: str
    noise_scale: float  # gaussian: sd; student_t: scale of scale * t(df)
    noise_df: float | None
    residual_sd: float
    residual_kurtosis: float  # excess kurtosis (0 for a Gaussian)
    crash_rate: float
    quality_alpha: float
    quality_beta: float
    per_task: dict[str, dict[str, float]]
    cost: dict[str, float]
    cost_source: str  # measured | config
    measured_seconds: dict[str, float]
    steps: int
    noise_warmup_sd: float  # residual sd of the warm-up's pairs (the first min_pairs)
    noise_change_step: int | None  # from this step on the noise is noise_after (a change point; None: none)
    noise_after: float | None
    rule_settings: dict[str, Any]  # RULE_SETTINGS of the run's algorithm section, carried over
    rule: RuleTrace
    notes: list[str] = field(default_factory=list)

    def simulator_overrides(self, steps: int | None = None) -> list[str]:
        """``simulator.*``, ``train.steps`` and the anchor rule's ``algorithm.*`` overrides that make the simulator
        this run's (before the user's own overrides); ``steps``: the simulated run's length, when the user
        changes it (a noise change at or after it is left out)."""
        shift = -self.task_offset_sd  # the two-point offsets (+s, -s) as (+2s on half the tasks) and phi - s
        knots = [[r, min(1.0, max(0.0, v + shift))] for r, v in self.phi_knots] if shift else self.phi_knots
        out = [
            "simulator.phi=knots", f"simulator.phi_knots={json.dumps(knots)}",
            f"simulator.wm_noise={self.noise_scale:.6g}", f"simulator.wm_noise_family={self.noise_family}",
            f"simulator.wm_task_offset={min(1.0, 2 * self.task_offset_sd):.6g}", "simulator.wm_task_offset_frac=0.5",
            f"simulator.tasks={max(1, len(self.per_task))}", f"simulator.crash_base={self.crash_rate:.6g}",
            "simulator.crash_slope=0", f"simulator.quality_alpha={self.quality_alpha:.6g}",
            f"simulator.quality_beta={self.quality_beta:.6g}", f"train.steps={self.steps}",
            f"simulator.log_every={max(1, self.steps // 20)}",
            *(f"simulator.cost.{k}={v:.6g}" for k, v in self.cost.items()),
        ]
        if self.noise_df is not None:
            out.append(f"simulator.wm_noise_df={self.noise_df:.6g}")
        # The schedule is the fit's, not the run's config's (a simulated run's own degrade or drift): no
        # drift (phi is one map), a noise change only where one was found inside the simulated run.
        out.append("simulator.drift_step=null")
        if self.noise_change_step is not None and self.noise_change_step < (self.steps if steps is None else steps):
            out += [f"simulator.degrade_step={self.noise_change_step}", f"simulator.degrade_noise={self.noise_after:.6g}"]
        else:
            out.append("simulator.degrade_step=null")
        out += [f"algorithm.{key}={value}" for key, value in self.rule_settings.items()]
        return out

    def describe(self) -> str:
        """The fitted parameters, stated for the reader of a plan."""
        knots = ", ".join(f"({r:.2f}, {v:.3f})" for r, v in self.phi_knots)
        noise = (f"Student-t, scale {self.noise_scale:.4f}, df {self.noise_df:.1f}" if self.noise_family == "student_t"
                 else f"Gaussian, sd {self.noise_scale:.4f}")
        lines = [
            f"Fitted to {self.n_pairs} anchor pairs of {self.run_dir} over {len(self.per_task)} task(s):",
            f"- world model E[r_hat | r] = phi(r) + task offset; phi knots (r, phi): {knots}",
            (f"- per-task offsets: sd {self.task_offset_sd:.4f} net of estimation noise "
            f"(raw: {', '.join(f'{t} {o:+.3f}' for t, o in sorted(self.task_offsets.items())[:8])}"
            f"{' ...' if len(self.task_offsets) > 8 else ''}); simulated as +/-sd on half the tasks each"),
            f"- noise: {noise} (residual sd {self.residual_sd:.4f}, excess kurtosis {self.residual_kurtosis:.2f})",
            self._describe_noise_change(),
            (f"- executed true scores: crash rate {self.crash_rate:.3f}, scores of running solutions "
            f"~ Beta({self.quality_alpha:.2f}, {self.quality_beta:.2f}); crash_slope and lr not fitted"),
            f"- cost per unit ({self.cost_source}): " + ", ".join(f"{k} {v:.3g} s" for k, v in self.cost.items()),
            f"- the run's length: {self.steps} steps (train.steps unless overridden)",
            "- anchor rule (carried over as algorithm.*): "
            + ", ".join(f"{k} {v}" for k, v in self.rule_settings.items()),
            self.rule.describe(),
        ]
        lines += [f"- note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _describe_noise_change(self) -> str:
        first = f"- noise relative to warm-up: residual sd {self.noise_warmup_sd:.4f} over the warm-up's pairs"
        if self.noise_change_step is None:
            return first + "; no change point in the residual sd (simulated at the one level above)"
        return (f"{first}; from step {self.noise_change_step} the noise is {self.noise_after:.4f} "
                f"({self.noise_after / self.noise_scale:.2f}x the level before; simulator.degrade_step, degrade_noise)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- the pieces


def _knot_positions(true: np.ndarray) -> np.ndarray:
    """0, 1 and quantiles of the running solutions' r in between: more knots where there are more pairs,
    each segment with data; with crashes (r = 0) also the smallest r of a solution that ran, so that phi
    may jump between a crash and the worst running solution (a steep phi near 0, e.g. r**0.3, otherwise
    leaves a misfit that the noise fit would count as noise)."""
    ran = true[true > ZERO]
    distinct = np.unique(true)
    segments = int(min(MAX_SEGMENTS, max(1, len(true) // PAIRS_PER_SEGMENT), max(1, len(distinct) - 1)))
    inner = np.quantile(ran, np.linspace(0, 1, segments + 1)[1:-1]) if segments > 1 and len(ran) else []
    knots = [0.0]
    if 0 < len(ran) < len(true) and MIN_FIRST_KNOT <= ran.min() <= 0.98:
        knots.append(float(ran.min()))
    for x in sorted(inner):
        if 0.02 <= x <= 0.98 and x - knots[-1] >= 0.02:
            knots.append(float(x))
    return np.array([*knots, 1.0])


def fit_world_model(predicted: np.ndarray, true: np.ndarray, tasks: np.ndarray,
                    ) -> tuple[list[list[float]], dict[str, float], np.ndarray, int, list[str]]:
    """phi knots (offsets' mean included), centred per-task offsets, residuals, parameters used, notes."""
    from sklearn.linear_model import LinearRegression
    from sklearn.preprocessing import OneHotEncoder, SplineTransformer

    notes = []
    if len(np.unique(true)) < 2:
        # One true score seen (e.g. every solution crashed): phi's slope is not identified. Assume the
        # world model ranks like the truth (slope 1) and fit only its level there.
        notes.append(f"every anchor pair has the same true score ({true[0]:g}): phi's shape is not identified; "
                     "assumed phi(r) = r + the mean error there")
        shift = float(np.mean(predicted - true))
        knots = [[0.0, shift], [1.0, 1.0 + shift]]
        return knots, {str(t): 0.0 for t in np.unique(tasks)}, predicted - true - shift, 1, notes
    positions = _knot_positions(true)
    spline = SplineTransformer(degree=1, knots=positions.reshape(-1, 1), extrapolation="linear")
    onehot = OneHotEncoder(sparse_output=False)
    basis = spline.fit_transform(true.reshape(-1, 1))
    dummies = onehot.fit_transform(tasks.reshape(-1, 1))
    design = np.hstack([basis, dummies])
    # The spline basis and the task dummies both sum to one: least squares picks the minimum-norm
    # solution, and the offsets are centred below (their mean moves into phi).
    model = LinearRegression(fit_intercept=False).fit(design, predicted)
    coef = model.coef_
    names = [str(t) for t in onehot.categories_[0]]
    counts = dummies.sum(axis=0)
    raw = coef[basis.shape[1]:]
    mean_offset = float((raw * counts).sum() / counts.sum())
    offsets = {t: float(o - mean_offset) for t, o in zip(names, raw)}
    at_knots = spline.transform(positions.reshape(-1, 1)) @ coef[: basis.shape[1]] + mean_offset
    knots = [[float(r), float(v)] for r, v in zip(positions, at_knots)]
    residuals = predicted - model.predict(design)
    rank = int(np.linalg.matrix_rank(design))
    return knots, offsets, residuals, rank, notes


def fit_noise(residuals: np.ndarray, n_params: int) -> dict[str, Any]:
    """Gaussian sd, or Student-t when the data pay for its extra parameter (AIC)."""
    from scipy import stats

    n = len(residuals)
    sd = float(np.sqrt((residuals**2).sum() / max(1, n - n_params)))
    kurtosis = float(stats.kurtosis(residuals)) if n > 3 and sd > 0 else 0.0
    out = {"family": "gaussian", "scale": sd, "df": None, "residual_sd": sd, "kurtosis": kurtosis}
    if n < 20 or sd == 0:
        return out
    df, _, scale = stats.t.fit(residuals, floc=0.0)
    loglik_t = float(stats.t.logpdf(residuals, df, 0.0, scale).sum())
    loglik_g = float(stats.norm.logpdf(residuals, 0.0, residuals.std()).sum())
    if loglik_t - loglik_g > 1.0 and df < 30:  # AIC: one parameter more must buy more than 1 nat
        out.update(family="student_t", scale=float(scale), df=float(df))
    return out


def fit_noise_change(residuals: np.ndarray, steps: np.ndarray, min_segment: int = MIN_SEGMENT,
                     ) -> tuple[int, float, float] | None:
    """(step, sd before, sd after) of the one change in the residual sd that most raises the Gaussian
    likelihood, when the gain beats the BIC penalty of its two parameters (where, and the new sd) with
    a margin for the scan over every step (3 ln n instead of 2 ln n); None otherwise."""
    order = np.argsort(steps, kind="stable")
    sq, at = residuals[order] ** 2, steps[order]
    n = len(sq)
    if n < 2 * min_segment:
        return None
    total = np.cumsum(sq)
    cut = np.arange(min_segment, n - min_segment + 1)
    cut = cut[at[cut] != at[cut - 1]]  # a step's pairs stay on one side
    if not len(cut):
        return None
    floor = 1e-12
    before = np.maximum(total[cut - 1] / cut, floor)
    after = np.maximum((total[-1] - total[cut - 1]) / (n - cut), floor)
    gain = 0.5 * (n * math.log(max(total[-1] / n, floor)) - cut * np.log(before) - (n - cut) * np.log(after))
    best = int(np.argmax(gain))
    if 2.0 * gain[best] <= 3.0 * math.log(n):
        return None
    return int(at[cut[best]]), math.sqrt(before[best]), math.sqrt(after[best])


def fit_scores(true: np.ndarray, defaults: tuple[float, float]) -> tuple[float, float, float, list[str]]:
    """Crash rate and Beta(alpha, beta) of the scores of solutions that ran (method of moments)."""
    crashed = true <= ZERO
    running = true[~crashed]
    crash = float(crashed.mean())
    if len(running) >= 2 and running.var() > 0:
        m, v = float(running.mean()), float(running.var(ddof=1))
        common = m * (1 - m) / v - 1
        if common > 0:
            return crash, m * common, (1 - m) * common, []
    return crash, defaults[0], defaults[1], [
        (f"{len(running)} executed solution(s) ran with distinct scores: too few to fit the score distribution; "
        f"kept quality_alpha={defaults[0]:g}, quality_beta={defaults[1]:g}")]


def measured_cost(ev: RunEvidence) -> tuple[dict[str, float], str, dict[str, float], list[str]]:
    """Seconds per execution, world-model call, trajectory and update from the run's measured totals."""
    default = asdict(ev.cfg.simulator.cost)
    row = ev.totals
    if not any(k.startswith("seconds_") for k in row):
        return default, "config", {}, [("the run measured no seconds (no metrics.jsonl totals): the config's "
                                       "simulator.cost price list is used")]
    seconds = {p: float(row.get(f"seconds_{p}", 0.0)) for p in
               ("generation", "world_model", "execution", "update", "weight_sync")}
    steps = int(row["step"])
    alg = ev.cfg.algorithm
    units = {"exec_seconds": (seconds["execution"], float(row.get("executions", 0))),
             "wm_call_seconds": (seconds["world_model"], float(row.get("wm_calls", 0))),
             "gen_seconds": (seconds["generation"], float(steps * alg.groups_per_step * alg.group_size)),
             "update_seconds": (seconds["update"] + seconds["weight_sync"], float(steps))}
    cost, notes = {}, []
    for key, (total, count) in units.items():
        if count > 0:
            cost[key] = total / count
        else:
            cost[key] = default[key]
            notes.append(f"{key}: the run did no such work; the config's price {default[key]:g} s is used")
    return cost, "measured" if not notes else "measured, with config prices where noted", seconds, notes


def fit_run(ev: RunEvidence, min_pairs: int = MIN_PAIRS) -> Fit:
    n = len(ev.true)
    if n < min_pairs:
        raise FromRunError(
            f"{ev.run_dir} has {n} anchor pair(s); fitting the simulator needs at least {min_pairs} "
            f"(--min-pairs). Train longer, draw more anchor groups (algorithm.anchor_frac), or lower "
            "--min-pairs knowing the fit will be rough")
    knots, offsets, residuals, rank, notes = fit_world_model(ev.predicted, ev.true, ev.tasks)
    noise = fit_noise(residuals, rank)
    alg = ev.cfg.algorithm
    warmup = residuals[: alg.min_pairs]
    change = fit_noise_change(residuals, ev.steps)
    family, scale, df, after, change_step = noise["family"], noise["scale"], noise["df"], None, None
    if change is not None:
        # Two levels of noise pooled look heavy-tailed: the family is fitted to the residuals divided by
        # their level's sd, each level is its sd times that family's scale.
        change_step, sd_before, sd_after = change
        shape = fit_noise(residuals / np.where(ev.steps < change_step, sd_before, sd_after), rank)
        family, df = shape["family"], shape["df"]
        scale, after = shape["scale"] * sd_before, shape["scale"] * sd_after
    counts = {t: int((ev.tasks == t).sum()) for t in offsets}
    spread = float(np.var(list(offsets.values()))) if len(offsets) > 1 else 0.0
    noise_var = float(np.mean([noise["residual_sd"] ** 2 / c for c in counts.values()]))
    offset_sd = math.sqrt(max(0.0, spread - noise_var))
    sim = ev.cfg.simulator
    crash, alpha, beta, score_notes = fit_scores(ev.true, (sim.quality_alpha, sim.quality_beta))
    cost, source, seconds, cost_notes = measured_cost(ev)
    late = ev.steps >= np.quantile(ev.steps, 0.75)
    per_task = {t: {"pairs": float(counts[t]), "mean_true": float(ev.true[ev.tasks == t].mean()),
                    "crash_rate": float((ev.true[ev.tasks == t] <= ZERO).mean()),
                    "mean_true_last_quarter": float(ev.true[(ev.tasks == t) & late].mean())
                    if ((ev.tasks == t) & late).any() else float("nan"),
                    "offset": offsets[t]} for t in offsets}
    return Fit(
        run_dir=str(ev.run_dir), n_pairs=n, phi_knots=knots, task_offsets=offsets, task_offset_sd=offset_sd,
        noise_family=family, noise_scale=scale, noise_df=df,
        residual_sd=noise["residual_sd"], residual_kurtosis=noise["kurtosis"], crash_rate=crash,
        quality_alpha=alpha, quality_beta=beta, per_task=per_task, cost=cost, cost_source=source,
        measured_seconds=seconds, steps=int(ev.cfg.train.steps),
        noise_warmup_sd=float(np.sqrt(np.mean(warmup**2))) if len(warmup) else float("nan"),
        noise_change_step=change_step, noise_after=after,
        rule_settings={key: getattr(alg, key) for key in RULE_SETTINGS}, rule=ev.rule,
        notes=[*notes, *score_notes, *cost_notes],
    )


def fitted_config(ev: RunEvidence, fit: Fit, overrides: list[str] | None = None) -> WMRLConfig:
    """The run's config with the simulator fitted to it, then the user's overrides (they win)."""
    import tempfile


    with tempfile.TemporaryDirectory() as tmp:  # load_config validates the whole config, as for any run
        path = Path(tmp) / "config.yaml"
        path.write_text(to_yaml(ev.cfg), encoding="utf-8")
        # the simulated length first: a noise change the user's shorter run never reaches is left out
        unscheduled = ["simulator.drift_step=null", "simulator.degrade_step=null"]
        steps = load_config(path, [f"train.steps={fit.steps}", *unscheduled, *(overrides or [])]).train.steps
        return load_config(path, [*fit.simulator_overrides(steps), "tracking.enabled=false", *(overrides or [])])
