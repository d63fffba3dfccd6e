"""Stage 3: the Triton flash-attention kernels and their one public API (`__all__`).

The forward (`flash_attn_forward`: tl kernels in `flash`, Gluon for Hopper in `hopper`), the
backward (`flash_attn_backward`: tl in `backward`, Gluon in `gluon_bwd_ws`, `gluon_bwd_dqpass`),
the differentiable `attention` (`autograd`); the configuration types (`config`), the policy that
picks one (`policy`), what a call really runs (`launch`); the split-KV decode (`decode`).
Importing this package defines the kernels, compiled or interpreted as the process's entry point
chose first (`minimodel.entry`; `INTERPRETED`). The Gluon kernels run only on Hopper, compiled.
"""

from minimodel.kernel.autograd import attention
from minimodel.kernel.backward import backward_fn, flash_attn_backward
from minimodel.kernel.config import BwdConfig, FwdConfig
from minimodel.kernel.decode import flash_decode
from minimodel.kernel.flash import flash_attn_forward
from minimodel.kernel.inputs import (
    BF16_INTERPRETER_REASON,
    INTERPRETED,
    SUPPORTED_DTYPES,
    SUPPORTED_HEAD_DIMS,
)
from minimodel.kernel.launch import (
    default_bwd_config,
    default_config,
    launch_bwd_config,
    launch_config,
    policy_args,
)
from minimodel.kernel.policy import (
    HOPPER,
    SHARED_MEMORY,
    get_bwd_config,
    get_fwd_config,
    gluon_config,
    gluon_ws_config,
    portable_config,
    tl_bwd_config,
    tl_config,
)

__all__ = ["BF16_INTERPRETER_REASON", "HOPPER", "INTERPRETED", "SHARED_MEMORY", "SUPPORTED_DTYPES",
           "SUPPORTED_HEAD_DIMS", "BwdConfig", "FwdConfig", "attention", "backward_fn", "default_bwd_config",
           "default_config", "flash_attn_backward", "flash_attn_forward",
           "flash_decode", "get_bwd_config", "get_fwd_config",
           "gluon_config", "gluon_ws_config", "launch_bwd_config", "launch_config", "policy_args",
           "portable_config", "tl_bwd_config", "tl_config"]
