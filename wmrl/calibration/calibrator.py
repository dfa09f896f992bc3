"""The one calibration facade every trainer uses: pool + debiaser (Eq. 4) + denoiser (Eq. 5 weight).

Per step the trainer calls ``observe(pairs, step)`` with the anchor pairs it got, ``calibrate(r_hat)``
(pure) for the world-model groups, ``record_chased(r_hat)`` to show the audit which scores the policy
trains on, and reads ``rho`` for the loss weights.

Persistence (with a directory): the pool's append-only log ``pairs.jsonl`` is the commit point, one
fsynced record per ``observe`` that added pairs. ``calibrator.json`` is a snapshot of the derived
state (f_hat's knots, eta2, eta2_cal, rho, ...), atomically replaced by ``save()`` and automatically
every ``SNAPSHOT_EVERY`` logged steps. ``load`` restores the snapshot and replays the log records
after it through the same deterministic update, so the restored calibrator is bit-identical to one
that never stopped, and an update costs one fsync instead of a full state rewrite.

Prequential residuals (issue 7): every pair is scored, for eta2, by the map that existed *before* it
arrived; the pairs of the warm-up (scored by no map) get group-wise out-of-fold values at the first fit.
So eta2 and eta2_cal are out-of-sample residuals of the same kind, and rho does not creep up as the pool
grows nor saw-tooth at refits. The snapshot keeps the newest ``eta_window`` of these values.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from wmrl.anchor_rule import REASONS, AnchorDecision, RuleInputs, clears_world_model
from wmrl.calibration.audit import AuditReport, AuditThresholds, audit_pool
from wmrl.calibration.debias import Debiaser, as_scores, cross_fitted
from wmrl.calibration.denoise import Denoiser
from wmrl.calibration.pool import LOG_NAME, AnchorPair, AnchorPool, read_log
from wmrl.io import atomic_write_json, read_json

STATE_NAME = "calibrator.json"
AUDIT_NAME = "audit.json"  # the latest Assumption-6 audit, for `wmrl status` and people
# 2: prequential residuals; 3: f_hat continued beyond its end knots (MonotoneMap) and the audit
# schedule. An older snapshot is rebuilt from the log on load (the new map rescoring every pair).
FORMAT = 3
CHASED_KEEP = 1024  # how many recent calibrate() inputs the coverage audit looks at
SNAPSHOT_EVERY = 64  # logged steps between automatic snapshots (bounds the replay on load)

log = logging.getLogger(__name__)


class CalibrationSettings(Protocol):
    """What a Calibrator reads of the algorithm's config (``wmrl.algorithm.AlgorithmConfig`` is one)."""

    min_pairs: int  # the debiaser is the identity until this many pairs
    refit_every: int  # refit after every this many new pairs
    eta_window: int  # eta^2 over the newest this-many prequential residuals
    w_max: float  # rho is clipped to [1, w_max]


