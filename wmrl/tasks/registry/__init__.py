"""What wmrl knows about MLE-Dojo's and MLE-bench's competitions: which of its metrics each one's
own metric code computes (``mledojo.yaml``: metric class + fingerprint of its ``evaluate``;
``mlebench.yaml``: grader name), or why wmrl cannot grade it. Data, reviewed by reading each
competition's code; the loaders never guess a metric from prose."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def registry(benchmark: str) -> dict[str, dict[str, Any]]:
    """``{competition_id: entry}`` for ``benchmark`` in ("mledojo", "mlebench")."""
    text = resources.files(__name__).joinpath(f"{benchmark}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text) or {}
