"""FlashAttention-4 on this GPU, through the built-in contender `fa4`: what it supports, its error
against float64 beside PyTorch's own, and whether the (B, H, N, d) -> (B, N, H, d) views cost time.

    python tools/fa4_probe.py            # on a CUDA machine with flash-attn-4 installed

Prints one line per case and a short timing table; needs no workflow.
"""

from __future__ import annotations

import functools
import time
import warnings

import torch
import triton.testing

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin, catalog
from minimodel.floor import contract


def error_vs_fp64(fn, q, k, v, causal):
    exact = builtin.naive(q.double(), k.double(), v.double(), causal=causal)
    return (fn(q, k, v, causal=causal).double() - exact).abs().max().item()


def cases():
    for d in (64, 128, 256, 12, 320):
        for dtype in (torch.float16, torch.bfloat16):
            for causal in (False, True):
                yield 2, 4, 4, 1000, d, dtype, causal
    yield 2, 8, 2, 1000, 64, torch.float16, True  # grouped-query heads
    yield 2, 8, 2, 77, 128, torch.bfloat16, False


def main() -> None:
    for name in (contract.FLASH_ATTN, contract.FA4):
        print(f"unavailable({name!r}): {catalog.unavailable(name)}")
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        builtin._fa4()
        print(f"import flash_attn.cute: {time.perf_counter() - t0:.1f} s")
        for B, H, H_kv, N, d, dtype, causal in cases():
            gen = torch.Generator(device="cuda").manual_seed(N * d + H_kv)
            q = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen)
            k, v = (torch.randn(B, H_kv, N, d, device="cuda", dtype=dtype, generator=gen) for _ in "kv")
            label = f"B={B} H={H} H_kv={H_kv} N={N} d={d} {str(dtype)[6:]} causal={causal}"
            try:
                t0 = time.perf_counter()
                err = error_vs_fp64(builtin.fa4, q, k, v, causal)
                first = time.perf_counter() - t0
            except NotImplementedError as err_:
                print(f"{label}: declined: {err_}")
                continue
            torch_err = error_vs_fp64(builtin.sdpa_efficient if H == H_kv else builtin.naive, q, k, v, causal)
            print(f"{label}: err {err:.3g} (PyTorch {torch_err:.3g}), first call {first:.2f} s")
    print(f"warnings seen: {len(caught)}; the compile warning among them: "
          f"{sum('JitArgument' in str(w.message) for w in caught)}")
    for d, causal in ((64, False), (128, False), (128, True)):
        B, H, N = 4, 2048 // d, 4096
        q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in "qkv")
        views = functools.partial(builtin.fa4, q, k, v, causal=causal)
        copies = functools.partial(builtin._fa4(), *(x.transpose(1, 2).contiguous() for x in (q, k, v)),
                                   causal=causal)
        t_views = triton.testing.do_bench(views, warmup=50, rep=300, return_mode="median")
        t_copies = triton.testing.do_bench(copies, warmup=50, rep=300, return_mode="median")
        same = torch.equal(views(), copies()[0].transpose(1, 2))
        print(f"(4, {H}, {N}, {d}) causal={causal}: views {t_views:.4f} ms, contiguous (B, N, H, d) "
              f"{t_copies:.4f} ms, same output: {same}")


if __name__ == "__main__":
    main()
