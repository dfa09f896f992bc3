"""scripts/readme_numbers.py: every number README.md quotes comes from a file of results/ (issue 36)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]


def _numbers():
    return load_script("readme_numbers")


def test_the_readme_passes_the_check():
    rn = _numbers()
    assert rn.main(["--check"]) == 0, "\n".join(map(str, rn.check((ROOT / "README.md").read_text(), ROOT)))
    assert len(rn.SPAN.findall((ROOT / "README.md").read_text())) >= 30  # today's numbers are marked


def _copy(tmp_path: Path) -> Path:
    readme = tmp_path / "README.md"
    shutil.copy(ROOT / "README.md", readme)
    return readme


def test_a_marked_number_edited_by_hand_fails_the_check_and_regenerating_restores_it(tmp_path: Path):
    rn = _numbers()
    readme = _copy(tmp_path)
    text = readme.read_text()
    marker = "<!-- n:results/simulate/REPORT.json#wmrl_vs_grpo_real.exec_frac:.1% -->"
    assert marker + "12.5%<!-- /n -->" in text
    readme.write_text(text.replace(marker + "12.5%", marker + "10.0%"))
    assert rn.main(["--check", "--readme", str(readme), "--root", str(ROOT)]) == 1
    problems = rn.check(readme.read_text(), ROOT)
    assert any("'10.0%' should be '12.5%'" in p.what for p in problems)
    assert rn.main(["--readme", str(readme), "--root", str(ROOT)]) == 0  # regenerate
    assert readme.read_text() == text


def test_a_number_without_a_source_fails(tmp_path: Path):
    rn = _numbers()
    readme = _copy(tmp_path)
    readme.write_text(readme.read_text().replace("## Where to go next", "wmrl is 2.99× faster.\n\n## Where to go next"))
    problems = rn.check(readme.read_text(), ROOT)
    assert [p.what.split(" has no source")[0] for p in problems] == ["'2.99×'"]
    # inside code, a link or a comment it is no quote: not flagged
    assert rn.unsourced("`0.5` and [x](a/0.5.md) <!-- 0.5 --> ```\n0.5\n```") == []
    assert [p.what[:6] for p in rn.unsourced("63% and 0.760 ± 0.084; 95% CI; Qwen3.5 at 0.6B")] == \
        ["'63%' ", "'0.760", "'0.084"]


def test_a_quoted_file_that_differs_from_its_source_fails(tmp_path: Path):
    rn = _numbers()
    readme = _copy(tmp_path)
    text = readme.read_text()
    stale = text.replace("| wmrl | 0.4790 ± 0.0057 |", "| wmrl | 0.4786 ± 0.0055 |")  # the pre-issue-36 README's
    assert stale != text
    assert rn.check(stale, ROOT) and rn.regenerate(stale, ROOT)[0] == text


def test_sources_that_cannot_be_read_or_are_placeholders_fail(tmp_path: Path):
    rn = _numbers()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "h.json").write_text(json.dumps({"placeholder": True, "sentence": "soon"}))
    (tmp_path / "results" / "r.json").write_text(json.dumps(
        {"rows": [{"v": "a", "x": [1.0, 2.0, 3.0]}, {"v": "b", "x": [4.0]}], "k.d": {"y": 0.25}}))
    good = ("<!-- n:results/r.json#rows[v=a].x.@mean:.2f -->2.00<!-- /n --> "
            "<!-- n:results/r.json#rows[v=a].x.@se:.3f -->0.577<!-- /n --> "
            '<!-- n:results/r.json#["k.d"].y:.0% -->25%<!-- /n --> '
            "<!-- n:results/r.json#rows[v=b].x[0] / results/r.json#rows[v=a].x[2]:.3f -->1.333<!-- /n -->")
    assert rn.check(good, tmp_path) == []
    for bad, why in [("<!-- n:results/h.json#sentence:s -->soon<!-- /n -->", "placeholder"),
                     ("<!-- n:results/r.json#rows[v=c].x:.1f -->1.0<!-- /n -->", "matches 0 elements"),
                     ("<!-- n:results/none.json#a:.1f -->1.0<!-- /n -->", "no such file"),
                     ("<!-- n:docs/x.json#a:.1f -->1.0<!-- /n -->", "under results/")]:
        problems = rn.check(bad, tmp_path)
        assert problems and why in problems[0].what, (bad, problems)


@pytest.mark.parametrize("section", ["## The two commands", "## What you will see", "## Today's numbers",
                                     "## Where to go next"])
def test_the_readme_reads_for_a_new_user(section):
    """What wmrl is, the two commands, what they show, today's numbers, where to go next; the history of
    measurements by round lives in results/HISTORY.md."""
    readme = (ROOT / "README.md").read_text()
    assert section in readme
    commands = readme.split("## The two commands", 1)[1].split("## What you will see", 1)[0]
    assert "pip install -c constraints-cpu.txt -e . && wmrl train\n```" in commands
    assert "```bash\nbash scripts/test.sh\n```" in commands
    assert "round 6" not in readme.lower() and "Round 8 (CPU only" in (ROOT / "results" / "HISTORY.md").read_text()
