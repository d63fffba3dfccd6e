"""Search the kernel's tile configurations on a CUDA device, beside SDPA's cuDNN and flash backends.

    python tools/tune.py --out tune/            # FlashAttention's grid, every candidate config

Every candidate is checked once (the correctness rule of `minimodel.gpu.correctness`, on one head
against float64) and timed with do_bench in the same run as the SDPA backends, so the ratios
side by side are fair. Results go to `tune.csv`; the best config per (d, causal, N) is printed.
The winners are what `minimodel.kernel.config.get_fwd_config` ships (see notes/kernel.md).
A development tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import torch

from minimodel.gpu import grids, timing

# Round 1 (notes/kernel.md): 128-row query tiles, 64- or 128-row key tiles, 4 or 8 warps,
# 2 to 4 stages, pointer loads or TMA, the seed's 64 x 64 as a baseline. TMA won everywhere.
ROUND_1 = [(64, 64, 4, 3, False)] + [
    (128, bn, warps, stages, tma)
    for bn, warps, stages, tma in itertools.product((64, 128), (4, 8), (2, 3, 4), (False, True))
]
# Round 2: the best TMA shapes of round 1 and 256-row query tiles, each with and without
# Triton's warp specialization of the unmasked loop.
ROUND_2_SHAPES = [(128, 128, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 2),
                  (128, 128, 8, 2), (256, 64, 8, 3), (256, 128, 8, 2), (128, 128, 4, 4)]


# Round 3, the seed grid (B·H = 8): 64- or 128-row query tiles, pointer loads or TMA, where
# few programs and launch overhead dominate.
ROUND_3 = [(64, 64, 4, 3, False), (64, 64, 4, 3, True), (64, 64, 4, 2, True), (64, 32, 4, 3, True),
           (128, 128, 4, 3, False), (128, 128, 4, 3, True), (128, 64, 4, 3, True)]

# Round 11: registers capped at 128 per thread so that two 8-warp programs share a multiprocessor
# (the shipped d = 128 and d = 64 shapes keep one: 188 and 253 registers), per head dim.
ROUND_11 = {
    128: [(128, 128, 8, 3, True), (64, 64, 4, 3, True), (128, 64, 8, 2, True, False, 128),
          (128, 64, 8, 2, True)],
    64: [(128, 128, 4, 3, True), (64, 64, 4, 3, True), (128, 128, 8, 2, True, False, 128),
         (128, 64, 8, 3, True, False, 128), (128, 128, 8, 2, True)],
}

# Rounds 4-7 (notes/kernel.md, tune_v4..v7) searched kernel variants that did not pay and were then
# removed from the kernel: half the exponentials by polynomial, lazy rescaling, split query tiles,
# the next tile's scores issued before this tile's softmax. Commit 9a6423c runs rounds 4-7 (its
# round 4 without lazy rescaling, which commit e03734b has). Round 8 (tune_v8): tensor descriptors
# made on the device, with and without warp specialization; commit e810fe4 runs it
# (`--round 8 --graph`). Round 9 (tune_v9): a persistent grid; commit 415c377 runs it
# (`--round 9 --graph`). Round 10 (tune_v10): a warp-specialized kernel (one key loop, 2-D
# descriptors, Q's made on the device); commit cc3997d runs it (`--round 10 --graph`).


def candidate_configs(round_: int = 2, head_dim: int | None = None):
    """The candidate set of a round at a head dim (only round 11's depends on it)."""
    from minimodel.kernel import FwdConfig

    if round_ == 11:
        return [FwdConfig(*c) for c in ROUND_11[head_dim]]
    if round_ == 1:
        return [FwdConfig(*c) for c in ROUND_1]
    if round_ == 3:
        return [FwdConfig(*c) for c in ROUND_3]
    return [FwdConfig(bm, bn, w, s, True, ws) for bm, bn, w, s in ROUND_2_SHAPES
            for ws in (False, True)]


def tune_point(B, H, N, d, causal, configs, warmup_ms=25, rep_ms=100,
               baselines=("sdpa_cudnn", "sdpa_flash"), graph=False) -> list[dict]:
    """The baselines (cuDNN, FA2, ...) and every config at one point, on the same inputs.

    graph: GPU time per call from CUDA-graph replays (the timing stage's `ms`) instead of eager calls.
    """
    def bench(fn):
        if graph:
            return timing.bench_graph_ms(fn, rep_ms)
        return timing.bench_ms(fn, warmup_ms, rep_ms)

    from minimodel.kernel import flash_attn_forward

    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
    qs, ks, vs, exact, err_torch = timing.one_head_reference(q, k, v, causal)
    flops = timing.attention_flops(B, H, N, d, causal)
    base = {"B": B, "H": H, "N": N, "d": d, "causal": causal}
    impls = timing.implementations(causal)
    rows = []
    for name in baselines:
        ms = bench(lambda fn=impls[name]: fn(q, k, v))
        rows.append({**base, "impl": name, "ms": ms, "tflops": flops / ms / 1e9})
    for cfg in configs:
        def fn(q, k, v, cfg=cfg):
            return flash_attn_forward(q, k, v, causal=causal, config=cfg)

        row = {**base, "impl": "triton", **cfg.as_dict()}
        try:
            ok, err = timing.checked_run(fn, qs, ks, vs, exact, err_torch)
            row.update(checked=ok, err_vs_fp64=err)
            ms = bench(lambda fn=fn: fn(q, k, v)) if ok else None
            row.update(ms=ms, tflops=flops / ms / 1e9 if ms else None)
        except Exception as err:  # out of shared memory, unsupported on this GPU, ...
            row.update(status=f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
        rows.append(row)
    return rows


def run(points, configs_for, warmup_ms=25, rep_ms=100, progress=sys.stderr,
        baselines=("sdpa_cudnn", "sdpa_flash"), on_point=None, graph=False) -> list[dict]:
    """Every point (B, H, N, d, causal) in turn with the configs `configs_for(d)`;
    `on_point(rows)` sees the rows so far after each (to save them)."""
    rows = []
    for point in points:
        rows += tune_point(*point, configs_for(point[3]), warmup_ms, rep_ms, baselines, graph)
        torch.cuda.empty_cache()
        print(f"done B,H,N,d,causal = {point}", file=progress, flush=True)
        if on_point:
            on_point(rows)
    return rows


def summarize(frame):
    """Best config per point beside cuDNN and FA2, as ratios."""
    import pandas as pd

    key = ["d", "causal", "N"]
    tri = frame[frame.impl == "triton"].dropna(subset=["tflops"])
    best = tri.loc[tri.groupby(key)["tflops"].idxmax()].set_index(key)
    ref = frame[frame.impl != "triton"].pivot_table(index=key, columns="impl", values="tflops")
    options = [c for c in ("TMA", "WARP_SPECIALIZE", "MAXNREG") if c in best]
    out = best[["BLOCK_M", "BLOCK_N", "num_warps", "num_stages", *options, "tflops"]].join(ref)
    out["vs_cudnn"] = out.tflops / out.sdpa_cudnn
    out["vs_fa2"] = out.tflops / out.sdpa_flash
    return pd.DataFrame(out)


def add_grid_arguments(parser, n=None) -> None:
    """FlashAttention's benchmark grid as command-line options (N, d, batch·N, heads·d), its
    defaults config/config.yaml's gpu.timing (`minimodel.gpu.grids`)."""
    cfg = grids.default_timing_config()
    parser.add_argument("--n", type=int, nargs="+", default=list(n or cfg["fa_n"]))
    parser.add_argument("--d", type=int, nargs="+", default=cfg["fa_head_dims"])
    parser.add_argument("--tokens", type=int, default=cfg["fa_tokens"], help="batch * N")
    parser.add_argument("--model-dim", type=int, default=cfg["fa_model_dim"], help="heads * d")


def grid_shape(n: int, d: int, args) -> tuple[int, int, int, int]:
    """(B, H, N, d) of the grid point: B·N = args.tokens, H·d = args.model_dim."""
    return grids.flashattention_shape(n, d, {"fa_tokens": args.tokens, "fa_model_dim": args.model_dim})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="folder for tune.csv")
    add_grid_arguments(parser, n=(1024, 4096, 16384))
    parser.add_argument("--round", type=int, default=2, choices=(1, 2, 3, 11),
                        help="candidate set; 3 times the seed grid (B=2, H=4, d=64) with naive too; "
                             "11 register-capped shapes (d = 64 and 128 only)")
    parser.add_argument("--graph", action="store_true",
                        help="time GPU time per call over CUDA-graph replays, not eager calls")
    args = parser.parse_args(argv)
    if args.round == 11 and set(args.d) - set(ROUND_11):
        parser.error(f"round 11 has candidates for --d {sorted(ROUND_11)} only, got {args.d}")
    if not torch.cuda.is_available():
        print("tuning needs a CUDA device", file=sys.stderr)
        return 2
    import pandas as pd

    if args.round == 3:
        points = [(p.B, p.H, p.N, p.d, p.causal)
                  for p in grids.seed_grid(grids.default_timing_config())]
        baselines = ("sdpa_cudnn", "sdpa_flash", "naive")
    else:
        points = [(*grid_shape(n, d, args), causal)
                  for d in args.d for causal in (False, True) for n in args.n]
        baselines = ("sdpa_cudnn", "sdpa_flash")
    from minimodel.provenance.io import write_csv

    args.out.mkdir(parents=True, exist_ok=True)

    def save(rows):  # after every point, so a run cut short keeps what it measured
        write_csv(args.out / "tune.csv", pd.DataFrame(rows))

    frame = pd.DataFrame(run(points, lambda d: candidate_configs(args.round, d),
                             baselines=baselines, on_point=save, graph=args.graph))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summarize(frame).round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
