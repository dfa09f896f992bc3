"""Peak memory of the coordinator process, for the per-step metrics, ``progress.json`` and ``wmrl status``.

``getrusage``'s ``ru_maxrss`` is the kernel's high-water mark of the resident set (``VmHWM``, KiB on
Linux): the coordinator's own peak (policy, generator, learner, world model when in-process), since
this process started (a requeued job starts a new process, so a new peak). The kernel keeps its memory
counters in per-CPU batches, so the mark can trail a ``VmRSS`` reading by some tens of KiB; the peak is
its maximum with the resident set now.
``RUSAGE_CHILDREN`` is the largest peak of the child processes that have ended and been waited for
(local workers, their sandboxes, compile helpers); a child still running is not in it yet.
"""

from __future__ import annotations

import math
import resource

KEYS = ("peak_rss_mb", "peak_rss_children_mb")


def rss_mb() -> float:
    """This process's resident set now (``VmRSS``), in MiB; NaN where /proc cannot tell."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return float(line.split()[1]) / 1024
    except (OSError, IndexError, ValueError):
        pass
    return float("nan")


def peak_rss_mb() -> dict[str, float]:
    """``{"peak_rss_mb": this process, "peak_rss_children_mb": largest ended child}`` in MiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    now = rss_mb()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return {KEYS[0]: own if math.isnan(now) else max(own, now), KEYS[1]: children}
