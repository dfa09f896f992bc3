"""Progress of long work: a tqdm bar on a terminal, plain timestamped lines in a log file.

A sweep or a training run started under ``nohup``, by Slurm or by a sweep driver writes to a file,
where a tqdm bar is either off or a single line of carriage returns. There it prints one line at most
every ``every_s`` seconds, and always the last one, with what is done, what failed, and an ETA.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Protocol, TextIO


class Progress(Protocol):
    def update(self, n: int = 1) -> Any: ...

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> Any: ...

    def close(self) -> Any: ...


def format_duration(seconds: float | None) -> str:
    """``HH:MM:SS`` (days past one day); "-" when unknown."""
    if seconds is None:
        return "-"
    return time.strftime("%H:%M:%S", time.gmtime(max(0.0, seconds))) if seconds < 86400 else f"{seconds / 86400:.1f} d"


class LineProgress:
    """``done/total unit, elapsed, ETA`` as plain lines; the ETA counts only this process's work."""

    def __init__(self, total: int, desc: str, unit: str, initial: int = 0, every_s: float = 30.0,
                 file: TextIO | None = None) -> None:
        self.total, self.desc, self.unit, self.every_s = total, desc, unit, every_s
        self.initial = self.done = initial
        self.file = file or sys.stderr
        self.postfix: dict[str, Any] = {}
        self.started = self.last_line = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        if time.monotonic() - self.last_line >= self.every_s or self.done >= self.total:
            self.write()

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix.update(ordered_dict or {}, **kwargs)

    def close(self) -> None:
        if self.done > self.initial and time.monotonic() - self.last_line > 0.5:
            self.write()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = [f"{self.desc}: {self.done}/{self.total} {self.unit}s", f"{format_duration(elapsed)} elapsed"]
        new = self.done - self.initial
        if 0 < new and self.done < self.total:
            parts.append(f"ETA {format_duration(elapsed / new * (self.total - self.done))}")
        parts += [f"{k} {v}" for k, v in self.postfix.items()]
        return ", ".join(parts)

    def write(self) -> None:
        self.last_line = time.monotonic()
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {self.line()}", file=self.file, flush=True)


def progress_display(total: int, desc: str, unit: str, initial: int = 0, show: bool | None = None) -> Progress:
    """``show`` None: a tqdm bar when stderr is a terminal, lines otherwise; True: a bar; False: nothing."""
    from tqdm import tqdm

    if show is None and not sys.stderr.isatty():
        return LineProgress(total, desc, unit, initial)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=show is False)
