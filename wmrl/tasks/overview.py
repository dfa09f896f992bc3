"""The task overview the agent sees (the paper's user prompt, Appendix E).

Built only by introspecting the public directory, so it works for any task of any layout and shows
nothing of the private side: description head with its metric, data inventory, targets, contract.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pandas as pd

DESCRIPTION_CHARS = 3000
MAX_COLUMNS = 40  # columns listed per CSV; the rest are summarised by dtype
MAX_LISTED = 5  # example names per folder / zip
IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
FULL_READ_BYTES = 50 << 20


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _description_file(public_dir: Path) -> Path | None:
    for name in ("description.md", "description.txt", "README.md"):
        if (public_dir / name).is_file():
            return public_dir / name
    return None


def description_head(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    """The first ``limit`` characters, plus the evaluation section if it starts further down."""
    if len(text) <= limit:
        return text.strip()
    head = text[:limit].rstrip() + "\n[...]"
    match = re.search(r"^#+\s*(evaluation|metric)[^\n]*$", text, flags=re.IGNORECASE | re.MULTILINE)
    if match and match.start() >= limit:
        head += "\n" + text[match.start(): match.start() + 1000].strip()
    return head.strip()


def _example(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def csv_schema(path: Path) -> list[str]:
    size = path.stat().st_size
    try:
        frame = pd.read_csv(path, nrows=None if size <= FULL_READ_BYTES else 10000)
    except Exception as err:  # noqa: BLE001 - unreadable CSVs are reported, not fatal
        return [f"    (could not parse as CSV: {str(err).splitlines()[0][:120]})"]
    rows = f"{len(frame)} rows" if size <= FULL_READ_BYTES else f"{len(frame)}+ rows (first 10000 read)"
    lines = [f"    {rows} x {frame.shape[1]} columns"]
    for column in frame.columns[:MAX_COLUMNS]:
        examples = ", ".join(_example(v) for v in frame[column].dropna().unique()[:3])
        lines.append(f"    - {column}: {frame[column].dtype}, e.g. {examples}")
    if frame.shape[1] > MAX_COLUMNS:
        rest = frame.dtypes.iloc[MAX_COLUMNS:].astype(str).value_counts()
        summary = ", ".join(f"{dtype} x{count}" for dtype, count in rest.items())
        lines.append(f"    - ... {frame.shape[1] - MAX_COLUMNS} more columns ({summary})")
    return lines


def _image_dims(opener: list) -> str | None:
    """Sampled dimensions of up to five images; ``opener`` yields file-like objects."""
    from PIL import Image

    dims = []
    for open_one in opener[:MAX_LISTED]:
        try:
            with open_one() as handle, Image.open(handle) as image:
                dims.append(f"{image.width}x{image.height} {image.mode}")
        except Exception:  # noqa: BLE001 - a corrupt or non-image file is only noted
            dims.append("unreadable")
    if not dims:
        return None
    return f"sampled image sizes (width x height mode): {', '.join(sorted(set(dims)))} ({len(dims)} sampled)"


def _ext_summary(names: list[str]) -> str:
    counts = pd.Series([Path(n).suffix.lower() or "(none)" for n in names]).value_counts()
    return ", ".join(f"{ext} x{count}" for ext, count in counts.items())


def zip_contents(path: Path) -> list[str]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        return [f"    (not a readable zip: {err})"]
    with archive:
        infos = [i for i in archive.infolist() if not i.is_dir()]
        total = sum(i.file_size for i in infos)
        names = [i.filename for i in infos]
        lines = [f"    zip archive: {len(infos)} files, {human_size(total)} uncompressed ({_ext_summary(names)})",
                 f"    e.g. {', '.join(names[:MAX_LISTED])}"]
        images = [n for n in names if n.lower().endswith(IMAGE_EXTS)]
        dims = _image_dims([lambda n=n: archive.open(n) for n in images])
        if dims:
            lines.append(f"    {dims}")
    return lines


def folder_contents(folder: Path, public_dir: Path) -> list[str]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    names = [str(p.relative_to(public_dir)) for p in files]
    lines = [(f"- {folder.relative_to(public_dir)}/ (folder: {len(files)} files, {human_size(total)}; "
             f"{_ext_summary(names) if names else 'empty'})")]
    if names:
        lines.append(f"    e.g. {', '.join(names[:MAX_LISTED])}")
    dims = _image_dims([lambda p=p: p.open("rb") for p in files if p.suffix.lower() in IMAGE_EXTS])
    if dims:
        lines.append(f"    {dims}")
    return lines


def data_inventory(public_dir: Path) -> list[str]:
    lines: list[str] = []
    for entry in sorted(public_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            lines += folder_contents(entry, public_dir)
            continue
        lines.append(f"- {entry.name} ({human_size(entry.stat().st_size)})")
        suffix = entry.suffix.lower()
        if suffix in (".csv", ".tsv"):
            lines += csv_schema(entry)
        elif suffix == ".zip":
            lines += zip_contents(entry)
        elif suffix in IMAGE_EXTS:
            lines.append(f"    {_image_dims([lambda e=entry: e.open('rb')])}")
    return lines


def _header(path: Path) -> list[str]:
    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except Exception:  # noqa: BLE001
        return []


def _find_csv(public_dir: Path, word: str) -> Path | None:
    candidates = sorted(p for p in public_dir.glob("*.csv") if word in p.stem.lower() and "sample" not in p.stem.lower())
    return candidates[0] if candidates else None


def targets(public_dir: Path) -> str:
    train, test = _find_csv(public_dir, "train"), _find_csv(public_dir, "test")
    if train is None or test is None:
        return "(no train/test CSV pair found; see the description)"
    test_columns = set(_header(test))
    missing = [c for c in _header(train) if c not in test_columns]
    if not missing:
        return f"(every column of {train.name} is also in {test.name}; see the description)"
    return f"{', '.join(missing)} (in {train.name} but not in {test.name})"


def submission_contract(public_dir: Path) -> list[str]:
    sample = public_dir / "sample_submission.csv"
    lines = ["Your code runs with two predefined variables (also environment variables):",
             "- DATA_DIR: folder holding the files above (read-only)",
             "- SUBMISSION_PATH: where to write your submission CSV"]
    if not sample.is_file():
        return lines + ["(no sample_submission.csv; see the description for the format)"]
    try:
        frame = pd.read_csv(sample, dtype=str)
    except Exception as err:  # noqa: BLE001
        return lines + [f"(sample_submission.csv is unreadable: {err})"]
    lines += [f"Required columns, exactly: {', '.join(frame.columns)}",
              f"One row per test id: {len(frame)} rows. Example rows from sample_submission.csv:",
              frame.head(3).to_csv(index=False).strip()]
    return lines


def build_overview(public_dir: Path, name: str | None = None) -> str:
    public_dir = Path(public_dir)
    description_path = _description_file(public_dir)
    text = description_path.read_text(encoding="utf-8", errors="replace") if description_path else ""
    if name is None:
        heading = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
        name = heading.group(1).strip() if heading else public_dir.name
    parts = [
        f"Competition: {name}",
        "=== DESCRIPTION ===",
        description_head(text) or "(no description file)",
        "=== DATA INVENTORY ===",
        *data_inventory(public_dir),
        "=== TARGETS ===",
        targets(public_dir),
        "=== SUBMISSION CONTRACT ===",
        *submission_contract(public_dir),
        "Begin.",
    ]
    return "\n".join(parts) + "\n"


def task_overview(task) -> str:
    return build_overview(task.public_dir, task.name)
