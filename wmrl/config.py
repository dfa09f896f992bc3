"""Run configuration: typed dataclasses merged by OmegaConf, validated at load time.

A run's config is ``WMRLConfig``: defaults live in the dataclasses below (the embedded default),
a YAML file overrides some of them, and ``key=value`` command-line overrides come last::

    cfg = load_config("configs/simulate.yaml", ["algorithm.anchor_frac=0.2", "algorithm.w_max=2"])

Every section declares its fields' checks (``wmrl/config_checks.py``) and writes only those across
fields; anything wrong raises :class:`ConfigError` naming the full key, the offending value and what is
allowed. A key that moved (``MOVED_KEYS``) still loads, into its new place, with a FutureWarning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from wmrl.agent.config import AgentConfig
from wmrl.algorithm import ANCHORED_VARIANTS, VARIANTS, AlgorithmConfig  # noqa: F401  (re-exported)
from wmrl.config_checks import ConfigError, Section, checked_by, choice
from wmrl.config_io import to_flat_dict, to_yaml  # noqa: F401  (re-exported)
from wmrl.execution.config import LaunchConfig
from wmrl.generation.config import GenerationConfig, SamplingConfig
from wmrl.learner.config import LearnerConfig
from wmrl.models.config import ModelConfig
from wmrl.sandbox.config import SandboxConfig
from wmrl.sft.config import SFTConfig
from wmrl.simulate.config import SimulatorConfig
from wmrl.tasks.config import TasksConfig
from wmrl.tracking.config import TrackingConfig
from wmrl.train_config import TrainConfig
from wmrl.trainer_registry import TRAINERS
from wmrl.world_model.config import WorldModelConfig

# --------------------------------------------------------------------------- the whole run
# Each part of the package owns its own section (it imports only wmrl.config_checks).

SECTIONS = (
    "algorithm", "simulator", "tasks", "sandbox", "launch", "tracking", "agent", "world_model",
    "model", "sampling", "generation", "sft", "learner", "train",
)


def _check_run_name(key: str, name: str) -> None:
    if not name or "/" in name:
        raise ConfigError(f"{key}={name!r} must be a non-empty name without '/'")


@dataclass
class WMRLConfig(Section):
    # Human-readable run name; the run directory is <runs_root>/<run_name>.
    run_name: str = field(default="wmrl-default", metadata=checked_by(_check_run_name))
    runs_root: str = "runs"
    # What the coordinator trains (wmrl/trainer_registry.py lists them).
    trainer: str = field(default="anchored_sim", metadata=choice(TRAINERS))
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def check_together(self, prefix: str) -> None:
        self.simulator.check_schedule(self.train.steps)
        if self.launch.executor == "slurm":  # what a worker array task asks Slurm for must hold its executions
            self.launch.check_worker_fit(self.sandbox.memory_mb, self.sandbox.threads)

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_root) / self.run_name


def _explain(err: OmegaConfBaseException, schema: Any) -> ConfigError:
    key = getattr(err, "full_key", None) or "?"
    if isinstance(err, ConfigKeyError) or "not in" in str(err) or "Key '" in str(err):
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        node = OmegaConf.select(schema, parent) if parent else schema
        allowed = sorted(node.keys()) if node is not None and hasattr(node, "keys") else []
        where = f"section '{parent}'" if parent else "the top level"
        return ConfigError(f"unknown config key '{key}'; keys allowed in {where}: {', '.join(allowed)}")
    if isinstance(err, ValidationError):
        msg = str(err).splitlines()[0]
        default = OmegaConf.select(schema, key) if key != "?" else None
        expected = type(default).__name__ if default is not None and not hasattr(default, "keys") else "a section"
        return ConfigError(f"config key '{key}' has the wrong type (expected {expected}): {msg}")
    return ConfigError(f"config key '{key}': {str(err).splitlines()[0]}")


def _check_shape(layer: Any, schema: Any, where: str) -> None:
    """A YAML file is a mapping, and a section (``algorithm``, ...) is given as a mapping, not a value
    (OmegaConf's own errors for these name the key '?')."""
    if not OmegaConf.is_dict(layer):
        raise ConfigError(f"{where}: the top level must be a mapping of keys (run_name, runs_root, "
                          f"{', '.join(SECTIONS)}), got a {type(layer).__name__.removesuffix('Config').lower()}")
    for key in layer:
        node = schema.get(key) if key in schema else None
        if OmegaConf.is_dict(node) and not OmegaConf.is_dict(layer._get_node(key)):
            value = layer._get_node(key)._value()
            raise ConfigError(
                f"{where}: '{key}' is a section, not a value (got {key}={value!r}); set its keys, e.g. "
                f"{key}.{min(node.keys())}=..., allowed: {', '.join(sorted(node.keys()))}")


@dataclass(frozen=True)
class MovedKey:
    """A key that moved: an old config file, a saved run's config.yaml or an old sweep's overrides still
    load, the value moved to ``new`` with a FutureWarning that names it."""

    old: str
    new: str
    why: str  # said in the warning, after "OLD is NEW now"
    # Where one layer sets both keys: True when its old key meant nothing there (it is dropped unsaid);
    # otherwise the old key's value is the one the layer meant, and it wins.
    old_meant_nothing: Callable[[Any], bool] = lambda layer: False


LAUNCH_TIMINGS = ("lease_s", "heartbeat_s", "idle_timeout_s", "poll_min_s", "poll_max_s", "lock_heartbeat_s",
                  "lock_stale_s", "tmp_max_age_s", "coordinator_time_min", "worker_time_min", "signal_delay_s",
                  "checkpoint_margin_s", "checkpoint_every_s")
MOVED_KEYS: tuple[MovedKey, ...] = (
    # Rounds 1-8. A saved config then carried both keys; its trainer's own one was the run's length
    # (train.steps for the LLM trainer, simulator.steps for the testbed trainers).
    MovedKey("simulator.steps", "train.steps", "the run's length for every trainer",
             old_meant_nothing=lambda layer: layer.get("trainer") == "llm"),
    *(MovedKey(f"launch.{name}", f"launch.timing.{name}", "every duration of a launch is in launch.timing")
      for name in LAUNCH_TIMINGS),
)


@dataclass(frozen=True)
class MovedValue:
    """A value that names code which moved (a ``module:factory`` path): it still loads, as ``new``."""

    key: str
    old: str
    new: str
    why: str


_ROOMS = "the run wing's rooms: storage, execution, slurm, orchestration (issue 33)"
MOVED_VALUES: tuple[MovedValue, ...] = (
    MovedValue("launch.work", "wmrl.orchestration.work:real_work", "wmrl.orchestration.anchors:real_work", _ROOMS),
    *(MovedValue("launch.work", f"wmrl.orchestration.work:{name}", f"wmrl.execution.work:{name}", _ROOMS)
      for name in ("python_work", "noop_work")),
)


def _move_keys(layer: Any, where: str) -> None:
    """Move every old key of ``MOVED_KEYS`` that ``layer`` (a file's or the overrides') sets to its new place,
    and replace every old value of ``MOVED_VALUES`` it holds."""
    read: dict[str, list[str]] = {}  # why -> "new=value" read from an old key
    for moved in MOVED_KEYS:
        parent_key, _, name = moved.old.rpartition(".")
        parent = OmegaConf.select(layer, parent_key) if OmegaConf.is_dict(layer) else None
        if not OmegaConf.is_dict(parent) or name not in parent:
            continue
        value = parent.pop(name)
        if OmegaConf.select(layer, moved.new) is not None and moved.old_meant_nothing(layer):
            continue
        OmegaConf.update(layer, moved.new, value, force_add=True)
        read.setdefault(moved.why, []).append(f"{moved.old} is {moved.new} now; read as {moved.new}={value}")
    for value in MOVED_VALUES:
        if OmegaConf.is_dict(layer) and OmegaConf.select(layer, value.key) == value.old:
            OmegaConf.update(layer, value.key, value.new)
            read.setdefault(value.why, []).append(f"{value.key}={value.old} is {value.new} now")
    if read:  # one warning per file (an old run directory moves 13 keys at once), not one per key
        warnings.warn(f"{where}: " + "; ".join(f"{'; '.join(keys)} ({why})" for why, keys in read.items()),
                      FutureWarning, stacklevel=3)


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> WMRLConfig:
    """Defaults <- YAML file <- ``key=value`` overrides; returns a validated ``WMRLConfig``."""
    schema = OmegaConf.structured(WMRLConfig)
    layers: list[Any] = [schema]
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            layers.append(OmegaConf.load(path))
        except Exception as err:  # yaml.YAMLError and friends
            raise ConfigError(f"{path}: not valid YAML: {err}") from err
        _check_shape(layers[-1], schema, str(path))
        _move_keys(layers[-1], str(path))
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"overrides must look like key=value, got: {' '.join(bad)}")
    try:
        layers.append(OmegaConf.from_dotlist(list(overrides)))
        _check_shape(layers[-1], schema, "command-line override")
        _move_keys(layers[-1], "command-line override")
        merged = OmegaConf.merge(*layers)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise _explain(err, schema) from err
    cfg.validate()
    return cfg


def as_written_now(stored_yaml: str) -> str:
    """A stored resolved config as this version writes it: moved keys read under their new names (with a
    FutureWarning), keys added since at their defaults. A run directory's or a sweep's stored config is
    compared with the new one in this form, so an upgrade that only adds or moves keys does not refuse
    to continue a run or a sweep; a changed value still differs."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8") as f:
        f.write(stored_yaml)
        f.flush()
        try:
            return to_yaml(load_config(f.name))
        except ConfigError:  # not loadable now: compared as stored, and the mismatch says which keys differ
            return stored_yaml
