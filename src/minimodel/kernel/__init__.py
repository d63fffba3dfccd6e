"""Stage 3: the Triton flash-attention forward kernel (`flash`) and its tile policy (`config`).

The one place that decides between compiling and interpreting. Triton fixes it when a kernel is
defined (`triton.jit` reads TRITON_INTERPRET), so this package decides before it defines any:
without a CUDA device, and unless the user set TRITON_INTERPRET, it switches Triton's CPU
interpreter on, and the same kernel source runs on CPU tensors. `INTERPRETED` says which.
Nothing else in the project sets TRITON_INTERPRET, and nothing depends on import order: every
module that runs the kernel imports it from here.
"""

import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from minimodel.kernel.config import (  # noqa: E402 (the switch above comes first)
    HOPPER,
    SHARED_MEMORY,
    FwdConfig,
    get_fwd_config,
    portable_config,
)
from minimodel.kernel.flash import (  # noqa: E402
    BF16_INTERPRETER_REASON,
    INTERPRETED,
    SUPPORTED_DTYPES,
    SUPPORTED_HEAD_DIMS,
    default_config,
    flash_attn_forward,
    launch_config,
)

__all__ = ["BF16_INTERPRETER_REASON", "HOPPER", "INTERPRETED", "SHARED_MEMORY", "SUPPORTED_DTYPES",
           "SUPPORTED_HEAD_DIMS", "FwdConfig", "default_config", "flash_attn_forward",
           "get_fwd_config", "launch_config", "portable_config"]
