"""What an evaluation of the world model must not have seen: programs compared by normalised code, and
near-copies.

- :func:`normalised_code`: the program without the pool's header docstring (:func:`clean_reference`)
  and its comments, each line's whitespace normalised, blank lines dropped (``code_lines``): two
  programs that differ only there are the same program.
- **near-copy**: a program of the same task whose normalised tokens (names, numbers, operators) have a
  difflib ``SequenceMatcher.ratio`` (no junk heuristic) of at least ``NEAR_COPY_RATIO`` (0.9) with it.
  The built-in references of one task are one template that differs by a line or a number (ratio 0.95
  and more), so a near-copy of a reference is its task's sibling as much as its copy; a broken variant
  of it (one line changed) is one too. Across tasks the template is the same as well (the same loader
  and model lines: ratios of 0.8-0.98 over the tokens), but a program for another task names other
  data and columns and has its own outcome: ``by_task=False`` measures that similarity apart.

``benchmarks/eval_world_model.py`` drops the evaluated variants that are in the SFT data (which it
cannot change), counts those with a near-copy there, and removes from the memory every example that
is a near-copy of an evaluated one.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher

from wmrl.world_model.memory import Executed, code_lines
from wmrl.world_model_data.variants import clean_reference

NEAR_COPY_RATIO = 0.9
_TOKEN = re.compile(r"\w+|[^\w\s]")


def normalised_code(code: str) -> str:
    """``code`` without the pool's header and comments, whitespace-normalised, blank lines dropped."""
    code = clean_reference(code)
    try:  # comments by the tokenizer, so that a "#" inside a string stays
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type != tokenize.COMMENT]
        code = tokenize.untokenize(tokens)
    except (tokenize.TokenError, SyntaxError):
        pass  # a cut reply does not tokenize: its whole-line comments still go (code_lines)
    return "\n".join(code_lines(code))


def code_tokens(code: str) -> list[str]:
    """The normalised program's tokens: what the near-copy ratio compares."""
    return _TOKEN.findall(normalised_code(code))


class NearCopies:
    """Programs to hold out, by task; :meth:`holds` says whether a program is one of them or a near-copy."""

    def __init__(self, programs: Iterable[tuple[str, str]], threshold: float = NEAR_COPY_RATIO,
                 by_task: bool = True) -> None:
        """``programs``: (task id, code) pairs; with ``by_task`` False a program is compared with every
        task's."""
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-copy threshold {threshold!r}: allowed 0 < threshold <= 1")
        self.threshold, self.by_task = threshold, by_task
        self._normalised: set[tuple[str, str]] = set()
        self._tokens: dict[str, list[list[str]]] = {}
        for task_id, code in programs:
            held = (self._task(task_id), normalised_code(code))
            if held not in self._normalised:
                self._normalised.add(held)
                self._tokens.setdefault(held[0], []).append(_TOKEN.findall(held[1]))

    def _task(self, task_id: str) -> str:
        return task_id if self.by_task else ""

    def __len__(self) -> int:
        return len(self._normalised)

    def copies(self, task_id: str, code: str) -> bool:
        """``code`` is one of the held programs (of its task) once normalised."""
        return (self._task(task_id), normalised_code(code)) in self._normalised

    def holds(self, task_id: str, code: str) -> bool:
        """``code`` is a copy or a near-copy of a held program (of its task)."""
        if self.copies(task_id, code):
            return True
        matcher = SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(code_tokens(code))  # the matcher indexes seq2 once for every held program
        for tokens in self._tokens.get(self._task(task_id), []):
            matcher.set_seq1(tokens)
            # real_quick_ratio and quick_ratio bound the ratio from above, at a fraction of its cost
            if (matcher.real_quick_ratio() >= self.threshold and matcher.quick_ratio() >= self.threshold
                    and matcher.ratio() >= self.threshold):
                return True
        return False


def split_near_copies(examples: Sequence[Executed], evaluated: NearCopies) -> tuple[list[Executed], list[Executed]]:
    """``examples`` (the memory's) as (kept, removed): removed, each a near-copy of an evaluated program."""
    kept: list[Executed] = []
    removed: list[Executed] = []
    for example in examples:
        (removed if evaluated.holds(example.task_id, example.code) else kept).append(example)
    return kept, removed
