"""Time candidate tile configurations of the kernel on a CUDA device, beside SDPA's cuDNN and flash backends.

    python tools/tune.py --out tune/                                  # the sweep, FlashAttention's grid
    python tools/tune.py --out tune/ --d 64 --graph --config 128,128,8,2,TMA,MAXNREG=128 \
        --config 128,128,4,3,TMA                                       # configurations of your own
    python tools/tune.py --out tune/ --grid lab --candidates small    # lab 02's grid, naive too

A configuration is BLOCK_M,BLOCK_N,WARPS,STAGES followed by its kernel, TMA (`FwdConfig.path`
"tl_tma") or GLUON ("gluon"; pointer loads without either), and MAXNREG=value.
`--candidates` names a set of them (`CANDIDATES`); both may be given, and the configuration the
tile policy picks at each point is always timed too (its rows say `shipped`).

Every candidate is checked once (as the timing stage checks a forward, `minimodel.gpu.timing_point`:
the correctness rule, on one head against float64) and timed in the same run as the SDPA backends,
so the ratios side by side are fair. Results go to `tune.csv`; the best config per (d, causal, N) is
printed. The grids' points are config/config.yaml's gpu.timing; notes/tuning/README.md lists the
candidate sets of the H200 search and how to time them again.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
from pathlib import Path

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin, catalog
from minimodel.floor import contract
from minimodel.floor.byte_model.forward import attention_flops
from minimodel.floor.provenance.io import write_csv
from minimodel.floor.timers import bench_graph_ms, bench_ms, first_heads
from minimodel.gpu import grids
from minimodel.gpu.timing_point import check, forward_reference
from minimodel.kernel import FwdConfig, flash_attn_forward, launch_config

SIZES = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
CANDIDATES = {
    # the broad search: 128-row query tiles, 64- or 128-row key tiles, 4 or 8 warps, 2 to 4
    # stages, pointer loads or TMA; lab 02's 64 x 64 as a baseline
    "sweep": [FwdConfig(64, 64, 4, 3)] + [
        FwdConfig(128, bn, warps, stages, path)
        for bn, warps, stages, path in itertools.product((64, 128), (4, 8), (2, 3, 4), ("tl", "tl_tma"))],
    # launch-bound problems (few programs, small N): 64- or 128-row query tiles, pointers or TMA
    "small": [FwdConfig(64, 64, 4, 3), FwdConfig(64, 64, 4, 3, "tl_tma"),
              FwdConfig(64, 64, 4, 2, "tl_tma"), FwdConfig(64, 32, 4, 3, "tl_tma"), FwdConfig(128, 128, 4, 3),
              FwdConfig(128, 128, 4, 3, "tl_tma"), FwdConfig(128, 64, 4, 3, "tl_tma")],
}


def parse_config(spec: str) -> FwdConfig:
    """`BLOCK_M,BLOCK_N,WARPS,STAGES[,OPTION[=VALUE]...]` as a FwdConfig: `128,128,8,2,TMA,MAXNREG=128`."""
    parts = [p.strip() for p in spec.split(",")]
    options = {"TMA": "tl_tma", "GLUON": "gluon", "MAXNREG": "MAXNREG"}
    try:
        sizes = [int(p) for p in parts[:4]]
    except ValueError:
        sizes = []
    if len(sizes) != 4 or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected BLOCK_M,BLOCK_N,WARPS,STAGES[,OPTION...]")
    chosen = {}
    for part in parts[4:]:
        key, has_value, value = part.partition("=")
        name = options.get(key.upper())
        if name is None or (has_value and not value.isdigit()):
            raise argparse.ArgumentTypeError(
                f"{spec!r}: {part!r} is not one of {', '.join(options)} (a flag, or NAME=integer)")
        if (name == "MAXNREG") != bool(has_value):
            raise argparse.ArgumentTypeError(f"{spec!r}: {part!r}: TMA and GLUON are flags, MAXNREG=integer")
        chosen.update({"MAXNREG": int(value)} if has_value else {"path": name})
    if sizes[0] % sizes[1] and chosen.get("path") != "gluon":
        raise argparse.ArgumentTypeError(f"{spec!r}: BLOCK_M must be a multiple of BLOCK_N for the tl "
                                         "kernel (the causal diagonal falls in whole key tiles)")
    return FwdConfig(*sizes, **chosen)


def candidate_configs(names=(), configs=()) -> list[FwdConfig]:
    """The named sets' configurations and `configs`, each once, in order."""
    found = [c for name in names for c in CANDIDATES[name]] + list(configs)
    return list(dict.fromkeys(found))


def checked_run(fn, one, reference) -> tuple[bool, float]:
    """`fn` on the first head `one` (its q, k, v) on a poisoned allocator, judged as the timing stage
    judges a forward against `reference` (`timing_point.forward_reference`: float64 and PyTorch's own
    error): (passes the correctness rule, error vs float64); (False, nan) without a reference."""
    heads, has_nan = first_heads(lambda: fn(*one), one[0])
    row = {}
    check(row, {"heads": heads, "has_nan": has_nan}, reference, contract.FORWARD)
    return row.get("checked", False), row.get("err_vs_fp64", float("nan"))


