"""The contenders that come with the project, each `fn(q, k, v, causal) -> O` like a user's.

- `triton`: the project's kernel, `flash_attn_forward`'s own choice of path (Gluon or tl);
- `triton_tl`: the same kernel forced onto its portable tl path;
- `naive`: theory 02's three steps in PyTorch (`reference_attn`);
- `sdpa_flash`, `sdpa_efficient`, `sdpa_cudnn`: PyTorch's SDPA with one backend each;
- `flex`: FlexAttention, `torch.compile(flex_attention)` with a block mask for causal (CUDA only);
- `flash_attn`: FlashAttention-2, the `flash_attn` package's `flash_attn_func`, when installed;
- `fa4`: FlashAttention-4, `flash_attn.cute.flash_attn_func` (pip's `flash-attn-4`), on the GPUs
  its forward supports (compute capability 9.x and 10.x). A case it refuses (its own asserts, a
  head dim it lacks say) is a skipped row carrying its reason, never a failed one.
Like a user's, each runs in a child process of the stage (`minimodel.contenders.run`). Importing
this module imports no torch: the workflow reads the names before any job.

Every built-in but `triton_tl` has a backward (`backward=True`): autograd differentiates it, the
kernel's through `minimodel.kernel.attention` (the Triton backward), FlashAttention-2's and -4's
through their own autograd functions (FA4's on sm90 too).
"""

from __future__ import annotations

import functools
import importlib.util
import warnings

from minimodel import contract as C
from minimodel.contenders.spec import Contender

# FlexAttention compiles once per shape; past torch.compile's default of 8 recompiles it falls
# back to eager, which then fails inside a CUDA graph: every point of a grid must compile
FLEX_RECOMPILE_LIMIT = 256


def _kernel():
    """The kernel's `config`, `flash` and differentiable `attention`, imported on first call, in the
    process that runs it."""
    from minimodel.kernel import (  # not at the top: the workflow's process imports no torch
        attention,
        config,
        flash,
    )

    return config, flash, attention


def triton(q, k, v, causal=False):
    # minimodel.kernel.attention: flash_attn_forward itself where nothing requires grad
    return _kernel()[2](q, k, v, causal=causal)


def triton_tl(q, k, v, causal=False):
    config, flash, _ = _kernel()
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
    import torch._functorch.config as functorch_config
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, FLEX_RECOMPILE_LIMIT)
    # the backward's timing replays one forward's graph (retain_graph=True), which a compiled
    # backward that donates its saved buffers refuses: on the H200, 26 of flex's 28 backward points
    # failed so (notes/backward.md)
    functorch_config.donated_buffer = False
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


# FA4's forward: Hopper (sm90) and Blackwell (sm100, sm103) chips
FA4_COMPUTE_CAPABILITIES = (9, 10)
# printed by the CuTe DSL at each of FA4's compiles, about an argument it keeps at compile time
FA4_COMPILE_WARNING = r".*aux_data.*cannot be converted to a JitArgument"


@functools.cache
def _fa4():
    warnings.filterwarnings("ignore", message=FA4_COMPILE_WARNING, category=UserWarning)
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


def _builtin(name, backward=True, **supports):
    return Contender(name, f"{__name__}:{name}", gqa=True, backward=backward, **supports)


# each named as minimodel.contract names it; the functions above carry the same names
BUILTINS = {
    C.TRITON: _builtin(C.TRITON, triton=True),
    C.TRITON_TL: _builtin(C.TRITON_TL, backward=False, triton=True),
    C.NAIVE: _builtin(C.NAIVE),
    **{name: _builtin(name, devices=("cuda",)) for name in C.SDPA_BACKENDS},
    C.FLEX: _builtin(C.FLEX, devices=("cuda",)),
    C.FLASH_ATTN: _builtin(C.FLASH_ATTN, devices=("cuda",), head_dims=(64, 128, 256)),
    C.FA4: _builtin(C.FA4, devices=("cuda",)),
}


def unavailable(name: str) -> str | None:
    """Why a built-in cannot run on this machine at all, or None."""
    if name == C.FLASH_ATTN:
        return _fa2_unavailable()
    if name == C.FA4:
        return _fa4_unavailable()
    return None


def _fa2_unavailable() -> str | None:
    # FlashAttention-4 installs `flash_attn` as a namespace holding only `flash_attn.cute`: FA2 is
    # there only when `flash_attn.flash_attn_func` imports
    spec = importlib.util.find_spec("flash_attn")
    if spec is None or spec.origin is None:
        return "the flash_attn package (FlashAttention-2) is not installed"
    try:
        from flash_attn import flash_attn_func  # noqa: F401
    except ImportError as err:
        return f"the flash_attn package (FlashAttention-2) does not import: {err}"
    return None


def _fa4_unavailable() -> str | None:
    try:
        spec = importlib.util.find_spec("flash_attn.cute")
    except ImportError:  # a flash_attn package that fails to import
        spec = None
    if spec is None:
        return "FlashAttention-4 (flash_attn.cute, pip install flash-attn-4) is not installed"
    import torch

    if not torch.cuda.is_available():
        return None  # the contender's devices say why it does not run here
    major, minor = torch.cuda.get_device_capability()
    if major not in FA4_COMPUTE_CAPABILITIES:
        return (f"FlashAttention-4's forward runs on compute capability "
                f"{' and '.join(f'{c}.x' for c in FA4_COMPUTE_CAPABILITIES)}, not {major}.{minor}")
    return None


def not_run_reason(contender: Contender, device: str, dtype: str, d: int, causal: bool, grouped: bool,
                   interpreted: bool) -> str | None:
    """Why a contender does not run at a point (what it supports, or a built-in missing here)."""
    return unavailable(contender.name) or contender.skip_reason(device, dtype, d, causal, grouped,
                                                                interpreted)


def no_backward_reason(contender: Contender) -> str | None:
    """Why a contender has no backward rows (`Contender.no_backward_reason`), or None."""
    if contender.name == C.TRITON_TL:
        return (f"{C.TRITON_TL} has no backward: it is the kernel's tl forward alone (the "
                f"kernel's backward is {C.TRITON}'s, minimodel.kernel.attention)")
    return contender.no_backward_reason()
