"""The functions of the contenders that come with the project, each `fn(q, k, v, causal) -> O` like
a user's (their specs, and where each runs: `minimodel.contenders.catalog`).

- `triton`: the project's kernel, `flash_attn_forward`'s own choice of path (Gluon or tl);
- `triton_tl`: the same kernel forced onto its portable tl path;
- `naive`: theory 02's three steps in PyTorch (`reference_attn`);
- `sdpa_flash`, `sdpa_efficient`, `sdpa_cudnn`: PyTorch's SDPA with one backend each;
- `flex`: FlexAttention, `torch.compile(flex_attention)`, its block mask made once per (N, causal)
  (CUDA only);
- `flash_attn`: FlashAttention-2, the `flash_attn` package's `flash_attn_func`, when installed;
- `fa4`: FlashAttention-4, `flash_attn.cute.flash_attn_func` (pip's `flash-attn-4`), on the GPUs
  its forward supports (compute capability 9.x and 10.x). A case it refuses (its own asserts, a
  head dim it lacks say) is a skipped row carrying its reason, never a failed one. Its compiled
  kernels are kept in FA4's on-disk cache (`FA4_CACHE_VARIABLE`) for the next stage's process.
Like a user's, each runs in a child process of the stage (`minimodel.contenders.run`), or, for the
implementations always timed, in the timing stage's own (`minimodel.gpu.implementations`).

Every built-in but `triton_tl` has a backward: autograd differentiates it, the kernel's through
`minimodel.kernel.attention` (the Triton backward), FlashAttention-2's and -4's through their own
autograd functions (FA4's on sm90 too).
"""

from __future__ import annotations

import functools
import os
import warnings

import torch
import torch._functorch.config as functorch_config
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention, noop_mask
from torch.nn.functional import scaled_dot_product_attention as sdpa

from minimodel.floor import contract as C
from minimodel.floor.attention_ref import reference_attn
from minimodel.kernel import attention, flash_attn_forward, launch_config, policy_args, tl_config

# FlexAttention compiles once per shape; past torch.compile's default of 8 recompiles it falls
# back to eager, which then fails inside a CUDA graph: every point of a grid must compile
FLEX_RECOMPILE_LIMIT = 256


def triton(q, k, v, causal=False):
    # minimodel.kernel.attention: flash_attn_forward itself where nothing requires grad
    return attention(q, k, v, causal=causal)


def triton_tl(q, k, v, causal=False):
    tl = launch_config(q, k, v, causal, tl_config(*policy_args(q, causal)))
    return flash_attn_forward(q, k, v, causal=causal, config=tl)


def naive(q, k, v, causal=False):
    return reference_attn(q, k, v, causal=causal)


def _sdpa(name):
    def run(q, k, v, causal=False):
        with sdpa_kernel(getattr(SDPBackend, C.SDPA_BACKENDS[name])):
            return sdpa(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    return run


@functools.cache
def _flex():
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILE_LIMIT)
    # the backward's timing replays one forward's graph (retain_graph=True), which a compiled
    # backward that donates its saved buffers refuses: on the H200, 26 of flex's 28 backward points
    # failed so (notes/backward.md)
    functorch_config.donated_buffer = False
    return torch.compile(flex_attention)


@functools.cache
def _block_mask(n: int, device: str, causal: bool):
    # without a mask flex_attention builds an empty one inside every call, and its kernels' time
    # varied between processes (notes/timing.md, "FlexAttention at the lab grid's N = 64")
    mask_mod = (lambda b, h, q_idx, kv_idx: q_idx >= kv_idx) if causal else noop_mask
    return create_block_mask(mask_mod, None, None, n, n, device=device)


def flex(q, k, v, causal=False):
    # the block mask is built once per (N, device, causal), outside any timed call
    mask = _block_mask(q.shape[2], str(q.device), causal)
    return _flex()(q, k, v, block_mask=mask, enable_gqa=k.shape[1] != q.shape[1])


def flash_attn(q, k, v, causal=False):
    # not at the top: FlashAttention-2 is optional (catalog.unavailable says whether it is here)
    from flash_attn import flash_attn_func  # (B, N, H, d) layout

    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    return out.transpose(1, 2)


# printed by the CuTe DSL at each of FA4's compiles, about an argument it keeps at compile time
FA4_COMPILE_WARNING = r".*aux_data.*cannot be converted to a JitArgument"


# FA4's own on-disk cache of its compiled kernels (`flash_attn/cute/cache_utils.py`; read when
# `flash_attn.cute` is imported): each GPU stage's process compiles what another compiled before
# (the correctness stage's compiles took about 3 minutes on the H200) only once; keyed by FA4's
# sources and the CuTe DSL's version, an entry it cannot load is compiled again. Set to 0 to turn
# it off; FLASH_ATTENTION_CUTE_DSL_CACHE_DIR moves it (default /tmp/$USER/...).
FA4_CACHE_VARIABLE = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"


@functools.cache
def _fa4():
    warnings.filterwarnings("ignore", message=FA4_COMPILE_WARNING, category=UserWarning)
    os.environ.setdefault(FA4_CACHE_VARIABLE, "1")
    # not at the top: FlashAttention-4 is optional (catalog.unavailable says whether it is here)
    from flash_attn.cute import flash_attn_func

    return flash_attn_func


def fa4(q, k, v, causal=False):
    # FA4 takes (B, N, H, d); the transposed views of the stage's (B, H, N, d) tensors are read as
    # they are (no copy), and its (B, N, H, d) output goes back as a view
    try:
        out, _lse = _fa4()(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
    except AssertionError as err:  # FA4 refuses what it does not support with an assert
        raise NotImplementedError(f"FA4 refuses this case: {err}") from err
    return out.transpose(1, 2)


sdpa_flash, sdpa_efficient, sdpa_cudnn = (_sdpa(name) for name in C.SDPA_BACKENDS)
