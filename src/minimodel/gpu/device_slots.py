"""Which of a host's GPUs a GPU job runs on, when several jobs run at once (`snakemake --resources
gpu=K gpu_measure=K`): Snakemake counts the GPUs its jobs hold, but names none.

Each GPU has two slots, named after the workflow's two GPU resources:
- `gpu`: held by a job that runs its work on the GPU (correctness, timing, DRAM bytes);
- `gpu_measure`: held by a job whose kernels would land in a measurement (the warm-up), and by
  every measuring job (timing, DRAM bytes).
A job claims one GPU with every slot it needs (`claim`): two measuring jobs are never on one GPU,
a warm-up never runs beside a measurement on its GPU, and a warm-up may share one with the
correctness sweep, as on a host with one GPU. A slot is an exclusive `flock` on a file
`<folder>/gpu<i>.<slot>.lock`: taken atomically, and let go by the kernel when the job's process
ends, however it ends. The job then sees that GPU alone (`CUDA_VISIBLE_DEVICES`), set before
CUDA starts in it, and its manifest records which (`Claim.record`).

The workflow turns this on for a local run (`workflow/rules/gpu.smk`) by setting, in the jobs'
environment, `GPUS_VARIABLE` (K, the `gpu` resource) and `FOLDER_VARIABLE`; without them (a
SLURM job, whose GPU SLURM chose; a process outside the workflow) `claim` changes nothing.
Torch is asked about CUDA through NVML until then (`PYTORCH_NVML_BASED_CUDA_CHECK`, which the
workflow sets beside them), so that CUDA starts only once the GPU is chosen.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

GPUS_VARIABLE = "MINIMODEL_GPUS"
FOLDER_VARIABLE = "MINIMODEL_GPU_LOCKS"
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
GPU, MEASURE = "gpu", "gpu_measure"
MEASURING = (GPU, MEASURE)  # gpu_timing_shard, gpu_bytes_shard
SWEEP = (GPU,)  # gpu_correctness_shard
WARM = (MEASURE,)  # gpu_warm
WAIT_S = 0.5  # between tries while every GPU is taken
_HELD: list = []  # every claim of this process, so that no lock goes with a dropped reference


class DeviceError(RuntimeError):
    """The GPUs the run was given cannot be handed out as asked (the message says why)."""


@dataclass
class Claim:
    """The GPU a job holds: its index among the run's K, what CUDA_VISIBLE_DEVICES became, the
    slots held, and the seconds the job waited for them."""

    index: int
    visible: str
    slots: tuple[str, ...]
    waited_s: float
    files: list = field(default_factory=list, repr=False)  # open: closing one lets its lock go

    def record(self) -> dict:
        """What the job's manifest records (`extra.gpu_slot`), the GPU's UUID where CUDA sees it."""
        return {"index": self.index, "cuda_visible_devices": self.visible, "slots": list(self.slots),
                "waited_s": round(self.waited_s, 1), "uuid": uuid()}


def uuid() -> str | None:
    """The UUID of the GPU this process sees first, None without one."""
    if "torch" not in sys.modules:
        return None
    torch = sys.modules["torch"]
    if not torch.cuda.is_available():
        return None
    return str(getattr(torch.cuda.get_device_properties(0), "uuid", None))


def _visible(count: int, environ) -> list[str]:
    """The K devices a run hands out: those of a CUDA_VISIBLE_DEVICES already set, else 0 … K-1."""
    given = environ.get("CUDA_VISIBLE_DEVICES")
    devices = [d.strip() for d in given.split(",") if d.strip()] if given else [str(i) for i in range(count)]
    if len(devices) < count:
        raise DeviceError(f"--resources gpu={count}, but CUDA_VISIBLE_DEVICES={given!r} names "
                          f"{len(devices)} GPU(s): give gpu=<the number of GPUs> (and gpu_measure the same)")
    return devices[:count]


def _lock(path: Path):
    """The open file of an exclusive lock on `path`, or None where another process holds it."""
    fh = open(path, "a")  # held open for the job's life: the lock is the open file
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _try(folder: Path, index: int, slots: tuple[str, ...]) -> list | None:
    held = []
    for slot in slots:
        fh = _lock(folder / f"gpu{index}.{slot}.lock")
        if fh is None:
            for other in held:
                other.close()
            return None
        held.append(fh)
    return held


def _busy(folder: Path, index: int, slot: str) -> bool:
    fh = _lock(folder / f"gpu{index}.{slot}.lock")
    if fh is None:
        return True
    fh.close()
    return False


def _order(folder: Path, count: int, slots: tuple[str, ...]) -> list[int]:
    """The GPUs to try, in order: for a job of one slot, first those whose other slot is taken
    (a warm-up beside the sweep), keeping whole GPUs for the measuring jobs."""
    if len(slots) != 1:
        return list(range(count))
    other = MEASURE if slots[0] == GPU else GPU
    return sorted(range(count), key=lambda i: not _busy(folder, i, other))


def claim(slots: tuple[str, ...], environ=os.environ, progress=None, wait_s: float = WAIT_S) -> Claim | None:
    """Hold a GPU with every one of `slots` free, waiting while none has them, and make it the
    only GPU this process sees; None where the run hands out no GPUs (module docstring). Call it
    before anything starts CUDA in this process."""
    count = environ.get(GPUS_VARIABLE)
    if not count:
        return None
    count = int(count)
    if "torch" in sys.modules and environ.get(NVML_CHECK) != "1":
        raise DeviceError(f"torch was imported before this job's GPU was chosen, without {NVML_CHECK}=1: "
                          "it may have started CUDA on every GPU; the workflow sets it beside "
                          f"{GPUS_VARIABLE}")
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        raise DeviceError("CUDA started in this job before its GPU was chosen")
    devices = _visible(count, environ)
    folder = Path(environ[FOLDER_VARIABLE])
    folder.mkdir(parents=True, exist_ok=True)
    started, said = time.monotonic(), False
    while True:
        for index in _order(folder, count, slots):
            held = _try(folder, index, slots)
            if held is not None:
                environ["CUDA_VISIBLE_DEVICES"] = devices[index]
                _HELD.append(Claim(index, devices[index], tuple(slots), time.monotonic() - started, held))
                return _HELD[-1]
        if not said and progress is not None:
            print(f"waiting for a GPU with {' and '.join(slots)} free (of {count})", file=progress)
            said = True
        time.sleep(wait_s)
