"""Configs packaged with wmrl: ``tiny.yaml``, the embedded default of ``wmrl train`` and ``wmrl sft``."""

from pathlib import Path

TINY_CONFIG = Path(__file__).resolve().parent / "tiny.yaml"
