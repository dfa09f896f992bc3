"""A sweep specification (``sweeps/*.yaml``) and its expansion into runs.

A sweep is a list of runs; each run is a config file + ``key=value`` overrides + its own run
directory + its own MLflow run (a child of the sweep's parent run). The spec::

    name: anchor_frac_wmax          # the sweep directory is <runs_root>/sweeps/<name>
    kind: simulate                  # simulate: one `wmrl simulate` (variant, seed) run per point;
                                    # launch: one coordinator run (`wmrl launch`, e.g. trainer=...)
    config: configs/simulate.yaml   # relative to the current directory, as `wmrl launch` reads it
    overrides: [train.steps=400]
    seeds: [0, 1, 2, 3, 4]
    groups:                         # each group: variants x the product of its grid x seeds
      - variants: [wmrl, denoise_only]
        grid: {algorithm.anchor_frac: [0.05, 0.1], algorithm.w_max: [1, 4]}
      - variants: [grpo_real, pure_wm]
        seeds: [0, 1]               # a group's own seeds replace the spec's

Every run's config is loaded (and so validated) when the spec is, so a bad key in any point of the
grid fails before anything runs, naming the spec file, the run and the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from wmrl.config import VARIANTS, ConfigError, WMRLConfig, load_config

KINDS = ("simulate", "launch")
SPEC_KEYS = ("name", "kind", "config", "overrides", "seeds", "groups")
GROUP_KEYS = ("variants", "grid", "seeds")


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: its name (= its run directory's name) and its overrides."""

    name: str
    variant: str
    seed: int
    point: tuple[tuple[str, Any], ...]  # the grid point, (key, value) in the spec's order
    overrides: tuple[str, ...]  # everything after the config file, the sweep's own keys last


@dataclass
class SweepSpec:
    name: str
    kind: str
    config: str | None
    overrides: list[str]
    seeds: list[int]
    groups: list[dict[str, Any]]
    source: str = "<spec>"
    runs: list[RunSpec] = field(default_factory=list)

    def digest(self) -> str:
        """Identity of what the sweep runs: a re-issued sweep must be the same sweep."""
        body = json.dumps([self.kind, self.config, self.overrides, [r.overrides for r in self.runs]])
        return hashlib.sha256(body.encode()).hexdigest()[:16]


