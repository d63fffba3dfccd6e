"""Stage 3: the Triton flash-attention kernels: the forward (`flash`) and its tile policy
(`config`), the backward (`backward`, its tiles in `bwd_config`) and the differentiable entry
point `attention` (`autograd`).

Importing this package defines the kernels, and Triton decides then whether they are compiled or
interpreted (TRITON_INTERPRET): the process's entry point made that choice first, by importing
`minimodel.entry`. `INTERPRETED` says which it is. The Gluon kernel for Hopper (`hopper`) is
defined everywhere and runs only there, compiled; what both forward kernels' launches share is in
`launch`.
"""

from minimodel.kernel.autograd import attention
from minimodel.kernel.backward import flash_attn_backward
from minimodel.kernel.config import HOPPER, SHARED_MEMORY, FwdConfig, get_fwd_config, portable_config
from minimodel.kernel.flash import (
    BF16_INTERPRETER_REASON,
    INTERPRETED,
    SUPPORTED_DTYPES,
    SUPPORTED_HEAD_DIMS,
    default_config,
    flash_attn_forward,
    launch_config,
)

__all__ = ["BF16_INTERPRETER_REASON", "HOPPER", "INTERPRETED", "SHARED_MEMORY", "SUPPORTED_DTYPES",
           "SUPPORTED_HEAD_DIMS", "FwdConfig", "attention", "default_config", "flash_attn_backward",
           "flash_attn_forward", "get_fwd_config", "launch_config", "portable_config"]
