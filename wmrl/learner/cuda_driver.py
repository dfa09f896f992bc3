"""Does this node's NVIDIA driver run the CUDA that torch was built for? Checked when the learner starts.

vLLM pins the CUDA build of torch it was compiled against (0.27-0.33: CUDA 13, containers/learner.def),
and a CUDA 13 build needs an R580 or newer driver, or NVIDIA's forward-compatibility libraries. With an
older driver ``torch.cuda.is_available()`` is merely False (a warning), and DeepSpeed would quietly fall
back to the CPU accelerator: hours later the job is still loading. So a CUDA build of torch on a node with
an NVIDIA driver (``nvidia-smi`` on PATH) is checked before anything starts, with the fix in the message.

What the driver supports is read first from the CUDA driver API (``cuDriverGetVersion`` through torch:
it counts forward-compatibility libraries that are loaded), else from ``nvidia-smi``'s driver version
against NVIDIA's minimum driver of each CUDA major.
"""

from __future__ import annotations

import shutil
import subprocess

import torch

# The oldest Linux driver that runs every minor release of a CUDA major (NVIDIA's CUDA Toolkit release
# notes, "Minimum Required Driver Version for CUDA Minor Version Compatibility").
MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}


class CudaDriverError(RuntimeError):
    """The node's driver cannot run this torch's CUDA."""


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.strip().split(".") if part.isdigit())


def driver_cuda_major(driver_version: str) -> int:
    """The newest CUDA major a Linux driver (``nvidia-smi``'s ``driver_version``, e.g. 550.54.15) runs."""
    found = _version_tuple(driver_version)
    supported = [major for major, minimum in MIN_DRIVER.items() if found >= minimum]
    return max(supported, default=0)


def cuda_driver_problem(torch_cuda: str | None, driver_api: int | None, driver_version: str | None) -> str | None:
    """Why this torch cannot run on this driver (with the fix), or None where it can or nothing is known.

    ``torch_cuda``: ``torch.version.cuda`` (None: a CPU build); ``driver_api``: ``cuDriverGetVersion``
    (13000 = CUDA 13.0, None: unknown); ``driver_version``: ``nvidia-smi``'s driver version (None: unknown).
    """
    if not torch_cuda:
        return None
    needed = int(torch_cuda.split(".")[0])
    if driver_api:
        supported = driver_api // 1000
    elif driver_version:
        supported = driver_cuda_major(driver_version)
    else:
        return None
    if supported >= needed:
        return None
    minimum = ".".join(f"{n:02d}" if i else str(n) for i, n in enumerate(MIN_DRIVER.get(needed, (0,))))
    found = f"driver {driver_version}" if driver_version else "driver"
    return (f"torch {torch.__version__} is built for CUDA {torch_cuda} (the CUDA vLLM pins, containers/learner.def), "
            f"but this node's NVIDIA {found} runs CUDA {supported}.x at most: CUDA {needed} needs driver >= "
            f"{minimum}. Fix: ask the admins for an R{MIN_DRIVER.get(needed, (0,))[0]} or newer driver on the GPU "
            f"nodes, or (data-center GPUs) NVIDIA's forward-compatibility package cuda-compat-{needed}-0 on the "
            "node, or build the learner image for the node's CUDA (docs/cluster.md, \"CUDA and the driver\")")


def _driver_api_version() -> int | None:
    try:
        version = int(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError):  # a CPU build of torch, or no libcuda
        return None
    return version or None


def _nvidia_smi_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def check_cuda_driver() -> None:
    """Raise :class:`CudaDriverError` where a CUDA build of torch meets an NVIDIA driver too old for it.
    Nothing is checked on a CPU build or on a node without ``nvidia-smi`` (no NVIDIA driver)."""
    if not torch.version.cuda or shutil.which("nvidia-smi") is None:
        return
    problem = cuda_driver_problem(torch.version.cuda, _driver_api_version(), _nvidia_smi_driver())
    if problem:
        raise CudaDriverError(problem)
