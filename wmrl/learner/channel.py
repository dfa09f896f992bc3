"""Calls between ranks: rank 0 announces each call it makes on every rank, ranks 1.. make it too.

Every rank of a multi-rank learner must enter the same collectives in the same order, but only rank 0
runs the coordinator and decides what comes next. So rank 0 announces each collective call (a name and
its arguments) before making it, and every other rank waits in :meth:`CallChannel.serve` for the next
announcement, then makes the call it registered under that name:

    rank 0                                          ranks 1..N-1
    with channel.leading("update", groups, ...): ─▶ channel.serve(): calls["update"](groups, ...)
        learner.update(groups, ...)  (collectives on the learner's group, both sides)
    channel.release()                             ─▶ serve() returns

Who takes part registers the calls (``register``): the learner its update, weight sync and checkpoints
(``wmrl/learner/follower.py``), data-parallel generation its ``generate``
(``wmrl/generation/data_parallel.py``). The channel knows no call by name.

How long a rank may wait. Between two calls rank 0 may work alone for hours (an evaluation with real
executions, anchor turns of up to 20 minutes each), far past the learner group's timeout (30 minutes,
NCCL's watchdog on GPUs). So announcements travel on a gloo group of their own, created with a timeout
of :data:`CALL_WAIT_S` (a week); the collectives of the calls stay on the learner's group (NCCL on GPUs)
with its own timeout, which only ever measures ranks that are inside the same call.

How a dead rank 0 is noticed. Each follower waits on its TCP connection to rank 0 in the channel's gloo
group; when rank 0's process ends in any way (crash, OOM kill, SIGKILL), its kernel closes that
connection and the waiting follower's receive fails at once (:class:`LeaderGone`), so the rank exits
with an error instead of waiting out the week. A host that vanishes without closing its connections
is Slurm's to notice: it marks the node down and ends the job's tasks on every node.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import torch.distributed as dist

log = logging.getLogger(__name__)
CALL_WAIT_S = 7 * 24 * 3600.0  # how long a follower waits for rank 0's next call: any step's length
STOP = "stop"  # rank 0's last announcement: no call follows


class LeaderGone(RuntimeError):
    """Rank 0's connection closed while this rank waited for (or received) its next call."""


class CallChannel:
    """Rank 0's announcements of the calls every rank makes (see the module docstring).

    Built by every rank together (the gloo group is created collectively), right after the learner's
    process group; in a world of one it is inert: ``leading`` only runs its block."""

    def __init__(self, wait_s: float = CALL_WAIT_S) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self._group = (dist.new_group(backend="gloo", timeout=timedelta(seconds=wait_s))
                       if self.world_size > 1 else None)
        self._calls: dict[str, Callable[..., object]] = {}
        self._between_calls = True  # False while a call is under way (no STOP may be sent then)

    def register(self, name: str, make: Callable[..., object]) -> None:
        """On ranks 1..: what this rank does when rank 0 makes the call ``name`` (with its arguments)."""
        if name == STOP or name in self._calls:
            raise ValueError(f"call {name!r} is already registered on this rank")
        self._calls[name] = make

    def share(self, objects: Sequence[Any]) -> list[Any]:
        """Rank 0's ``objects`` on every rank, waiting as long as a call may (e.g. the initial policy's path)."""
        box = list(objects)
        if self._group is not None:
            try:
                dist.broadcast_object_list(box, src=0, group=self._group)
            except RuntimeError as err:
                if self.rank == 0:
                    raise
                raise LeaderGone(f"rank 0 is gone: its connection closed while rank {self.rank} waited for "
                                 f"its next call ({err})") from err
        return box

    @contextlib.contextmanager
    def leading(self, name: str, *args: Any) -> Iterator[None]:
        """Rank 0: announce the call ``name`` to the other ranks, then make it here (in the block)."""
        if self.rank != 0:
            raise RuntimeError(f"rank {self.rank} cannot lead call {name!r}: rank 0 leads, the others serve()")
        self._between_calls = False
        self.share([(name, args)])
        yield
        self._between_calls = True

    def serve(self) -> int:
        """Ranks 1..: make rank 0's calls as they come, until it releases this rank; returns how many."""
        if self.rank == 0:
            raise RuntimeError("rank 0 leads the calls (leading); serve() is for ranks 1..N-1")
        made = 0
        while True:
            ((name, args),) = self.share([None])
            if name == STOP:
                return made
            make = self._calls.get(name)
            if make is None:
                raise RuntimeError(f"rank 0 made the call {name!r}, which rank {self.rank} did not register "
                                   f"(it registered {sorted(self._calls)})")
            make(*args)
            made += 1

    def release(self) -> None:
        """Rank 0: let the other ranks' ``serve`` return (once, and only between calls: inside one they are
        in its collectives). Safe to register at exit, so a coordinator that ends in any way releases them."""
        if self._group is None or not self._between_calls or not dist.is_initialized():
            return
        self._between_calls = False
        try:
            self.share([(STOP, ())])
        except (RuntimeError, ValueError) as err:  # the other ranks already gone (the job is being torn down)
            log.warning("could not release the follower ranks: %s", err)
