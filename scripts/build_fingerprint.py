"""What the tiny default's build hashes depend on, digest by digest: why two machines build different ones.

The tiny model's hash is a function of its sizes, the library versions and the tokenizer corpus (the
pool's task overviews, sample submissions and training references, the prompts); the SFT's adds the
examples, whose world-model targets come from really executing the broken variants. Every one of
those inputs gets a digest here, with the machine facts that can change a result (CPU features, the
BLAS kernel OpenBLAS picked), so comparing two machines' fingerprints names the inputs that differ.

    python scripts/build_fingerprint.py --out results/reproducibility/NAME.json   # this machine, the tiny default
    python scripts/build_fingerprint.py [CONFIG] [key=value ...]     # another config (e.g. tasks.root=DIR)
    python scripts/build_fingerprint.py --sft --out ...        # also the SFT examples (executes uncached variants)
    python scripts/build_fingerprint.py --compare A.json B.json   # what differs (exit 1 if anything does)
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import hashlib
import json
import platform
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "tokenizers", "numpy", "scipy", "scikit-learn", "pandas", "pillow",
            "scikit-image", "statsmodels")
# The CPU features that change which kernels numpy, OpenBLAS, torch and zlib-ng dispatch to.
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile")


def digest(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()[:16]


def openblas_cores() -> dict[str, str]:
    """The kernel each loaded OpenBLAS chose (numpy's and scipy's bundle their own): its name."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS)
    import scipy.linalg  # noqa: F401  (loads scipy's)

    mapped = {fields[-1] for fields in map(str.split, Path("/proc/self/maps").read_text().splitlines())
              if len(fields) >= 6 and "openblas" in fields[-1].lower()}  # one line per mapped segment
    cores: dict[str, str] = {}
    for path in sorted(mapped):
        lib = ctypes.CDLL(path)
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            getter = getattr(lib, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_char_p
                cores[Path(path).name] = getter().decode()
                break
    return cores


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    from numpy._core._multiarray_umath import __cpu_features__

    return {"cpu": model, "cpu_flags": {f: f in flags for f in CPU_FLAGS},
            "numpy_simd": sorted(k for k, on in __cpu_features__.items() if on and k.startswith(("AVX", "X86"))),
            "openblas": openblas_cores(), "python": platform.python_version()}


def versions() -> dict[str, str]:
    import torch

    found = {name: metadata.version(name) for name in PACKAGES}
    found["torch"] = torch.__version__  # with its local tag (+cpu), as the model hash records it
    return found


def base_model(cfg: Any, pool: Path) -> dict[str, Any]:
    from wmrl.models.corpus import prompt_texts, tokenizer_corpus_parts
    from wmrl.models.init import RECIPE, tiny_model_hash

    parts = tokenizer_corpus_parts(pool, prompt_texts())
    order: dict[str, list[str]] = {}  # the corpus digest depends on the order too: references weakest first
    for name, _ in parts:
        task, _, reference = name.partition("/reference/")
        if reference:
            order.setdefault(task, []).append(reference)
    return {"name": f"{RECIPE}-{tiny_model_hash(cfg.model.tiny, [t for _, t in parts])[:16]}",
            "tiny": dataclasses.asdict(cfg.model.tiny), "corpus": {name: digest(text) for name, text in parts},
            "reference_order": {task: " ".join(names) for task, names in order.items()}}


def leaderboards(pool: Path) -> dict[str, str]:
    """Each task's leaderboard, made by really running its references: the scores a kernel can move."""
    from wmrl.tasks import load_pool

    return {task.task_id: digest(Path(task.leaderboard_path).read_bytes()) for task in load_pool(pool)}


def sft(cfg: Any) -> dict[str, Any]:
    """The SFT's hash, its examples per kind, and each world-model variant's executed outcome."""
    from wmrl.models.init import ensure_tiny_model
    from wmrl.models.loading import load_tokenizer
    from wmrl.sft.data import build_sft_data, run_context
    from wmrl.sft.engine import default_sft_dir, sft_hash
    from wmrl.sft.example import examples_digest
    from wmrl.tasks.pool import ensure_pool, load_pool
    from wmrl.world_model_data.examples import executed_outcomes, world_model_sft_variants

    base, _ = ensure_tiny_model(cfg.model, cfg.tasks.root)
    examples = build_sft_data(cfg, load_tokenizer(base), max_tokens=cfg.sft.pack_tokens, progress=False).examples
    tasks = load_pool(ensure_pool(cfg.tasks, progress=False))
    runtime = run_context(cfg)[2]
    variants = world_model_sft_variants([t for t in tasks if t.split == "train"], cfg.world_model, runtime)
    outcomes = executed_outcomes(cfg, tasks, variants, runtime, progress=False)  # cached by content
    kinds = sorted({ex.kind for ex in examples})
    return {
        "name": default_sft_dir(cfg.model.cache_dir, sft_hash(base, examples, cfg.sft)).name,
        "examples": {kind: examples_digest([ex for ex in examples if ex.kind == kind]) for kind in kinds},
        "outcomes": {f"{v.task_id}/{v.reference}/{v.kind}/{v.key[:12]}": digest(json.dumps(
            {k: val for k, val in outcomes[v.key].to_dict().items() if k != "seconds"}, sort_keys=True))
            for v in variants},
    }


def fingerprint(config: str | None, overrides: list[str], with_sft: bool) -> dict[str, Any]:
    from wmrl.config import load_config
    from wmrl.configs import TINY_CONFIG
    from wmrl.tasks.pool import ensure_pool

    cfg = load_config(config or str(TINY_CONFIG), overrides)  # the default of `wmrl train` and `wmrl sft`
    pool = ensure_pool(cfg.tasks)
    found = {"machine": machine(), "versions": versions(), "base_model": base_model(cfg, pool),
             "leaderboards": leaderboards(pool)}
    if with_sft:
        found["sft"] = sft(cfg)
    return found


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """One line per entry that differs or is present in one fingerprint only, in the first's order."""
    left, right = dict(flatten(a)), dict(flatten(b))
    lines = [f"{key}: {left[key]!r} != {right[key]!r}" for key in left if key in right and left[key] != right[key]]
    lines += [f"{key}: only in the first" for key in left if key not in right]
    lines += [f"{key}: only in the second" for key in right if key not in left]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="*", metavar="[CONFIG] [key=value ...]",
                        help="run config YAML (default: the tiny default), then overrides")
    parser.add_argument("--sft", action="store_true", help="also the SFT examples and the variants' outcomes")
    parser.add_argument("--out", type=Path, help="write the fingerprint here (JSON)")
    parser.add_argument("--compare", nargs="+", type=Path, metavar="JSON",
                        help="compare a fingerprint with another one, or with this machine's")
    args = parser.parse_args(argv)
    config = args.config[0] if args.config and "=" not in args.config[0] else None
    overrides = args.config[1:] if config else args.config
    if args.compare:
        first = json.loads(args.compare[0].read_text())
        second = (json.loads(args.compare[1].read_text()) if len(args.compare) > 1
                  else fingerprint(config, overrides, with_sft="sft" in first))
        lines = differences(first, second)
        print("\n".join(lines) if lines else "identical")
        return 1 if lines else 0
    found = fingerprint(config, overrides, args.sft)
    text = json.dumps(found, indent=1, sort_keys=False) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"{args.out}: base {found['base_model']['name']}" + (f", {found['sft']['name']}" if args.sft else ""))
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
