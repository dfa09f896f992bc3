"""Every number README.md quotes, regenerated from (default) or checked against (``--check``) the file in
``results/`` that holds it.

    python scripts/readme_numbers.py            # rewrite every marked number and block from its source
    python scripts/readme_numbers.py --check    # exit 1 on a number that differs from its source or has none

A quoted number is a marked span whose source is a JSON path into a file of ``results/``::

    <!-- n:results/train/learning.json#scores[variant=wmrl,split=train].after:.3f -->0.752<!-- /n -->

- the path: ``.key`` steps into an object, ``[3]`` into a list, ``[k=v,k2=v2]`` picks the one element of a
  list of objects with those values, ``["0.05"]`` a key with dots; ``.@mean``, ``.@se`` (standard error),
  ``.@min``, ``.@max``, ``.@len`` reduce a list of numbers;
- ``A / B`` (two such sources) quotes a ratio;
- the format after the last ``:`` is Python's (``.3f``, ``.0%``, ``+.4f``, ``d``; ``s`` for a string,
  e.g. the headline sentence ``results/train/headline.json#sentence:s``).

A quoted file (a table a command prints) is a marked fenced block whose content is the file's text::

    <!-- file:results/simulate/default/table.md -->
    ```
    ...
    ```
    <!-- /file -->

``--check`` also fails on a number of the prose that no marker covers: a decimal (``0.76``), a percentage
(``37%``) or a ratio (``2.9×``, ``1.8x``) outside code, links and comments; integers (steps, seeds,
counts of a design), names glued to a number (``Qwen3.5``, ``0.6B``) and the conventions ``95% CI``,
``at 5%`` are not checked. A source file with ``"placeholder": true`` at its top level fails
the check too: a placeholder is never a number to quote.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
SPAN = re.compile(r"<!-- n:(?P<source>.+?) -->(?P<text>.*?)<!-- /n -->", re.DOTALL)
BLOCK = re.compile(r"<!-- file:(?P<path>\S+) -->\n```[^\n]*\n(?P<text>.*?)```\n<!-- /file -->", re.DOTALL)
# what the unsourced-number check skips: fenced code, inline code, comments, link targets, marked spans/blocks
SKIP = re.compile(r"<!-- n:.*?<!-- /n -->|<!-- file:.*?<!-- /file -->|```.*?```|`[^`\n]*`|<!--.*?-->|\]\([^)]*\)",
                  re.DOTALL)
# a decimal, a percentage or a ratio; one glued to a letter is a name (Qwen3.5, 0.6B), not a quoted number
NUMBER = re.compile(r"(?<![\w.\-/])(?:\d+(?:\.\d+)?\s?%|\d+(?:\.\d+)?[×x](?!\w)|\d+\.\d+(?![\w.]))")
# conventions, not measurements: the confidence level of an interval and a test's level
CONVENTIONS = re.compile(r"\b95% CI\b|\b95% t-interval\b|\bat 5%")
STEP = re.compile(r'\.?(?P<key>@?[A-Za-z_][\w\-]*)|\[(?P<index>-?\d+)\]|\["(?P<quoted>[^"]+)"\]|\[(?P<match>[^\]]+)\]')


class SourceError(ValueError):
    pass


class Problem(NamedTuple):  # a NamedTuple: tests load this script as a module outside sys.modules
    line: int
    what: str

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.what}"


def _reduce(name: str, values: Any) -> float:
    x = [float(v) for v in values]
    if name == "@len":
        return float(len(x))
    if not x:
        raise SourceError(f"{name} of an empty list")
    mean = sum(x) / len(x)
    if name == "@mean":
        return mean
    if name == "@se":
        return math.sqrt(sum((v - mean) ** 2 for v in x) / (len(x) - 1) / len(x)) if len(x) > 1 else 0.0
    if name in ("@min", "@max"):
        return min(x) if name == "@min" else max(x)
    raise SourceError(f"unknown reducer {name} (allowed: @mean, @se, @min, @max, @len)")


def _value(v: str) -> Any:
    try:
        return json.loads(v)
    except ValueError:
        return v


def resolve(root: Path, ref: str, cache: dict[Path, Any]) -> Any:
    """The value at ``PATH#KEYPATH`` under ``root``."""
    if "#" not in ref:
        raise SourceError(f"{ref!r}: a source is PATH#KEYPATH")
    rel, keypath = ref.strip().split("#", 1)
    path = root / rel
    if not rel.startswith("results/"):
        raise SourceError(f"{rel}: a README number's source is a file under results/")
    if path not in cache:
        if not path.is_file():
            raise SourceError(f"{rel}: no such file")
        cache[path] = json.loads(path.read_text(encoding="utf-8"))
    node = cache[path]
    if isinstance(node, dict) and node.get("placeholder"):
        raise SourceError(f"{rel} is a placeholder, not a result")
    pos = 0
    while pos < len(keypath):
        m = STEP.match(keypath, pos)
        if m is None or m.end() == pos:
            raise SourceError(f"{ref}: cannot read the key path at {keypath[pos:]!r}")
        pos = m.end()
        try:
            if m["key"] is not None and m["key"].startswith("@"):
                node = _reduce(m["key"], node)
            elif m["key"] is not None or m["quoted"] is not None:
                node = node[m["key"] if m["key"] is not None else m["quoted"]]
            elif m["index"] is not None:
                node = node[int(m["index"])]
            else:
                want = dict(kv.split("=", 1) for kv in m["match"].split(","))
                hits = [x for x in node if all(str(x.get(k)) == v or x.get(k) == _value(v) for k, v in want.items())]
                if len(hits) != 1:
                    raise SourceError(f"{ref}: [{m['match']}] matches {len(hits)} elements, not one")
                node = hits[0]
        except (KeyError, IndexError, TypeError) as err:
            raise SourceError(f"{ref}: no {m.group(0)!r} ({type(err).__name__})") from err
    return node


