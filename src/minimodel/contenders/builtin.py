"""The contenders that come with the project, each `fn(q, k, v, causal) -> O` like a user's.

- `triton`: the project's kernel, `flash_attn_forward`'s own choice of path (Gluon or tl);
- `triton_tl`: the same kernel forced onto its portable tl path;
- `naive`: theory 02's three steps in PyTorch (`reference_attn`);
- `sdpa_flash`, `sdpa_efficient`, `sdpa_cudnn`: PyTorch's SDPA with one backend each;
- `flex`: FlexAttention, `torch.compile(flex_attention)` with a block mask for causal (CUDA only);
- `flash_attn`: the `flash_attn` package's `flash_attn_func` when it is installed.
Like a user's, each runs in a child process of the stage (`minimodel.contenders.run`). Importing
this module imports no torch: the workflow reads the names before any job.
"""

from __future__ import annotations

import functools
import importlib.util

from minimodel import contract as C
from minimodel.contenders.spec import Contender

# FlexAttention compiles once per shape; past torch.compile's default of 8 recompiles it falls
# back to eager, which then fails inside a CUDA graph: every point of a grid must compile
FLEX_RECOMPILE_LIMIT = 256


def _kernel():
    """The kernel's `config` and `flash`, imported on first call, in the process that runs it."""
    from minimodel.kernel import config, flash  # not at the top: the workflow's process imports no torch

    return config, flash


def triton(q, k, v, causal=False):
    _, flash = _kernel()
    return flash.flash_attn_forward(q, k, v, causal=causal)


def triton_tl(q, k, v, causal=False):
    config, flash = _kernel()
    tl = flash.launch_config(q, k, v, causal, config.tl_config(*flash._policy_args(q, causal)))
    return flash.flash_attn_forward(q, k, v, causal=causal, config=tl)


def naive(q, k, v, causal=False):
    from minimodel.attention_ref import reference_attn  # not at the top: as in `_kernel`

    return reference_attn(q, k, v, causal=causal)


def _sdpa(name):
    def run(q, k, v, causal=False):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.functional import scaled_dot_product_attention as sdpa

        with sdpa_kernel(getattr(SDPBackend, C.SDPA_BACKENDS[name])):
            return sdpa(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return run


@functools.cache
def _flex():
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILE_LIMIT)
    return torch.compile(flex_attention)


@functools.cache
def _causal_block_mask(n: int, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, n, n, device=device)


def flex(q, k, v, causal=False):
    # the block mask is built once per (N, device), outside any timed call
    mask = _causal_block_mask(q.shape[2], str(q.device)) if causal else None
    return _flex()(q, k, v, block_mask=mask, enable_gqa=k.shape[1] != q.shape[1])


def flash_attn(q, k, v, causal=False):
    from flash_attn import flash_attn_func  # (B, N, H, d) layout

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    return out.transpose(1, 2)


sdpa_flash, sdpa_efficient, sdpa_cudnn = (_sdpa(name) for name in C.SDPA_BACKENDS)


def _builtin(name, **supports):
    return Contender(name, f"{__name__}:{name}", gqa=True, **supports)


# each named as minimodel.contract names it; the functions above carry the same names
BUILTINS = {
    C.TRITON: _builtin(C.TRITON, triton=True),
    C.TRITON_TL: _builtin(C.TRITON_TL, triton=True),
    C.NAIVE: _builtin(C.NAIVE),
    **{name: _builtin(name, devices=("cuda",)) for name in C.SDPA_BACKENDS},
    C.FLEX: _builtin(C.FLEX, devices=("cuda",)),
    C.FLASH_ATTN: _builtin(C.FLASH_ATTN, devices=("cuda",), head_dims=(64, 128, 256)),
}


def unavailable(name: str) -> str | None:
    """Why a built-in cannot run on this machine at all, or None."""
    if name == C.FLASH_ATTN and importlib.util.find_spec("flash_attn") is None:
        return "the flash_attn package is not installed"
    return None


def not_run_reason(contender: Contender, device: str, dtype: str, d: int, causal: bool, grouped: bool,
                   interpreted: bool) -> str | None:
    """Why a contender does not run at a point (what it supports, or a built-in missing here)."""
    return unavailable(contender.name) or contender.skip_reason(device, dtype, d, causal, grouped,
                                                                interpreted)