class Calibrator:
    def __init__(
        self,
        cfg: CalibrationSettings,
        directory: Path | None = None,
        *,
        debias: bool = True,
        denoise: bool = True,
        durable: bool = True,
    ) -> None:
        self.cfg = cfg
        self.directory = None if directory is None else Path(directory)
        if self.directory is not None and (self.directory / STATE_NAME).exists():
            raise FileExistsError(
                f"{self.directory} already holds calibration state; use Calibrator.load() to resume"
            )
        self.debias, self.denoise = bool(debias), bool(denoise)
        self.pool = AnchorPool(self.directory, durable=durable)
        self.debiaser = Debiaser(min_pairs=cfg.min_pairs, refit_every=cfg.refit_every)
        self.denoiser = Denoiser(w_max=cfg.w_max)
        self.last_step = -1
        self._chased = np.empty(0, dtype=np.float64)  # recent world-model scores (audit coverage)
        self._prequential: list[float] = []  # per pool pair: its calibrated score out of sample
        self._audit_streaks: dict[str, int] = {}  # consecutive audits each check has flagged
        self._audit_at = 0  # pool size when the last audit fell due (0: none yet)
        self.audit_due = False  # the last observe() brought the pool to an audit point
        self._unsaved = 0  # logged steps since the last snapshot
        # The anchor rule's latest decision (wmrl/anchor_rule.py), for metrics and `wmrl status`; the
        # next one is a pure function of the state above (rule_inputs), so a resume recomputes it exactly.
        self.anchor: AnchorDecision | None = None
        self.groups_per_step = 0  # m of the decision, for its fraction
        # The rate form's carry (algorithm.anchor_max_gap >= 1): not a function of the pool, so it is saved
        # with the snapshot, with the number of steps decided so far (the step it belongs to). Only once
        # the rate form decided: the fixed rule's and the whole-group form's snapshots stay as they were.
        self.anchor_carry = 0.0
        self.anchor_decisions = 0
        self.rate_form = False
        # Pool size at the first audit that cleared the world model (ran flat_top and monotonicity, neither
        # flagged: algorithm.world_model_from = audit); None until then. A pool size, not a flag, so that
        # a load as of an earlier step (fewer pairs) finds it not yet cleared.
        self.world_model_cleared_at: int | None = None
        if self.directory is not None:
            self.save()  # the flags and the empty state: load() always finds a snapshot

    # ------------------------------------------------------------------ per step
    @property
    def warmed_up(self) -> bool:
        """Warm-up ends when the pool first reaches ``min_pairs`` (= the first fit when debiasing)."""
        return len(self.pool) >= self.cfg.min_pairs

    def observe(self, pairs: Sequence[AnchorPair], step: int) -> None:
        """Add this step's anchor pairs; refit f_hat if due; update eta2 and rho; persist."""
        if step < self.last_step:
            raise ValueError(f"step {step} is older than the last observed step {self.last_step}")
        self.last_step = int(step)
        self.audit_due = False
        added = self.pool.add(pairs, step=step)
        if added == 0:
            return  # no new anchors this step: f_hat, eta2 and rho stay as they were
        self._update(added)
        self._unsaved += 1
        if self.directory is not None and self._unsaved >= SNAPSHOT_EVERY:
            self.save()

    def _update(self, added: int) -> None:
        """Score the ``added`` newest pairs with the current map (prequential), refit if due (Eq. 4),
        then eta2/rho on the recent window (Eq. 5 weight); deterministic."""
        new_pred = self.pool.arrays(last=added)[0]
        # denoise_only (no debiasing): the residual is that of the raw r_hat
        self._prequential.extend((self.debiaser(new_pred) if self.debias else new_pred).tolist())
        if self.debias and self.debiaser.update(*self.pool.arrays()) and self.debiaser.n_refits == 1:
            # End of warm-up: these pairs met no map before; score each group by a map fit without it.
            pred, true = self.pool.arrays()
            groups = [p.group_id for p in self.pool.recent(len(self.pool))]
            if len(set(groups)) < 2:
                groups = [str(i) for i in range(len(groups))]  # one group only: leave-pairs-out
            if len(groups) >= 2:
                self._prequential = cross_fitted(pred, true, groups, extrapolate=True).tolist()
        window = self.pool.recent(self.cfg.eta_window)
        r = self.pool.arrays(last=len(window))[1]
        calibrated = np.asarray(self._prequential[len(self._prequential) - len(window) :])
        self.denoiser.update(calibrated, r, [p.group_id for p in window], self.warmed_up)
        # The audit schedule, the same for every variant with a pool: at the end of warm-up, then once
        # refit_every new pairs have arrived (with debiasing: exactly at each refit). denoise_only never
        # refits, and a trainer that audited "when the map changed" never audited it.
        n = len(self.pool)
        if self.warmed_up and (self._audit_at == 0 or n - self._audit_at >= self.cfg.refit_every):
            self._audit_at, self.audit_due = n, True

    def calibrate(self, r_hat: ArrayLike) -> np.ndarray:
        """f_hat(r_hat) (Eq. 4); identity before ``min_pairs`` pairs or when debiasing is off. Pure."""
        x = as_scores("r_hat", r_hat)
        return self.debiaser(x) if self.debias else x.copy()

    def record_chased(self, r_hat: ArrayLike) -> None:
        """Keep the world-model scores the policy is trained on ("the scores GRPO chases") for the
        audit's coverage check; the step calls it once per step with its world-model groups' r_hat."""
        flat = as_scores("r_hat", r_hat).ravel()
        self._chased = np.concatenate([self._chased, flat[-CHASED_KEEP:]])[-CHASED_KEEP:]

    @property
    def rho(self) -> float:
        """Anchor-group weight of Eq. 5; 1.0 when denoising is off or before warm-up."""
        return self.denoiser.rho if self.denoise else 1.0

    def rule_inputs(self) -> RuleInputs:
        """What the anchor rule reads: eta2, eta2_cal, warm-up and the checks the latest audit flagged."""
        d = self.denoiser
        flagged = tuple(c for c, streak in sorted(self._audit_streaks.items()) if streak > 0)
        return RuleInputs(self.warmed_up, d.eta2, d.eta2_cal, flagged, self.anchor_carry)

    @property
    def world_model_cleared(self) -> bool:
        """Whether an audit has found that the world model can rank (see ``clears_world_model``)."""
        return self.world_model_cleared_at is not None

    def warned(self, check: str, persist: int | None = None) -> bool:
        """Whether ``check`` has flagged at ``persist`` consecutive audits (the audit's warning rule)."""
        need = AuditThresholds().persist if persist is None else persist
        return self._audit_streaks.get(check, 0) >= need

    def record_anchor(self, decision: AnchorDecision, groups_per_step: int) -> None:
        """The decision a step is about to draw: shown until the next, and its carry is what the next reads."""
        self.anchor, self.groups_per_step = decision, groups_per_step
        self.anchor_carry, self.anchor_decisions = decision.carry, self.anchor_decisions + 1
        self.rate_form = self.rate_form or decision.rate is not None

    def snapshot(self) -> dict[str, float]:
        nan = float("nan")
        d = self.denoiser
        return {
            "n_pairs": float(len(self.pool)),
            "n_refits": float(self.debiaser.n_refits),
            "fitted": float(self.debiaser.fitted and self.debias),
            "eta2": nan if d.eta2 is None else d.eta2,
            "eta2_cal": nan if d.eta2_cal is None else d.eta2_cal,
            "rho": self.rho,
            "last_step": float(self.last_step),
            **self._anchor_metrics(),
        }

    def _anchor_metrics(self) -> dict[str, float]:
        """``anchor/frac`` and ``anchor/reason`` (the index of the reason in REASONS: metrics are numbers);
        in the rate form also ``anchor/rate``, the share of the m groups the rule asks for on average."""
        if self.anchor is None or not self.groups_per_step:
            return {}
        rate = {} if self.anchor.rate is None else {"anchor/rate": self.anchor.rate / self.groups_per_step}
        return {"anchor/frac": self.anchor.frac(self.groups_per_step),
                "anchor/reason": float(REASONS.index(self.anchor.reason)), **rate}

    def audit(self, thresholds: AuditThresholds | None = None) -> AuditReport:
        """Assumption-6 audit of the pool (see wmrl/calibration/audit.py); logs its warnings.

        Meant to run at every refit: a check warns only once it has flagged at several consecutive
        audits of this calibrator (the streaks survive a restart through ``audit.json``).
        """
        t = thresholds or AuditThresholds()
        pred, true = self.pool.arrays(last=t.max_pairs)
        pairs = self.pool.recent(len(pred))
        report = audit_pool(
            pred,
            true,
            groups=[p.group_id for p in pairs],
            tasks=[p.task_id for p in pairs],
            chased=self._chased if len(self._chased) else None,
            recent_window=self.cfg.eta_window,
            thresholds=t,
            streaks=self._audit_streaks,
        )
        self._audit_streaks = dict(report.streaks)
        if self.world_model_cleared_at is None and clears_world_model(report.checked, report.flags):
            self.world_model_cleared_at = len(self.pool)
        for message in report.warnings:
            log.warning("calibration audit: %s", message)
        if self.directory is not None:
            atomic_write_json(self.directory / AUDIT_NAME, _finite_or_none(report.to_dict()))
        return report

    # ------------------------------------------------------------------ persistence
    def save(self) -> None:
        """Atomically replace the snapshot (the log already holds every observed pair)."""
        if self.directory is None:
            raise ValueError("this Calibrator has no directory (in-memory); pass one to persist it")
        state = {
            "format": FORMAT,
            "n_pairs": len(self.pool),
            "last_step": self.last_step,
            "debias": self.debias,
            "denoise": self.denoise,
            "debiaser": self.debiaser.to_state(),
            "denoiser": self.denoiser.to_state(),
            "chased": self._chased.tolist(),  # restored as of the last snapshot
            "audit_at": self._audit_at,
            # eta2 only ever reads the newest eta_window out-of-sample scores
            "prequential": self._prequential[len(self._prequential) - self.cfg.eta_window :],
            "anchor": None if self.anchor is None else {
                "groups": self.anchor.groups, "reason": self.anchor.reason, "detail": self.anchor.detail,
                "groups_per_step": self.groups_per_step, **self._rate_form_state()},
        }
        if self.world_model_cleared_at is not None:
            state["world_model_cleared_at"] = self.world_model_cleared_at
        if self.rate_form:
            state.update(anchor_carry=self.anchor_carry, anchor_decisions=self.anchor_decisions)
        atomic_write_json(self.directory / STATE_NAME, state)
        self._unsaved = 0

    def _rate_form_state(self) -> dict[str, float]:
        """The rate form's part of the latest decision (none in the whole-group form and the fixed rule)."""
        if self.anchor is None or self.anchor.rate is None:
            return {}
        return {"rate": self.anchor.rate, "carry": self.anchor.carry}

    @classmethod
    def load(cls, cfg: CalibrationSettings, directory: Path, *, step: int | None = None) -> Calibrator:
        """Resume exactly: same pool, same f_hat (bit-identical outputs), same eta2/eta2_cal/rho.

        ``step``: restore the state as of the end of that step (e.g. the trainer's checkpoint);
        logged steps after it are ignored and cut off at the next ``observe``.
        """
        directory = Path(directory)
        path = directory / STATE_NAME
        if not path.exists():
            raise FileNotFoundError(f"no calibration state in {directory} (expected {STATE_NAME})")
        state = read_json(path)
        if state.get("format") not in (1, 2, FORMAT):
            raise ValueError(f"{path}: unsupported format {state.get('format')!r} (reads 1 to {FORMAT})")
        # In memory while the snapshot and the log are replayed into it; attached at the end.
        cal = cls(cfg, debias=state["debias"], denoise=state["denoise"])
        records = read_log(directory, max_step=step) if (directory / LOG_NAME).exists() else []
        done = 0  # records covered by the snapshot
        # An older snapshot (other residuals, another map): rebuild everything from the log instead.
        if state["format"] == FORMAT and (step is None or state["last_step"] <= step):
            counts = np.cumsum([0] + [len(batch) for _, batch, _ in records])
            hits = np.flatnonzero(counts == state["n_pairs"])
            if not len(hits):
                raise ValueError(
                    f"{path} covers {state['n_pairs']} pairs but {directory / LOG_NAME} has no record "
                    f"boundary there (it holds {counts[-1]}); the log is truncated or corrupt"
                )
            done = int(hits[0])
            for _, batch, _ in records[:done]:
                cal.pool.extend_loaded(batch)
            cal.debiaser = Debiaser.from_state(
                state["debiaser"], min_pairs=cfg.min_pairs, refit_every=cfg.refit_every
            )
            cal.denoiser = Denoiser.from_state(state["denoiser"], w_max=cfg.w_max)
            cal.last_step = int(state["last_step"])
            cal._chased = np.asarray(state["chased"], dtype=np.float64)
            cal._audit_at = int(state["audit_at"])
            tail = [float(v) for v in state["prequential"]]
            cal._prequential = [math.nan] * (len(cal.pool) - len(tail)) + tail
        # else: the snapshot is newer than the requested step; rebuild from the start of the log.
        for record_step, batch, _ in records[done:]:  # replay exactly what observe() did
            cal.pool.extend_loaded(batch)
            cal._update(len(batch))
            cal.last_step = max(cal.last_step, record_step)
        previous = read_audit(directory)  # the persistence rule's streaks continue across a restart
        cal._audit_streaks = dict(previous.get("streaks") or {}) if previous else {}
        if state.get("anchor"):  # the last decision, for display until the next step decides again
            a = state["anchor"]
            cal.anchor = AnchorDecision(int(a["groups"]), str(a["reason"]), str(a["detail"]),
                                        None if a.get("rate") is None else float(a["rate"]),
                                        float(a.get("carry", 0.0)))
            cal.groups_per_step = int(a["groups_per_step"])
        cal.anchor_carry, cal.anchor_decisions = _anchor_carry(state, step, path)
        cal.rate_form = "anchor_carry" in state
        cleared = state.get("world_model_cleared_at")
        cal.world_model_cleared_at = None if cleared is None or cleared > len(cal.pool) else int(cleared)
        cal.directory = directory
        cal.pool.attach(directory, records[-1][2] if records else 0)
        cal._unsaved = len(records) - done
        cal.audit_due = False  # due is what the next observe() says
        return cal


