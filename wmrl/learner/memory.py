"""Peak memory of one learner phase, without touching process-wide counters others read.

On a GPU it is the peak of ``torch.cuda.max_memory_allocated`` over the phase. On CPU a thread samples
this process's resident set (``VmRSS``) every ``interval_s``: resetting the kernel's high-water mark
(``/proc/self/clear_refs``) would corrupt the coordinator's own peak, which is measured on VmHWM.
"""

from __future__ import annotations

import threading
from types import TracebackType

import torch

from wmrl.resources import rss_mb


class PeakMemory:
    def __init__(self, device: torch.device, interval_s: float = 0.02) -> None:
        self.device, self.interval_s = device, interval_s
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, rss_mb())
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> PeakMemory:  # noqa: PYI034 - Self needs Python 3.11
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._thread = threading.Thread(target=self._sample, name="learner-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.peak_mb = max(self.peak_mb, rss_mb())
