"""The texts the tiny model's tokenizer is trained on: what the model will read and write.

Task overviews (the agent's user prompt: description, data inventory, contract), sample submissions,
every reference solution of the pool, prompt texts handed in by the caller, and a fixed block of
generic English and Python so that prose the pool lacks still gets reasonable merges. The order is
fixed (tasks sorted by id, references in the pool's order), so the same pool gives the same merges.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from wmrl.tasks import load_pool, task_overview

GENERIC_TEXT = '''\
The task is a supervised learning problem. I will read the training data from DATA_DIR, fit a model
on the features, predict the test rows and write the submission to SUBMISSION_PATH. The data is small,
so a simple model trained on all rows should work well, and a stronger model may improve the score.
First I check the columns and the target, then I handle missing values and scale the features.
The previous attempt failed because a column name was wrong; this version uses the columns listed in
the data inventory. The submission must have the same columns and ids as the sample submission.
Execution feedback: the script ran successfully and wrote a valid submission. Validation accuracy improved.
Error: Traceback (most recent call last): File "solution.py", line 12, in <module>
KeyError: 'target' ModuleNotFoundError: No module named 'xgboost' ValueError: shapes do not match
The solution is valid. The verdict is pass with high confidence. The verdict is fail: the code reads a
file that does not exist. reason verdict confidence error_type error_line env_feedback score pass fail
{"reason": "The code imports only installed packages.", "verdict": "pass", "confidence": 0.9,
 "error_type": null, "error_line": null, "env_feedback": "Submission written: 300 rows."}

```python
import os

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

DATA_DIR = os.environ["DATA_DIR"]
SUBMISSION_PATH = os.environ["SUBMISSION_PATH"]

train = pd.read_csv(os.path.join(DATA_DIR, "train.csv"))
test = pd.read_csv(os.path.join(DATA_DIR, "test.csv"))
features = [c for c in train.columns if c not in ("id", "target")]
X_train, X_valid, y_train, y_valid = train_test_split(train[features], train["target"], random_state=0)
model = LogisticRegression(max_iter=1000)
model.fit(X_train, y_train)
print("validation accuracy:", (model.predict(X_valid) == y_valid).mean())
submission = pd.DataFrame({"id": test["id"], "target": model.predict(test[features])})
submission.to_csv(SUBMISSION_PATH, index=False)
```
'''


def pool_parts(pool_root: Path) -> list[tuple[str, str]]:
    """``(name, text)`` of the pool's corpus texts in corpus order: each task's overview and
    sample-submission head (public files), and the reference solutions of the training split only
    (held-out solutions must not become single tokens the policy gets for free). The names
    (``TASK/overview``, ``TASK/sample_submission``, ``TASK/reference/NAME``) let two builds be compared
    text by text (scripts/build_fingerprint.py)."""
    parts: list[tuple[str, str]] = []
    for task in load_pool(Path(pool_root)):
        parts.append((f"{task.task_id}/overview", task_overview(task)))
        with open(task.sample_submission_path, encoding="utf-8") as handle:
            parts.append((f"{task.task_id}/sample_submission", "".join(handle.readline() for _ in range(5))))
        if task.split == "train":
            parts.extend((f"{task.task_id}/reference/{ref.name}", ref.code) for ref in task.reference_solutions())
    return parts


def tokenizer_corpus_parts(pool_root: Path, prompt_texts: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The tokenizer corpus with a name for each text (see :func:`pool_parts`)."""
    return [("generic", GENERIC_TEXT), *((f"prompt/{i}", t) for i, t in enumerate(prompt_texts)),
            *pool_parts(pool_root)]


def tokenizer_corpus(pool_root: Path, prompt_texts: Sequence[str] = ()) -> list[str]:
    return [text for _, text in tokenizer_corpus_parts(pool_root, prompt_texts)]


def corpus_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.hexdigest()


# Modules whose ``tokenizer_texts() -> list[str]`` adds the prompts they render (system prompts,
# world-model checks) to the tokenizer corpus. A module that is missing or lacks the function adds
# nothing; what they return is part of the tiny model's cache key.
PROMPT_MODULES = ("wmrl.agent.prompts", "wmrl.world_model.prompts")


def prompt_texts() -> list[str]:
    import importlib

    texts: list[str] = []
    for name in PROMPT_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if not err.name or not (name == err.name or name.startswith(err.name + ".")):
                raise  # a missing dependency inside the module is a real error
            continue
        hook = getattr(module, "tokenizer_texts", None)
        if callable(hook):
            texts.extend(str(t) for t in hook())
    return texts
