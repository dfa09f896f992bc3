"""The agent's task overview is built from the public files only (paper, Appendix E)."""

import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from wmrl.tasks.layouts import load_task
from wmrl.tasks.overview import build_overview, description_head, task_overview
from wmrl.tasks.testing import make_wmrl_task


@pytest.fixture
def task(tmp_path):
    return load_task(make_wmrl_task(tmp_path))


def png(w, h):
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((h, w), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_sections_come_in_the_papers_order(task):
    text = task_overview(task)
    heads = ["Competition: Tiny Parity", "=== DESCRIPTION ===", "=== DATA INVENTORY ===", "=== TARGETS ===",
             "=== SUBMISSION CONTRACT ===", "Begin."]
    positions = [text.index(h) for h in heads]
    assert positions == sorted(positions)


def test_description_with_metric_is_included(task):
    assert "Submissions are scored by accuracy." in task_overview(task)


def test_csv_schema_lists_rows_dtypes_and_examples(task):
    text = task_overview(task)
    assert "- train.csv (" in text and "20 rows x 3 columns" in text
    assert "- x: float64, e.g. 0.0, 1.0, 2.0" in text


def test_targets_are_train_columns_missing_from_test(task):
    assert "=== TARGETS ===\ny (in train.csv but not in test.csv)" in task_overview(task)


def test_submission_contract_names_columns_and_variables(task):
    text = task_overview(task)
    assert "Required columns, exactly: id, y" in text and "SUBMISSION_PATH" in text and "DATA_DIR" in text
    assert "One row per test id: 10 rows" in text


def test_nothing_private_leaks(task):
    text = task_overview(task)
    assert "answers" not in text and "leaderboard" not in text.lower()


def test_zip_contents_and_image_sizes_are_listed(task):
    with zipfile.ZipFile(task.public_dir / "images.zip", "w") as archive:
        archive.writestr("images/a.png", png(12, 7))
        archive.writestr("images/b.png", png(12, 7))
    text = build_overview(task.public_dir)
    assert "zip archive: 2 files" in text and "12x7 L" in text


def test_folder_contents_and_image_sizes_are_listed(task):
    folder = task.public_dir / "imgs"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.png").write_bytes(png(9, 5))
    text = build_overview(task.public_dir)
    assert "- imgs/ (folder: 3 files" in text and "9x5 L" in text


def test_wide_csv_is_summarised(task):
    import pandas as pd

    pd.DataFrame(np.zeros((2, 100)), columns=[f"p{i}" for i in range(100)]).to_csv(task.public_dir / "wide.csv", index=False)
    assert "... 60 more columns (float64 x60)" in build_overview(task.public_dir)


def test_long_description_keeps_its_evaluation_section():
    text = "# T\n" + "filler " * 1000 + "\n## Evaluation\nScored by RMSE.\n"
    head = description_head(text, limit=500)
    assert len(head) < 2000 and "Scored by RMSE." in head
