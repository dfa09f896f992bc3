"""The static pre-check flags only certain failures: each flagged snippet really fails in bwrap."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wmrl.sandbox import SandboxConfig, SandboxLimits, make_backend
from wmrl.sandbox.probe import probe_runtime, table_runtime
from wmrl.world_model.precheck import DataInventory, PreCheck

bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed (CI installs it)")

HEAD = "import os\nimport pandas as pd\n"
WRITE = "pd.DataFrame({'id': [1, 2], 'y': [0, 1]}).to_csv(SUBMISSION_PATH, index=False)\n"
FLAGGED = {
    "syntax": (HEAD + "x = (1,\n" + WRITE, "runtime", "SyntaxError"),
    "import": (HEAD + "import cv2\n" + WRITE, "imports", "ModuleNotFoundError"),
    "import_in_main": (HEAD + "def main():\n    import jax\n    " + WRITE + "main()\n", "imports",
                       "ModuleNotFoundError"),
    "file": (HEAD + "train = pd.read_csv(os.path.join(DATA_DIR, 'training.csv'))\n" + WRITE, "files_columns",
             "FileNotFoundError"),
    "file_fstring": (HEAD + "t = pd.read_csv(f'{DATA_DIR}/data/train.csv')\n" + WRITE, "files_columns",
                     "FileNotFoundError"),
    "column": (HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nprint(train['label'].mean())\n" + WRITE,
               "files_columns", "KeyError"),
    "column_list": (HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nX = train[['x', 'z']]\n" + WRITE,
                    "files_columns", "KeyError"),
    "undefined_name": (HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nmodel = RandomForestClassifier()\n"
                       + WRITE, "imports", "NameError"),
    "undefined_in_main": (HEAD + "def main():\n    x = np.zeros(3)\n    " + WRITE + "main()\n", "imports", "NameError"),
    "bare_path": (HEAD + "train = pd.read_csv('train.csv')\n" + WRITE, "files_columns", "FileNotFoundError"),
    "kaggle_path": (HEAD + "train = pd.read_csv('/kaggle/input/x/train.csv')\n" + WRITE, "files_columns",
                    "FileNotFoundError"),
    "no_submission": (HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nprint(len(train))\n", "submission",
                      "InvalidSubmission"),
}
NOT_FLAGGED = {
    "fine": HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\nprint(train['y'].mean())\n" + WRITE,
    "guarded_import": HEAD + "try:\n    import cv2\nexcept ImportError:\n    cv2 = None\n" + WRITE,
    "import_in_uncalled_function": HEAD + "def unused():\n    import cv2\n" + WRITE,
    "created_column": HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\ntrain['z'] = 1\nprint(train['z'])\n"
    + WRITE,
    "renamed_column": HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv').rename(columns={'y': 'label'})\n"
    "print(train['label'])\n" + WRITE,
    "branch": HEAD + "if os.path.exists(os.path.join(DATA_DIR, 'extra.csv')):\n"
    "    pd.read_csv(os.path.join(DATA_DIR, 'extra.csv'))\n" + WRITE,
    "env_default": HEAD + "d = os.environ.get('DATA_DIR', '/data')\ntrain = pd.read_csv(os.path.join(d, 'train.csv'))\n"
    + WRITE,
    "name_bound_later_in_a_branch": HEAD + "if os.environ.get('X'):\n    y = 1\nelse:\n    y = 2\nprint(y)\n" + WRITE,
    "name_in_uncalled_function": HEAD + "def f():\n    return np.zeros(3)\n" + WRITE,
    "star_import": HEAD + "from math import *\nprint(sqrt(2))\n" + WRITE,
    "comprehension_variable": HEAD + "print([i * 2 for i in range(3)])\n" + WRITE,
    "own_file": HEAD + "pd.DataFrame({'a': [1]}).to_csv('tmp.csv')\nprint(pd.read_csv('tmp.csv'))\n" + WRITE,
    "relative_submission": HEAD + "train = pd.read_csv(f'{DATA_DIR}/train.csv')\n"
    "train[['id', 'y']].to_csv('submission.csv', index=False)\n",
}


@pytest.fixture
def public(tmp_path: Path) -> Path:
    d = tmp_path / "public"
    d.mkdir()
    (d / "train.csv").write_text("id,x,y\n1,0.5,1\n2,1.5,0\n")
    (d / "test.csv").write_text("id,x\n3,0.1\n")
    return d


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    if shutil.which("bwrap") is None:
        return table_runtime()
    return probe_runtime(make_backend(SandboxConfig(backend="bwrap")), SandboxLimits(timeout_s=60),
                         tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_certain_failures_are_flagged_with_their_line_and_exception(name, public, runtime):
    code, check, error_type = FLAGGED[name]
    if error_type == "ModuleNotFoundError" and runtime.modules is None:
        pytest.skip("imports are checked against a probed sandbox only")
    verdict = PreCheck(DataInventory.from_dir(public), runtime).check(code)
    assert verdict is not None and (verdict.check, verdict.error_type, verdict.verdict) == (check, error_type, "fail")
    assert verdict.source == "precheck" and verdict.confidence == 1.0
    if error_type not in ("InvalidSubmission",):
        assert verdict.error_line is not None and error_type in verdict.env_feedback


@pytest.mark.parametrize("name", sorted(NOT_FLAGGED))
def test_code_that_may_run_is_never_flagged(name, public, runtime):
    assert PreCheck(DataInventory.from_dir(public), runtime).check(NOT_FLAGGED[name]) is None


def test_unprobed_runtime_never_flags_imports(public):
    assert PreCheck(DataInventory.from_dir(public), table_runtime()).check(HEAD + "import cv2\n" + WRITE) is None


@bwrap
@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_every_flagged_snippet_really_fails_in_the_sandbox(name, public, tmp_path):
    from wmrl.sandbox.runspec import submission_file

    result = make_backend(SandboxConfig(backend="bwrap")).run(FLAGGED[name][0], public, tmp_path / "w",
                                                              SandboxLimits(timeout_s=60))
    path, _ = submission_file(tmp_path / "w")
    assert result.status != "ok" or path is None, (name, result.status)
    if FLAGGED[name][2] not in ("InvalidSubmission",):
        assert FLAGGED[name][2] in (result.traceback or result.stderr_tail)


LONG_SUM = HEAD + "w = " + " + ".join(["1"] * 1000) + "\nprint(w)\n" + WRITE
DEEP_PATH = HEAD + "t = pd.read_csv(DATA_DIR + " + " + ".join(["'/a'"] * 3000) + ")\n" + WRITE


def test_a_long_sum_that_runs_is_not_a_recursion_error(public):
    """CPython runs a 1000-term sum; compiling its AST object recursed past the limit."""
    assert PreCheck(DataInventory.from_dir(public), table_runtime()).settle(LONG_SUM).skipped is None


@pytest.mark.parametrize("code, skipped", [
    (DEEP_PATH, "too_deep"),  # a rule's walk of the path expression recurses past the limit
    (HEAD + "x = 1\n" * 200_000 + WRITE, "too_large"),
    (HEAD + "s = '\ud800'\n" + WRITE, "unparseable"),  # a lone surrogate: not encodable source
])
def test_code_the_precheck_cannot_analyse_is_left_to_the_world_model_with_the_reason(code, skipped, public):
    settlement = PreCheck(DataInventory.from_dir(public), table_runtime()).settle(code)
    assert (settlement.verdict, settlement.skipped) == (None, skipped)


def test_a_nul_byte_never_raises(public):
    """CPython refuses source with a NUL byte (a SyntaxError since 3.11.4, a ValueError before): certain, or skipped."""
    settlement = PreCheck(DataInventory.from_dir(public), table_runtime()).settle(HEAD + "x = 1\0\n" + WRITE)
    assert (settlement.verdict is not None and settlement.verdict.error_type == "SyntaxError"
            or settlement.skipped == "unparseable")


def test_the_environment_counts_what_the_precheck_skipped(public):
    from wmrl.rollout import Submission
    from wmrl.world_model.backends import Completion
    from wmrl.world_model.config import WorldModelConfig
    from wmrl.world_model.env import TaskCase, WorldModelEnvironment

    class Silent:
        def complete(self, requests):
            return [Completion("") for _ in requests]

    case = TaskCase("Competition: T\n", DataInventory.from_dir(public), 10)
    env = WorldModelEnvironment(Silent(), {"t": case}, WorldModelConfig(prompt_style="short"), table_runtime())
    fb = env.evaluate([Submission("k", "t", DEEP_PATH)])[0]
    assert fb.score is not None
    assert env.stats()["precheck_skipped"] == 1 and env.stats()["precheck_skipped:too_deep"] == 1
