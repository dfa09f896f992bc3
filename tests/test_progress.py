"""Progress in a log file: plain lines with what is done and an ETA, not a bar of carriage returns."""

from __future__ import annotations

import io
import subprocess
import sys

from wmrl.progress import LineProgress, format_duration, progress_display


def test_lines_say_what_is_done_and_when_it_will_end(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr("wmrl.progress.time.monotonic", lambda: now[0])
    out = io.StringIO()
    bar = LineProgress(total=10, desc="sweep s", unit="run", initial=2, every_s=30.0, file=out)
    now[0] = 10.0
    bar.update(1)  # too soon for a line
    assert out.getvalue() == ""
    bar.set_postfix(failed=1)
    now[0] = 40.0
    bar.update(1)  # 4/10: 2 done in 40 s, 6 left -> 120 s
    now[0] = 45.0
    bar.update(6)  # the last one always prints, with no ETA
    bar.close()  # and is not repeated
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("sweep s: 4/10 runs, 00:00:40 elapsed, ETA 00:02:00, failed 1")
    assert lines[1].endswith("sweep s: 10/10 runs, 00:00:45 elapsed, failed 1")


def test_a_terminal_gets_a_bar_a_log_gets_lines_and_false_gets_nothing() -> None:
    code = (
        "from wmrl.progress import progress_display\n"
        "bar = progress_display(3, 'work', 'item')\n"
        "bar.update(3)\n"
        "bar.close()\n"
        "quiet = progress_display(3, 'quiet', 'item', show=False)\n"
        "quiet.update(3)\n"
        "quiet.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.count("\n") == 1 and "work: 3/3 items" in done.stderr and "\r" not in done.stderr
    assert "quiet" not in done.stderr
    assert type(progress_display(1, "x", "y", show=True)).__name__ == "tqdm"


def test_durations_read_as_clock_time() -> None:
    assert format_duration(None) == "-"
    assert format_duration(3725) == "01:02:05"
    assert format_duration(2 * 86400) == "2.0 d"
