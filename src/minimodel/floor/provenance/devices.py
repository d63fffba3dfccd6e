"""Whether torch can use a CUDA device here, asked without importing torch where no GPU can be.

Importing torch takes about 1.5 s of CPU, and the jobs that run no kernel (symbolic, plots,
readme, compare, verify; without a GPU, the timing and DRAM-bytes shards and the warm-up, which
then write their planned rows) would import it only to ask this: at entry (`minimodel.entry`:
compiled or interpreted), for their manifest's record of the device (`machine.environment`), and
whether to measure. On Linux,
torch's CUDA reaches a GPU only through a driver's device nodes: NVIDIA's (`/dev/nvidiactl`,
`/dev/nvidiaN`), ROCm's for torch's AMD builds (`/dev/kfd`), WSL2's (`/dev/dxg`). Where there
are none, torch would answer no, and it is not asked; where there are some, or on another
system, torch is asked, so a machine with a GPU records what torch sees.
"""

from __future__ import annotations

import glob
import sys

# the device nodes through which torch's CUDA (or ROCm) may reach a GPU on Linux
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def may_have_gpu(platform: str = sys.platform, nodes: tuple[str, ...] = GPU_NODES) -> bool:
    """False only where torch cannot see a GPU: Linux without any of the GPU drivers' nodes."""
    if not platform.startswith("linux"):
        return True
    return any(glob.glob(pattern) for pattern in nodes)


def cuda_available() -> bool:
    """`torch.cuda.is_available()`, importing torch only where a GPU may be; False without torch."""
    if not may_have_gpu():
        return False
    try:
        # not at the top: importing torch is what this module saves where no GPU can be
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()
