"""Where the host's time goes in one call of the kernel, beside SDPA's cuDNN backend.

    python tools/host_cost.py [--calls 2000]     # on a CUDA machine

Prints the host cost per call (`timers.host_ms`) of the kernel, of cuDNN and of FA4 (where it is
installed) at every point of lab 02's grid (config/config.yaml's gpu.timing), then the cost of
each step of `flash_attn_forward` at its smallest point (validation, the tile policy, the output's
allocation, Triton's JIT launch, and the direct launch of the compiled kernel that a repeated call
takes), and the profile's top entries.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import time

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin, catalog
from minimodel.floor import contract
from minimodel.floor.provenance.configcheck import load_config
from minimodel.floor.timers import host_ms
from minimodel.gpu import grids
from minimodel.kernel import flash, flash_attn_forward, launch, launch_config


def per_call_us(fn, calls: int) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    # lab 02's grid, as config/config.yaml's gpu.timing gives it (`minimodel.gpu.grids`)
    points = grids.lab_grid(load_config()["gpu"]["timing"])
    others = [contract.SDPA_CUDNN] + ([] if catalog.unavailable(contract.FA4) else [contract.FA4])
    print(f"N causal | host ms per call: {contract.TRITON} | {' | '.join(others)}")
    for p in points:
        q, k, v = (torch.randn(p.B, p.H, p.N, p.d, device="cuda", dtype=torch.float16) for _ in "qkv")
        ours = host_ms(functools.partial(flash_attn_forward, q, k, v, causal=p.causal))
        theirs = [host_ms(functools.partial(getattr(builtin, name), q, k, v, causal=p.causal))
                  for name in others]
        print(f"{p.N} {p.causal} | {ours:.4f} | {' | '.join(f'{t:.4f}' for t in theirs)}")
    small = min(points, key=lambda p: p.N)
    q, k, v = (torch.randn(small.B, small.H, small.N, small.d, device="cuda", dtype=torch.float16)
               for _ in "qkv")
    cfg = launch_config(q, k, v, False)
    o = torch.empty_like(q)
    make = flash.arguments_of(cfg)
    call = (q, k, v, o, o, 0.18, cfg, False, False)  # Q, K, V, O, LSE, qk_scale, cfg, causal, store_lse
    kernel, grid, kwargs, options = make(*call)
    compiled = kernel[grid](**kwargs, **options)
    steps = {
        "whole call": lambda: flash_attn_forward(q, k, v, causal=False),
        "validate": lambda: flash._validate(q, k, v),
        "launch_config": lambda: launch_config(q, k, v, False),
        "torch.empty": lambda: torch.empty(q.shape, dtype=q.dtype, device=q.device),
        "arguments (descriptors)": lambda: make(*call),
        "kernel[grid] launch (JIT)": lambda: kernel[grid](**kwargs, **options),
        "compiled kernel launched": lambda: launch.run(make, *call, compiled),
        "cuDNN whole call": lambda: builtin.sdpa_cudnn(q, k, v, causal=False),
    }
    print(f"\npath {cfg.path}, config {cfg}")
    for name, fn in steps.items():
        print(f"{name:>26}: {per_call_us(fn, args.calls):8.2f} us")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        flash_attn_forward(q, k, v, causal=False)
    profile.disable()
    torch.cuda.synchronize()
    print(f"\n{contract.TRITON} at {tuple(q.shape)}, {args.calls} calls:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
