"""One step of `wmrl train` (the tiny default) whose world model is a misbehaving OpenAI-compatible
server in the mixed mode of tests/misbehaving_server.py: the step must finish, with the fallbacks and
the infrastructure failures counted in `wmrl status` and the metrics.

    python scripts/misbehaving_world_model_step.py OUT_DIR

Needs the tiny default's SFT (built by `wmrl train` on first use, cached); the test suite cannot build it
in time, so this runs beside it. Writes OUT_DIR/status.txt, OUT_DIR/server_modes.json and the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from misbehaving_server import MIXED, misbehaving_server


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    wmrl = [sys.executable, "-m", "wmrl.cli.main"]
    with misbehaving_server(MIXED, drip_s=1.0, lifetime_s=1800) as server:
        train = subprocess.run([*wmrl, "train", "train.steps=1", "train.eval_split=none", f"runs_root={out}",
                                "run_name=misbehaving-wm", "world_model.backend=http", f"world_model.url={server.url}",
                                "world_model.timeout_s=3", "world_model.retries=1"], check=False)
        (out / "server_modes.json").write_text(json.dumps(dict(server.counts), indent=1, sort_keys=True))
    status = subprocess.run([*wmrl, "status", str(out / "misbehaving-wm")], capture_output=True, text=True,
                            check=False)
    (out / "status.txt").write_text(status.stdout + status.stderr)
    print(status.stdout)
    return train.returncode


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