def _anchor_carry(state: dict[str, Any], step: int | None, path: Path) -> tuple[float, int]:
    """The rate form's carry and decision count from a snapshot, for a load as of ``step`` (None: its own).

    The carry is exact when the snapshot was saved after step ``step`` (the coordinator saves one at
    every step boundary and restores a checkpoint's copy); a snapshot of another step has another
    step's carry, below one group either way: kept, with a warning (the running mean may then differ
    from an uninterrupted run's by one group)."""
    carry, decisions = float(state.get("anchor_carry", 0.0)), int(state.get("anchor_decisions", 0))
    if step is not None and decisions and decisions != step + 1:
        log.warning("%s: the anchor rule's carry is that after %d decided steps, not %d; kept", path,
                    decisions, step + 1)
        return carry, step + 1
    return carry, decisions


def read_audit(directory: Path) -> dict[str, Any] | None:
    """The latest audit written by :meth:`Calibrator.audit` in ``directory`` (None before the first)."""
    try:
        return read_json(Path(directory) / AUDIT_NAME)
    except (FileNotFoundError, ValueError):
        return None


def _finite_or_none(node: Any) -> Any:
    """JSON has no NaN: undefined audit numbers (a check that was skipped) become null."""
    if isinstance(node, dict):
        return {k: _finite_or_none(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_finite_or_none(v) for v in node]
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return node
