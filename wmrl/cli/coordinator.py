"""``wmrl coordinator RUN_DIR``: the coordinator of a run in this process, as the body of a plain sbatch job.

It runs exactly what ``wmrl launch`` starts: the callable submitit runs in the coordinator job
(:class:`~wmrl.orchestration.coordinator.Coordinator`), or what a local launch runs in-process. The run
directory comes from ``wmrl launch CONFIG ... --no-submit``. ``slurm/templates/coordinator.sbatch``
runs it under ``srun`` and forwards the allocation's USR1 warning to it.

Exit status (the template's requeue contract): 0 when the run finished; 1 when it stopped before its
last step (cancelled); 2 on an error (another coordinator holds the run, a crash); ``128 + signal`` after SIGTERM or
SIGUSR1, once the last step boundary is checkpointed, so the job can be requeued and resume there.
"""

from __future__ import annotations

import argparse
import signal

from wmrl.cli.args import add_command
from wmrl.orchestration.coordinator import Coordinator
from wmrl.storage.rundir import RunDir


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "coordinator", "run a run's coordinator in this process (the body of a plain sbatch job)",
        __doc__)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (wmrl launch CONFIG --no-submit)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Errors (no run directory, another coordinator holds the run, a crash) end in wmrl.cli.main: one
    # line on stderr, exit 2, which the template does not requeue.
    coordinator = Coordinator(str(RunDir.open(args.run_dir).path))
    # Slurm's warning before the time limit (`--signal=B:USR1@300`, forwarded by the batch shell): save
    # the last step boundary and exit as on SIGTERM. (A submitit job gets USR2 instead, which submitit
    # turns into Coordinator.checkpoint and requeues itself.)
    signal.signal(signal.SIGUSR1, coordinator.stop_on_signal)
    result = coordinator()  # a line per step in the job log
    print(f"wmrl coordinator: {result.get('state')} at step {result.get('step')}", flush=True)
    return 0 if result.get("state") == "finished" else 1
