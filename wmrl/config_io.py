"""A config dataclass written out: YAML for run directories, flat ``key -> value`` for MLflow params
and sweep tables. Any section or the whole ``WMRLConfig`` (``wmrl/config.py`` reads the YAML back)."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def to_flat_dict(cfg: Any) -> dict[str, Any]:
    """``{"algorithm.w_max": 4.0, ...}``: for MLflow params and sweep tables."""
    container = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    flat: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            flat[prefix] = node

    walk("", container)
    return flat
