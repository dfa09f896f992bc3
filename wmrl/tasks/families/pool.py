"""The task-family pool: which instances a config makes, their seeds and split, the cached build.

Instance ``k`` of a split is family ``k % 5`` (so every split holds every family), with seed
``seed * 10**6 + k // 5`` for training and ``seed * 10**6 + HELDOUT_OFFSET + k // 5`` for held-out
instances: a family's held-out seeds are disjoint from its training seeds by construction. The split is
written to each task's ``task.json`` (``split: heldout``), the one marking that SFT, the memory, the
tokenizer corpus and the evaluation read (``Task.split``).

The pool is built by the built-in pool's builder (:func:`wmrl.tasks.builtin.build.build_tasks`), which
runs every instance's references and makes its leaderboard from their real scores. Its default home is
``$WMRL_CACHE/tasks/families-v1-<key>`` (else ``~/.cache/wmrl/tasks/...``), ``key`` a hash of what made
it: the config section, the generators' and the builder's source, and the versions of the libraries
that draw the data and fit the references.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from wmrl.models.cache import cache_root
from wmrl.tasks.builtin.build import POOL_INDEX, build_tasks
from wmrl.tasks.builtin.spec import TaskData
from wmrl.tasks.config import FamiliesConfig
from wmrl.tasks.families import images, tabular, text
from wmrl.tasks.families.surface import MIN_REFERENCES

FAMILIES_VERSION = "families-v1"
HELDOUT_OFFSET = 500_000  # held-out seeds start here; an instance's index stays below it (MAX_INSTANCES)
# family -> generator(task_id, split, seed, rng, schema)
GENERATORS: dict[str, Callable[[str, str, int, np.random.Generator, str], TaskData]] = {
    "tabular-binary": tabular.tabular_binary,
    "tabular-multiclass": tabular.tabular_multiclass,
    "regression": tabular.regression,
    "text": text.text_classification,
    "image": images.image_classification,
}
# What made the pool besides the config: these modules' source and these libraries' versions.
_SOURCES = ("wmrl/tasks/families", "wmrl/tasks/builtin/build.py", "wmrl/tasks/builtin/refcode.py",
            "wmrl/tasks/builtin/spec.py", "wmrl/tasks/builtin/text.py", "wmrl/tasks/builtin/images.py",
            "wmrl/grading")
_LIBRARIES = ("numpy", "pandas", "scikit-learn", "scipy", "scikit-image", "pillow")


@dataclass(frozen=True)
class FamilyInstance:
    family: str
    split: str
    index: int  # the instance's number within its family and split
    seed: int
    schema: str = "literal"  # tasks.families.schema: how the references get the file and column names

    @property
    def task_id(self) -> str:
        return f"{self.family}-{self.split}-{self.index:03d}"

    def make(self) -> TaskData:
        rng = np.random.default_rng([list(GENERATORS).index(self.family), self.seed])
        return GENERATORS[self.family](self.task_id, self.split, self.seed, rng, self.schema)


def instances(cfg: FamiliesConfig) -> list[FamilyInstance]:
    """Every instance of the pool ``cfg`` describes: the training ones, then the held-out ones."""
    names = list(GENERATORS)
    out = []
    for split, count, offset in (("train", cfg.train, 0), ("heldout", cfg.heldout, HELDOUT_OFFSET)):
        for k in range(count):
            index = k // len(names)
            out.append(FamilyInstance(names[k % len(names)], split, index, cfg.seed * 10**6 + offset + index,
                                      cfg.schema))
    return out


def _source_digest() -> str:
    package = Path(__file__).resolve().parents[3]
    digest = hashlib.sha256()
    for entry in _SOURCES:
        path = package / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(package)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def pool_key(cfg: FamiliesConfig) -> str:
    """A hash of what makes the pool: the config, the code that builds it and the libraries it uses."""
    made_of = {"version": FAMILIES_VERSION, "families": asdict(cfg), "source": _source_digest(),
               "libraries": {name: metadata.version(name) for name in _LIBRARIES}}
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()


def default_root(cfg: FamiliesConfig) -> Path:
    return cache_root() / "tasks" / f"{FAMILIES_VERSION}-{pool_key(cfg)[:16]}"


def pool_complete(root: Path, cfg: FamiliesConfig) -> bool:
    """Whether ``root`` holds the whole pool of ``cfg`` as this code builds it (its key in pool.json)."""
    try:
        return json.loads((Path(root) / POOL_INDEX).read_text())["key"] == pool_key(cfg)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def select(cfg: FamiliesConfig, only: Sequence[str] | None) -> list[FamilyInstance]:
    """The instances named in ``only`` (task ids or family names); all of them when ``only`` is empty."""
    every = instances(cfg)
    if not only:
        return every
    chosen = [i for i in every if i.task_id in only or i.family in only]
    unknown = sorted(set(only) - {i.task_id for i in chosen} - {i.family for i in chosen})
    if unknown:
        raise ValueError(f"unknown task family or instance {unknown}; allowed: a family ({', '.join(GENERATORS)}) "
                         f"or a task id such as {every[0].task_id}")
    return chosen


def build_families(root: Path, cfg: FamiliesConfig, only: Sequence[str] | None = None, progress: bool = True,
                   group: str = "", workers: int = 0) -> list[dict]:
    """Build the pool of ``cfg`` (or the instances in ``only``) into ``root``.

    The whole pool replaces an earlier family pool in ``root`` (instances it no longer has are removed)
    and records its key, so :func:`pool_complete` finds it; a partial build (``only``) adds its tasks
    and records no key.
    """
    chosen = select(cfg, only)
    extra = {"families": asdict(cfg)} | ({} if only else {"key": pool_key(cfg)})
    return build_tasks(Path(root), [(i.task_id, i.family, i.make) for i in chosen], progress=progress, group=group,
                       version=FAMILIES_VERSION, min_references=MIN_REFERENCES, index_extra=extra,
                       replace_pool=not only, workers=workers)
