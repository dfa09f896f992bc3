"""Sweeps of runs (``wmrl sweep``) and their comparison (``wmrl compare``); see docs/sweeps.md."""
