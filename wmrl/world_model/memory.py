"""The executed-solution memory: a graded quality prediction learned from everything really executed.

A tiny LM cannot learn from a few hundred quality answers which of two close variants of a reference
scores higher (docs/world-model.md, "Does the tiny world model rank?"), but the information is in the
code: a bag of its identifiers and numbers with a ridge regression ranks held-out references. The memory
is that regression, fitted on solutions whose real outcome is known, and it answers the quality check in
place of the LLM (``world_model.memory``, beyond the paper; the LLM still answers the other checks):

- **examples**: the training tasks' references with the real scores their leaderboard runs gave them,
  their broken variants executed once (the SFT's and the agent's own mistakes, cached), the initial
  policy's own samples executed once (``world_model.memory_policy_samples``), and, with
  ``world_model.memory_online``, the anchor groups' executed solutions as a run goes (the distribution
  the world model is asked about); held-out references never (``wmrl.world_model_data.examples.memory_examples``);
- **two models** over TF-IDF features (scikit-learn): P(runs and writes a valid submission) by a
  class-balanced logistic regression over the code's lines (each also paired with its task: a
  submission line naming one task's target column is right there and wrong elsewhere) and identifier
  n-grams, and the score if it runs by a ridge regression over identifier n-grams of the valid examples;
- **the answer**: q = P(valid) x score-if-valid, clipped to [0, 1]: continuous, so the isotonic map has a
  graded r_hat to calibrate; a solution the memory holds verbatim gets its real score (exact).

Its verdict is an ordinary quality verdict (``source="memory"``): r_hat = min(q, the LLM's failure
caps), as with the LLM's own quality answer (``aggregate.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.io import append_line_durable, atomic_write_text
from wmrl.rollout import Groups, content_key
from wmrl.world_model.prompts import QUALITY
from wmrl.world_model.verdict import CheckVerdict

MEMORY = "memory"
# Identifiers and numbers: what distinguishes one approach (model, features, hyper-parameters) from another.
IDENTIFIER_TOKENS = r"[A-Za-z_][A-Za-z0-9_]*|\d+\.?\d*"
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Executed:
    """A solution whose real outcome is known: its position score (0 when invalid) and validity."""

    task_id: str
    code: str
    score: float
    valid: bool

    @property
    def key(self) -> str:
        return content_key(self.task_id, self.code)


def code_lines(code: str) -> list[str]:
    """A program's non-blank, non-comment lines, whitespace-normalised: the unit a mistake changes."""
    lines = (_SPACE.sub(" ", line.strip()) for line in code.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _task_token(task_id: str) -> str:
    return "TASK_" + re.sub(r"\W", "_", task_id)


def task_lines(document: str) -> list[str]:
    """A document's code lines, each also paired with its task (the first line): a line that is right in
    one task (a submission naming its target column) and wrong in another stays two features."""
    task, _, code = document.partition("\n")
    lines = code_lines(code)
    return lines + [f"{task}|{line}" for line in lines]


@dataclass(frozen=True)
class MemoryPrediction:
    quality: float  # q = p_valid * score_if_valid, in [0, 1]
    p_valid: float
    score_if_valid: float
    exact: bool  # the memory holds this very solution: quality is its real score

    def verdict(self) -> CheckVerdict:
        """The quality check's verdict (``confidence`` = q), as the LLM's answer would carry it."""
        how = ("this solution was executed before" if self.exact else
               f"P(valid) {self.p_valid:.2f} x score if valid {self.score_if_valid:.2f}")
        return CheckVerdict(QUALITY, "pass", self.quality, None, None, "", f"Executed-solution memory: {how}.",
                            "ok", [], source=MEMORY)


class ExecutedMemory:
    """Fits on :class:`Executed` solutions; :meth:`predict` answers the quality check for new code.

    ``add`` records more solutions (the run's anchors); the models are refitted on the next ``predict``
    (a few seconds for a few thousand programs). Deterministic in the examples and their order.
    """

    def __init__(self, examples: Iterable[Executed] = (), c_valid: float = 1000.0, ridge_alpha: float = 1.0) -> None:
        self.c_valid = c_valid
        self.ridge_alpha = ridge_alpha
        self.examples: list[Executed] = []
        self._known: dict[str, Executed] = {}
        self._fitted: tuple[Any, ...] | None = None
        self.add(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def add(self, examples: Iterable[Executed]) -> int:
        """Record solutions not already held (by content); returns how many were new."""
        new = 0
        for example in examples:
            if example.key in self._known:
                continue
            self._known[example.key] = example
            self.examples.append(example)
            new += 1
        if new:
            self._fitted = None
        return new

    def _documents(self, task_ids: list[str], codes: list[str], separator: str = " ") -> list[str]:
        """Each code after its task token: one text for the n-grams (" "), or the task as the first line
        for ``task_lines`` ("\n")."""
        return [f"{_task_token(t)}{separator}{c}" for t, c in zip(task_ids, codes, strict=True)]

    def _fit(self) -> tuple[Any, ...]:
        from scipy.sparse import hstack
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression, Ridge

        task_ids, codes = [e.task_id for e in self.examples], [e.code for e in self.examples]
        docs = self._documents(task_ids, codes)
        valid = np.array([e.valid for e in self.examples], dtype=bool)
        scores = np.array([e.score for e in self.examples], dtype=float)
        words = TfidfVectorizer(token_pattern=IDENTIFIER_TOKENS, sublinear_tf=True, ngram_range=(1, 3)).fit(docs)
        line_docs = self._documents(task_ids, codes, "\n")
        lines = TfidfVectorizer(analyzer=task_lines, binary=True).fit(line_docs)
        x_words = words.transform(docs)
        classifier: Any = float(valid.mean())  # one class only: its rate is the prediction
        if 0 < valid.sum() < len(valid):
            x = hstack([lines.transform(line_docs), x_words]).tocsr()
            classifier = LogisticRegression(C=self.c_valid, class_weight="balanced", max_iter=5000).fit(x, valid)
        regressor: Any = 0.5  # nothing valid to learn a score from: the calibration policy's prior
        if valid.any():
            regressor = Ridge(alpha=self.ridge_alpha).fit(x_words[valid], scores[valid])
        return words, lines, classifier, regressor

    def predict(self, task_ids: list[str], codes: list[str]) -> list[MemoryPrediction]:
        if not codes:
            return []
        if not self.examples:
            raise ValueError("the executed-solution memory is empty: nothing to predict from")
        if self._fitted is None:
            self._fitted = self._fit()
        from scipy.sparse import hstack

        words, lines, classifier, regressor = self._fitted
        x_words = words.transform(self._documents(task_ids, codes))
        if isinstance(classifier, float):
            p_valid = np.full(len(codes), classifier)
        else:
            x = hstack([lines.transform(self._documents(task_ids, codes, "\n")), x_words]).tocsr()
            p_valid = classifier.predict_proba(x)[:, 1]
        score = np.full(len(codes), regressor) if isinstance(regressor, float) else regressor.predict(x_words)
        score = np.clip(score, 0.0, 1.0)
        out = []
        for i, (task_id, code) in enumerate(zip(task_ids, codes, strict=True)):
            known = self._known.get(content_key(task_id, code))
            if known is not None:
                out.append(MemoryPrediction(known.score, float(known.valid), known.score, True))
            else:
                out.append(MemoryPrediction(float(p_valid[i] * score[i]), float(p_valid[i]), float(score[i]), False))
        return out


# ---------------------------------------------------------------- online: the run's anchors join the memory


def executed_solutions(groups: Groups, anchor: Sequence[bool]) -> list[Executed]:
    """Every submission of the anchor groups (really executed) that got a real score, from its turns'
    feedback (an infrastructure failure, score None, says nothing about the code and is left out)."""
    out = []
    for group, is_anchor in zip(groups, anchor, strict=True):
        if not is_anchor:
            continue
        for trajectory in group:
            for turn in trajectory.turns:
                feedback = turn.feedback
                if turn.code is not None and feedback is not None and feedback.score is not None:
                    out.append(Executed(trajectory.task_id, turn.code, float(feedback.score), bool(feedback.valid)))
    return out


class OnlineLog:
    """The solutions a run added to its memory, one JSON line per solution with its step, so that a
    resumed run rebuilds the memory it had at its checkpoint (``rewind``), no more and no less."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def append(self, step: int, examples: Sequence[Executed]) -> None:
        for example in examples:
            append_line_durable(self.path, _line(step, example))

    def read(self, before_step: int) -> list[Executed]:
        """The solutions added by the steps before ``before_step``."""
        return [example for _, example in self._rows(before_step)]

    def rewind(self, step: int) -> list[Executed]:
        """Keep (and return) only what the steps before ``step`` added: a resumed run replays the others
        and logs them again."""
        rows = self._rows(step)
        if self.path.exists():
            atomic_write_text(self.path, "".join(_line(s, e) + "\n" for s, e in rows))
        return [example for _, example in rows]

    def _rows(self, before_step: int) -> list[tuple[int, Executed]]:
        """(step, solution) of each readable line; a torn last line (a kill mid-write) is skipped."""
        if not self.path.exists():
            return []
        rows = []
        for line in self.path.read_text().splitlines():
            try:
                row = json.loads(line)
                example = Executed(str(row["task_id"]), str(row["code"]), float(row["score"]), bool(row["valid"]))
                step = int(row["step"])
            except (ValueError, KeyError, TypeError):
                continue
            if step < before_step:
                rows.append((step, example))
        return rows


def _line(step: int, example: Executed) -> str:
    return json.dumps({"step": step, **asdict(example)}, sort_keys=True)
