"""What machine a stage ran on: CPU, GPU, software, cluster job; and demanding a usable GPU.

`environment()` is what every manifest records (`minimodel.floor.provenance.manifest`): Python and
the versions of the packages that make the numbers, a sha256 of the whole installed package set, the CPU, the
GPU with its driver, CUDA runtime, cuDNN, compute capability and clocks, the host name and, inside
a SLURM job, the job's id, name, partition and nodes.

Torch is imported for the GPU's record only where a GPU may be (`devices.cuda_available`): on
Linux without a GPU driver's device nodes the record is the CPU's, as torch would have it, and a
job that runs no kernel imports no torch.

`require_cuda()` is called by the GPU stages when the run is meant for a GPU (`gpu_required`:
`gpu.require_cuda: true`, or, by default, inside a SLURM job that was given GPUs, as the SLURM
profile's GPU rules are): instead of falling back to Triton's interpreter or a no-GPU table,
the stage stops and says which node lacks what.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

import triton

from minimodel.floor.provenance import devices

SLURM_GPU_VARIABLES = ("SLURM_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS")
SLURM_VARIABLES = {"job_id": "SLURM_JOB_ID", "job_name": "SLURM_JOB_NAME",
                   "partition": "SLURM_JOB_PARTITION", "nodes": "SLURM_JOB_NODELIST",
                   "gpus": "SLURM_JOB_GPUS"}


def cpu_description() -> str:
    """The CPU model and core count of this machine."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"cpu: {cpu} ({os.cpu_count()} cores)"


def device_description() -> str:
    """The accelerator that torch sees, or the CPU when there is none."""
    if devices.cuda_available():
        # not at the top: the Snakefile's process imports this module, and no torch
        import torch

        return f"cuda: {torch.cuda.get_device_name(0)}"
    return cpu_description()


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_set() -> tuple[str, int]:
    """sha256 of every installed distribution's "name==version", sorted, and how many there are."""
    names = sorted({f"{d.metadata['Name'].lower()}=={d.version}"
                    for d in importlib.metadata.distributions() if d.metadata["Name"]})
    return hashlib.sha256("\n".join(names).encode()).hexdigest(), len(names)


def smi_device(uuid: str | None, environ=os.environ) -> str:
    """nvidia-smi's name for the GPU this process's CUDA calls device 0: its UUID. nvidia-smi counts
    every GPU of the host, not those CUDA_VISIBLE_DEVICES leaves this process (a job handed one of
    several: `minimodel.gpu.device_slots`, SLURM), so its index 0 may be another GPU. Without a
    UUID, the first device CUDA_VISIBLE_DEVICES names (an index or a UUID), else 0."""
    if uuid:
        return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    visible = environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return visible or "0"


def _nvidia_smi(*fields: str, device: str = "0") -> list[str] | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader",
                              f"--id={device}"], capture_output=True, text=True, timeout=20,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.strip().split(",")]
    return values if len(values) == len(fields) else None


def gpu() -> dict | None:
    """The first CUDA device this process sees (the one a GPU job claimed: CUDA_VISIBLE_DEVICES):
    name, UUID, capability, memory, driver, CUDA runtime, cuDNN, clocks."""
    if not devices.cuda_available():
        return None
    # not at the top: the Snakefile's process imports this module, and no torch
    import torch

    props = torch.cuda.get_device_properties(0)
    uuid = str(props.uuid) if getattr(props, "uuid", None) else None
    info = {
        "name": props.name,
        "uuid": None if uuid is None else smi_device(uuid),
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": props.L2_cache_size,  # the device's, beside the config's assumed symbolic.l2_bytes
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }
    smi = _nvidia_smi("driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
                      "power.limit", device=smi_device(uuid))
    if smi:
        info.update(zip(("driver", "clock_sm", "clock_mem", "clock_max_sm", "clock_max_mem",
                         "power_limit"), smi, strict=True))
    return info


def device_l2_bytes() -> int | None:
    """The L2 cache of the first CUDA device as CUDA reports it (60 MiB on the H200); None without
    one. The byte model assumes the config's symbolic.l2_bytes instead: the GPU stages record both."""
    # not at the top: the Snakefile's process imports this module, and no torch
    import torch

    return int(torch.cuda.get_device_properties(0).L2_cache_size) if torch.cuda.is_available() else None


def slurm_job() -> dict | None:
    """The SLURM job this process runs in, or None outside one."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return {key: os.environ.get(var) for key, var in SLURM_VARIABLES.items()}


def environment() -> dict:
    """What a manifest records about the software and the machine."""
    packages, count = package_set()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": version("torch"),
        "triton": version("triton"),
        "snakemake": version("snakemake"),
        "numpy": version("numpy"),
        "packages_sha256": packages,
        "packages": count,
        "device": device_description(),
        "cpu": cpu_description(),
        "gpu": gpu(),
        "host": socket.gethostname(),
        "slurm": slurm_job(),
        # Triton's own reading of TRITON_INTERPRET ("1", "true", "on", ...), from which the kernel
        # took `minimodel.kernel.INTERPRETED` when it was defined (a stage's; the floor reads Triton)
        "triton_interpret": triton.knobs.runtime.interpret,
    }


class NoUsableGPU(RuntimeError):
    """The run asked for a GPU and this node has none that torch can use."""


def cuda_problem() -> str | None:
    """Why torch cannot use a CUDA device here, or None when it can."""
    try:
        # not at the top: the Snakefile's process imports this module, and no torch
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a build without CUDA "
                "(install the CUDA build, e.g. torch==2.11.0)")
    if torch.cuda.is_available():
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        torch.cuda.init()
        reason = "torch sees no CUDA device"
    except Exception as err:
        reason = f"CUDA could not start: {str(err).splitlines()[0]}"
    return f"{reason} (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else reason


def gpu_required(setting: bool | None) -> bool:
    """`gpu.require_cuda` resolved: True or False as set; None: whether SLURM gave this job GPUs."""
    if setting is None:
        return any(os.environ.get(var) for var in SLURM_GPU_VARIABLES)
    return bool(setting)


def require_cuda() -> None:
    """Raise NoUsableGPU, naming this node and what is missing, unless torch can use a GPU."""
    problem = cuda_problem()
    if problem:
        job = slurm_job()
        where = socket.gethostname() + (f" (SLURM job {job['job_id']})" if job else "")
        raise NoUsableGPU(f"gpu.require_cuda is set, but node {where} has no usable GPU: {problem}")
