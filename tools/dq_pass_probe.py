"""The Gluon dQ pass (`minimodel.kernel.gluon_bwd_dqpass`) beside the tl one on a CUDA device: each
checked against float64, then both timed alone on the same inputs, interleaved.

    python tools/dq_pass_probe.py                      # the checks, then FlashAttention's grid
    python tools/dq_pass_probe.py --n 4096 --d 128 --csv dq.csv
    python tools/dq_pass_probe.py --tiles 128,3             # keys a step, stages
    python tools/dq_pass_probe.py --d 64 --tiles 64,4 --tiles 64,4,3  # two Gluon passes side by side
                                                                      # (the second: 3 consumers)
    python tools/dq_pass_probe.py --grid lab --d 64 --tiles 64,4 --tiles 64,4,3   # the lab grid's points

Checks: fp16 and bf16, d = 64 and 128, causal and not, ragged N (1000, 77), grouped-query heads;
dQ of each pass against torch autograd in float64 with the project's rule
(`correctness_rule.grad_errors`, dQ's columns), and the Gluon pass run twice (the same bits).
Timed: the dQ launch alone (O, LSE and D made once), CUDA-graph medians, `samples` rounds that
alternate the passes (the tl one and each `--tiles` of the Gluon one), a row per point and Gluon
pass; `tl_over_gluon` is the tl pass's time over that Gluon pass's (above 1: the Gluon pass is
faster), and `backward_ms` the whole default backward for scale (which runs the
Gluon pass itself where the policy picks it, `policy.GLUON_DQ_PASS`). A development
tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract, correctness_rule, timers
from minimodel.gpu import grids
from minimodel.kernel import flash_attn_backward, flash_attn_forward, tl_bwd_config
from minimodel.kernel.backward import arguments
from minimodel.kernel.gluon_bwd_dqpass import CONSUMERS, dq_launch

CHECKS = [(B, H, H_kv, N, d, causal, dtype)
          for B, H, H_kv, N in ((2, 4, 4, 1000), (1, 4, 2, 77), (1, 2, 2, 1024))
          for d in (64, 128) for causal in (False, True) for dtype in (torch.float16, torch.bfloat16)]


def inputs(B, H, H_kv, N, d, dtype, seed: int):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(B, H, N, d, generator=g).to("cuda", dtype)
    k, v = (torch.randn(B, H_kv, N, d, generator=g).to("cuda", dtype) for _ in range(2))
    do = torch.randn(B, H, N, d, generator=g).to("cuda", dtype)
    return q, k, v, do


def passes(q, k, v, do, causal: bool, variants: list[dict]):
    """{name: call returning dQ} of the tl pass (the Hopper table's tiles) and the Gluon pass with
    each of `variants` (`dq_launch`'s tiles; named by their index) on these inputs, O, LSE and D
    (by the backward's own preprocess) made once; and the whole default backward."""
    scale = q.shape[-1] ** -0.5
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    lse = lse.contiguous()
    delta = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    dq_tl, dq_gl = torch.empty_like(q), torch.empty_like(q)
    tl = tl_bwd_config(q.shape[-1], causal, "cuda")  # the tl dQ pass, whatever the default runs
    launches = arguments(q, k, v, o, lse, do, dq_tl, torch.empty_like(k), torch.empty_like(v), delta, scale,
                         tl, causal)
    kernel, grid, args, options = launches[0]
    kernel[grid](**args, **options)  # the preprocess: D = rowsum(dO ∘ O)
    kernel, grid, args, options = launches[-1]

    def tl_pass():
        kernel[grid](**args, **options)
        return dq_tl

    def gluon_pass(tiles):
        gl_kernel, gl_grid, gl_args, gl_options = dq_launch(q, k, v, do, dq_gl, lse, delta, scale, causal,
                                                            **tiles)
        return lambda: (gl_kernel[gl_grid](**gl_args, **gl_options), dq_gl)[1]

    return {"tl": tl_pass, **{i: gluon_pass(tiles) for i, tiles in enumerate(variants)},
            "backward": lambda: flash_attn_backward(q, k, v, o, lse, do, causal)[0]}


def check(variants: list[dict]) -> int:
    """Each CHECKS case: every pass against float64 (dQ), each Gluon pass twice; returns failures."""
    failed = 0
    for i, (B, H, H_kv, N, d, causal, dtype) in enumerate(CHECKS):
        q, k, v, do = inputs(B, H, H_kv, N, d, dtype, 1000 + i)
        calls = passes(q, k, v, do, causal, variants)
        exact = correctness_rule.reference_grads(q, k, v, do, causal, upcast=True)[0]
        lowp = correctness_rule.reference_grads(q, k, v, do, causal)[0]
        tol = correctness_rule.tolerance(correctness_rule._error(lowp, exact))
        line = []
        for name in ("tl", *range(len(variants))):
            got = calls[name]().clone()
            err = correctness_rule._error(got, exact)
            ok = err <= tol and not torch.isnan(got).any()
            failed += not ok
            line.append(f"{'gluon ' + _name(variants[name]) if name != 'tl' else 'tl'} {err:.2e} "
                        f"{'pass' if ok else 'FAIL'}")
            if name != "tl":
                again = torch.equal(calls[name]().clone(), calls[name]().clone())
                failed += not again
                line.append(f"the same bits twice: {again}")
        print(f"check {(B, H, H_kv, N, d)} causal={causal} {str(dtype)[6:]}: tolerance {tol:.2e}, "
              f"{', '.join(line)}", flush=True)
    return failed


def _name(tiles: dict) -> str:
    return ",".join(str(tiles[key]) for key in ("block_n", "stages", "consumers"))


def time_points(points, samples: int, rep_ms: float, variants: list[dict], out: list) -> None:
    for p in points:
        q, k, v, do = inputs(p.B, p.H, p.H, p.N, p.d, torch.float16, 7)
        calls = passes(q, k, v, do, p.causal, variants)
        taken = {name: [] for name in calls}
        for _ in range(samples):
            for name, call in calls.items():
                taken[name].append(timers.graph_ms(lambda call=call: call, rep_ms))
        ms = {name: statistics.median(t) for name, t in taken.items()}
        for i, tiles in enumerate(variants):
            row = {"B": p.B, "H": p.H, "N": p.N, "d": p.d, "causal": p.causal, **tiles,
                   "tl_ms": ms["tl"], "gluon_ms": ms[i], "backward_ms": ms["backward"],
                   "tl_over_gluon": ms["tl"] / ms[i]}
            out.append(row)
            print(" ".join(f"{key}={val:.4g}" if isinstance(val, float) else f"{key}={val}"
                           for key, val in row.items()), flush=True)


def variant(spec: str) -> dict:
    """`dq_launch`'s tiles of a --tiles BLOCK_N,STAGES[,CONSUMERS]."""
    try:
        parts = [int(x) for x in spec.split(",")]
        if len(parts) not in (2, 3):
            raise ValueError(f"{len(parts)} numbers")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected BLOCK_N,STAGES[,CONSUMERS] ({e})") from e
    return {"block_n": parts[0], "stages": parts[1], "consumers": parts[2] if len(parts) == 3 else CONSUMERS}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, action="append", help="only these N")
    parser.add_argument("--d", type=int, action="append", help="only these head dims")
    parser.add_argument("--tiles", type=variant, action="append",
                        help="BLOCK_N,STAGES[,CONSUMERS] of a Gluon pass (repeatable; default 64,4,2)")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--rep-ms", type=float, default=50.0)
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--grid", choices=(contract.FLASHATTENTION_GRID, contract.LAB_GRID),
                        default=contract.FLASHATTENTION_GRID,
                        help="the timing grid whose points are timed (default: FlashAttention's)")
    parser.add_argument("--csv")
    a = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("the dQ passes run on a CUDA device only")
    variants = a.tiles or [variant("64,4")]
    failed = 0 if a.no_check else check(variants)
    grid = grids.lab_grid if a.grid == contract.LAB_GRID else grids.flashattention_grid
    points = [p for p in grid(grids.default_timing_config())
              if (not a.n or p.N in a.n) and (not a.d or p.d in a.d)]
    rows: list = []
    time_points(points, a.samples, a.rep_ms, variants, rows)
    if a.csv and rows:
        with open(a.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if rows:
        for i, tiles in enumerate(variants):  # rows come point by point, a row per variant in order
            ratios = [r["tl_over_gluon"] for r in rows[i::len(variants)]]
            print(f"tl over gluon {_name(tiles)}: geometric mean "
                  f"{statistics.geometric_mean(ratios):.3f}, {min(ratios):.3f}-{max(ratios):.3f} over "
                  f"{len(ratios)} points; {failed} checks failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