def tune_point(B, H, N, d, causal, configs, warmup_ms=25, rep_ms=100,
               baselines=(contract.SDPA_CUDNN, contract.SDPA_FLASH), graph=False) -> list[dict]:
    """The baselines (cuDNN, FA2, ...), the policy's configuration and every config in `configs` at
    one point, on the same inputs.

    graph: GPU time per call from CUDA-graph replays (the timing stage's `ms`) instead of eager calls.
    """
    def bench(fn):
        return bench_graph_ms(fn, rep_ms) if graph else bench_ms(fn, warmup_ms, rep_ms)

    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16) for _ in range(3))
    reference = forward_reference(q, k, v, causal)
    one = [t[:1, :1] for t in (q, k, v)]
    flops = attention_flops(B, H, N, d, causal)
    base = {"B": B, "H": H, "N": N, "d": d, "causal": causal}
    rows = []
    for name in baselines:  # the built-in contenders' functions, named as in the tables
        call = functools.partial(getattr(builtin, name), q, k, v, causal=causal)
        ms = bench(call)
        rows.append({**base, "impl": name, "ms": ms, "tflops": flops / ms / 1e9})
    shipped = launch_config(q, k, v, causal)
    for cfg in dict.fromkeys([shipped, *configs]):
        def fn(q, k, v, cfg=cfg):
            return flash_attn_forward(q, k, v, causal=causal, config=cfg)

        row = {**base, "impl": contract.TRITON, "shipped": cfg == shipped, **cfg.as_dict()}
        try:
            ok, err = checked_run(fn, one, reference)
            row.update(checked=ok, err_vs_fp64=err)
            ms = bench(lambda fn=fn: fn(q, k, v)) if ok else None
            row.update(ms=ms, tflops=flops / ms / 1e9 if ms else None)
        except Exception as err:  # out of shared memory, unsupported on this GPU, ...
            row.update(status=f"{type(err).__name__}: {str(err).splitlines()[0][:120]}")
        rows.append(row)
    return rows


def summarize(frame):
    """Best config per point beside cuDNN and FA2 (and FA4 where timed), as ratios."""
    key = ["d", "causal", "N"]
    tri = frame[frame.impl == contract.TRITON].dropna(subset=["tflops"])
    best = tri.loc[tri.groupby(key)["tflops"].idxmax()].set_index(key)
    ref = frame[frame.impl != contract.TRITON].pivot_table(index=key, columns="impl", values="tflops")
    options = [c for c in ("path", "MAXNREG", "shipped") if c in best]
    out = best[["BLOCK_M", "BLOCK_N", "num_warps", "num_stages", *options, "tflops"]].join(ref)
    out["vs_cudnn"] = out.tflops / out[contract.SDPA_CUDNN]
    out["vs_fa2"] = out.tflops / out[contract.SDPA_FLASH]
    if contract.FA4 in out:
        out["vs_fa4"] = out.tflops / out[contract.FA4]
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
    parser.add_argument("--candidates", nargs="+", choices=sorted(CANDIDATES), default=[],
                        help="named candidate sets (default: sweep, unless --config is given)")
    parser.add_argument("--config", type=parse_config, action="append", default=[],
                        metavar="BLOCK_M,BLOCK_N,WARPS,STAGES[,OPTION...]",
                        help="a configuration to time, e.g. 128,128,8,2,TMA,MAXNREG=128 (repeatable)")
    parser.add_argument("--grid", choices=contract.GRIDS, default=contract.FLASHATTENTION_GRID,
                        help=f"{contract.FLASHATTENTION_GRID}: --n by --d; {contract.LAB_GRID}: lab 02's "
                             "grid of config/config.yaml, naive PyTorch timed too")
    parser.add_argument("--graph", action="store_true",
                        help="time GPU time per call over CUDA-graph replays, not eager calls")
    parser.add_argument("--fa4", action="store_true",
                        help="time FlashAttention-4 (flash_attn.cute) beside the SDPA backends")
    args = parser.parse_args(argv)
    configs = candidate_configs(args.candidates or ([] if args.config else ["sweep"]), args.config)
    if not torch.cuda.is_available():
        print("tuning needs a CUDA device", file=sys.stderr)
        return 2
    if args.grid == contract.LAB_GRID:
        points = [(p.B, p.H, p.N, p.d, p.causal) for p in grids.lab_grid(grids.default_timing_config())]
        baselines = (contract.SDPA_CUDNN, contract.SDPA_FLASH, contract.NAIVE)
    else:
        points = [(*grid_shape(n, d, args), causal)
                  for d in args.d for causal in (False, True) for n in args.n]
        baselines = (contract.SDPA_CUDNN, contract.SDPA_FLASH)
    if args.fa4:
        if catalog.unavailable(contract.FA4):
            print(f"--fa4: {catalog.unavailable(contract.FA4)}", file=sys.stderr)
            return 2
        baselines += (contract.FA4,)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for point in points:  # (B, H, N, d, causal)
        rows += tune_point(*point, configs, baselines=baselines, graph=args.graph)
        torch.cuda.empty_cache()
        print(f"done B,H,N,d,causal = {point}", file=sys.stderr, flush=True)
        write_csv(args.out / "tune.csv", pd.DataFrame(rows))  # after every point: a run cut short keeps it
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summarize(frame).round(3).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
