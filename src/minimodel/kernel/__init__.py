"""Stage 3: the Triton flash-attention forward kernel (`flash`) and its tile policy (`config`).

Compiled or interpreted is decided once per process, by whoever starts the run: `triton.jit`
reads TRITON_INTERPRET when a kernel is defined, that is when `minimodel.kernel.flash` is
imported. So every entry point that runs the kernel (the workflow's `gpu_*` scripts, the tests'
conftest) calls `use_interpreter_if_no_gpu()` first, before anything imports the kernel; on a
machine without a CUDA device the same kernel source then runs on CPU tensors under Triton's
interpreter, and `INTERPRETED` says which it is.

Importing this package does nothing else: the names below come from `flash` and `config` on
first use (`from minimodel.kernel import flash_attn_forward` imports `flash` then), and the
Gluon kernel (`hopper`) is imported only on Hopper, by `flash`.
"""

import os
import sys

_CONFIG_NAMES = ("HOPPER", "SHARED_MEMORY", "FwdConfig", "get_fwd_config", "portable_config")
_FLASH_NAMES = ("BF16_INTERPRETER_REASON", "INTERPRETED", "SUPPORTED_DTYPES", "SUPPORTED_HEAD_DIMS",
                "default_config", "flash_attn_forward", "launch_config")

__all__ = ["use_interpreter_if_no_gpu", *_CONFIG_NAMES, *_FLASH_NAMES, "attention", "flash_attn_backward"]


def use_interpreter_if_no_gpu() -> None:
    """Switch Triton's CPU interpreter on (TRITON_INTERPRET=1) when there is no CUDA device.

    A TRITON_INTERPRET the user set is left as it is. Call it before `minimodel.kernel.flash` is
    imported: once the kernels are defined the choice is made, and a switch that came too late
    raises instead of leaving a run that cannot launch its kernel on the CPU.
    """
    import torch

    if "TRITON_INTERPRET" in os.environ or torch.cuda.is_available():
        return
    if f"{__name__}.flash" in sys.modules:
        raise RuntimeError("use_interpreter_if_no_gpu() came after minimodel.kernel.flash was imported, "
                           "which compiled its kernels for a GPU: call it first")
    os.environ["TRITON_INTERPRET"] = "1"


def __getattr__(name: str):
    if name in _CONFIG_NAMES:
        from minimodel.kernel import config as module
    elif name in _FLASH_NAMES:
        from minimodel.kernel import flash as module
    elif name in ("attention", "flash_attn_backward"):  # differentiable entry point; the backward
        from minimodel.kernel import autograd as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