def render(root: Path, source: str, cache: dict[Path, Any]) -> str:
    """The text of a marked span: its source's value in its format."""
    expr, sep, fmt = source.rpartition(":")
    if not sep or "#" not in expr:
        raise SourceError(f"{source!r}: a marker is PATH#KEYPATH:FORMAT")
    terms = [resolve(root, t, cache) for t in expr.split(" / ")]
    value = terms[0] if len(terms) == 1 else float(terms[0]) / float(terms[1])
    if fmt == "s":
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise SourceError(f"{source}: the value is {value}")
    try:
        return format(value, fmt)
    except (ValueError, TypeError) as err:
        raise SourceError(f"{source}: format {fmt!r}: {err}") from err


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def regenerate(text: str, root: Path) -> tuple[str, list[Problem]]:
    """``text`` with every marked span and block rewritten from its source, and the problems found:
    sources that cannot be read, numbers of the prose without a marker."""
    problems: list[Problem] = []
    cache: dict[Path, Any] = {}

    def span(m: re.Match[str]) -> str:
        try:
            new = render(root, m["source"], cache)
        except SourceError as err:
            problems.append(Problem(_line(text, m.start()), str(err)))
            return m.group(0)
        return f"<!-- n:{m['source']} -->{new}<!-- /n -->"

    def block(m: re.Match[str]) -> str:
        path = root / m["path"]
        if not m["path"].startswith("results/") or not path.is_file():
            problems.append(Problem(_line(text, m.start()), f"{m['path']}: no such file under results/"))
            return m.group(0)
        body = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
        start, end = m.start("text") - m.start(), m.end("text") - m.start()
        return m.group(0)[:start] + body + m.group(0)[end:]

    out = BLOCK.sub(block, SPAN.sub(span, text))
    problems += unsourced(out)
    return out, problems


def unsourced(text: str) -> list[Problem]:
    """Numbers of the prose that no marker covers."""
    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))

    blanked = CONVENTIONS.sub(blank, SKIP.sub(blank, text))
    return [Problem(_line(text, m.start()), f"{m.group(0).strip()!r} has no source (mark it: <!-- n:results/...#key:fmt -->)")
            for m in NUMBER.finditer(blanked)]


def check(text: str, root: Path) -> list[Problem]:
    """Every problem of ``text``: a marked number or block that differs from its source, plus
    :func:`regenerate`'s."""
    new, problems = regenerate(text, root)
    if new != text:
        old_lines, new_lines = text.splitlines(), new.splitlines()
        for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=False), 1):
            if a != b:
                problems.append(Problem(i, "differs from its source: "
                                           + "; ".join(f"{x!r} should be {y!r}" for x, y in _spans_differing(a, b))))
        if len(old_lines) != len(new_lines):
            problems.append(Problem(min(len(old_lines), len(new_lines)), "a quoted file differs from its source"))
    return sorted(problems, key=lambda p: p.line)


def _spans_differing(a: str, b: str) -> list[tuple[str, str]]:
    old = [m["text"] for m in SPAN.finditer(a)]
    new = [m["text"] for m in SPAN.finditer(b)]
    pairs = [(x, y) for x, y in zip(old, new, strict=False) if x != y]
    return pairs or [("(quoted file line)", b)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on any problem")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--root", type=Path, default=REPO, help="where the sources' results/ paths start")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    if args.check:
        problems = check(text, args.root)
    else:
        new, problems = regenerate(text, args.root)
        if new != text:
            args.readme.write_text(new, encoding="utf-8")
            print(f"rewrote {args.readme}")
    for p in problems:
        print(p, file=sys.stderr)
    spans = len(SPAN.findall(text)) + len(BLOCK.findall(text))
    print(f"{spans} marked numbers and quoted files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