def _value_name(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_name(variant: str, point: tuple[tuple[str, Any], ...], seed: int) -> str:
    """``wmrl_anchor_frac=0.05_w_max=4_s0``: the last part of each key, readable in MLflow and ls."""
    parts = [variant, *(f"{k.rsplit('.', 1)[-1]}={_value_name(v)}" for k, v in point), f"s{seed}"]
    return "_".join(parts)


def _fail(source: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {message}")


def _check_keys(source: str, where: str, node: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(node) - set(allowed))
    if unknown:
        raise _fail(source, f"unknown key(s) {', '.join(unknown)} in {where}; allowed: {', '.join(allowed)}")


def parse_spec(data: Any, source: str = "<spec>") -> SweepSpec:
    if not isinstance(data, dict):
        raise _fail(source, f"the top level must be a mapping with keys {', '.join(SPEC_KEYS)}")
    _check_keys(source, "the top level", data, SPEC_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise _fail(source, f"name={name!r} must be a non-empty name without '/'")
    kind = data.get("kind", "simulate")
    if kind not in KINDS:
        raise _fail(source, f"kind={kind!r} is not allowed; choose one of: {', '.join(KINDS)}")
    overrides = [str(o) for o in data.get("overrides") or []]
    if any("=" not in o for o in overrides):
        raise _fail(source, f"overrides must be key=value strings, got {overrides}")
    seeds = _seeds(source, "seeds", data.get("seeds", [0]))
    groups = data.get("groups")
    if not isinstance(groups, list) or not groups:
        raise _fail(source, "groups must be a non-empty list of {variants: [...], grid: {key: [values]}}")
    spec = SweepSpec(name, kind, data.get("config"), overrides, seeds, groups, source)
    spec.runs = _expand(spec)
    return spec


def _seeds(source: str, where: str, seeds: Any) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise _fail(source, f"{where}={seeds!r} must be a non-empty list of integers")
    return list(dict.fromkeys(seeds))


def _expand(spec: SweepSpec) -> list[RunSpec]:
    runs: list[RunSpec] = []
    for i, group in enumerate(spec.groups):
        where = f"groups[{i}]"
        if not isinstance(group, dict):
            raise _fail(spec.source, f"{where} must be a mapping with keys {', '.join(GROUP_KEYS)}")
        _check_keys(spec.source, where, group, GROUP_KEYS)
        variants = group.get("variants")
        if not isinstance(variants, list) or not variants or any(v not in VARIANTS for v in variants):
            raise _fail(spec.source, f"{where}.variants={variants!r}: a non-empty list of {', '.join(VARIANTS)}")
        grid = group.get("grid") or {}
        if not isinstance(grid, dict) or any(not isinstance(v, list) or not v for v in grid.values()):
            raise _fail(spec.source, f"{where}.grid must map config keys to non-empty lists of values")
        for key in grid:
            if key in ("algorithm.variant", "algorithm.seed", "run_name", "runs_root"):
                raise _fail(spec.source, f"{where}.grid: {key} is set by the sweep itself")
        seeds = _seeds(spec.source, f"{where}.seeds", group["seeds"]) if "seeds" in group else spec.seeds
        for variant in variants:
            for values in itertools.product(*grid.values()):
                point = tuple(zip(grid.keys(), values))
                for seed in seeds:
                    name = run_name(variant, point, seed)
                    sets = [f"{k}={v}" for k, v in point]
                    own = [f"algorithm.variant={variant}", f"algorithm.seed={seed}", f"run_name={name}"]
                    runs.append(RunSpec(name, variant, seed, point, (*spec.overrides, *sets, *own)))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise _fail(spec.source, f"runs listed twice: {', '.join(dup[:5])}")
    return seed_major(runs)


def seed_major(runs: list[RunSpec]) -> list[RunSpec]:
    """The runs seed by seed (each seed's runs in the spec's order): a sweep cut short, or read while it
    runs, holds every setting of its first seeds, so its comparisons pair by seed from the first pair on."""
    first_seen = {seed: i for i, seed in reversed(list(enumerate(r.seed for r in runs)))}
    return sorted(runs, key=lambda r: first_seen[r.seed])


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"sweep spec not found: {path}")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as err:  # yaml errors
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    return parse_spec(data, str(path))


def run_config(spec: SweepSpec, run: RunSpec, runs_root: Path, extra: tuple[str, ...] = ()) -> WMRLConfig:
    """The run's validated config; its run directory is ``runs_root/run.name``."""
    try:
        return load_config(spec.config, [*run.overrides, *extra, f"runs_root={runs_root}"])
    except ConfigError as err:
        raise ConfigError(f"{spec.source}, run {run.name}: {err}") from err


def run_configs(spec: SweepSpec, runs_root: Path, extra: tuple[str, ...] = ()) -> dict[str, tuple[WMRLConfig, str]]:
    """Every run's validated config and its YAML text, by run name.

    The first run of each group goes through ``load_config`` (the errors that name the key); the
    others only differ from it in their own keys, merged onto it (10x faster than loading the file
    again for each of hundreds of runs)."""
    out: dict[str, tuple[WMRLConfig, str]] = {}
    bases: dict[tuple[str, ...], Any] = {}
    for run in spec.runs:
        keys = tuple(k for k, _ in run.point)
        if keys not in bases:
            first = run_config(spec, run, runs_root, extra)
            bases[keys] = OmegaConf.structured(first)
        own = [*(f"{k}={v}" for k, v in run.point), f"algorithm.variant={run.variant}",
               f"algorithm.seed={run.seed}", f"run_name={run.name}"]
        try:
            merged = OmegaConf.merge(bases[keys], OmegaConf.from_dotlist(own))
            cfg = OmegaConf.to_object(merged)
            cfg.validate()
        except (OmegaConfBaseException, ConfigError, ValueError):  # the slow path names key and allowed
            cfg = run_config(spec, run, runs_root, extra)
            merged = OmegaConf.structured(cfg)
        out[run.name] = (cfg, OmegaConf.to_yaml(merged))
    return out
