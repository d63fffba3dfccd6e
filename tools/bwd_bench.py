"""Check and time the Triton backward on a CUDA device, beside SDPA's flash, efficient and cuDNN backends.

    python tools/bwd_bench.py                                   # the shipped table, FlashAttention's grid
    python tools/bwd_bench.py --d 128 --config 64,128,128,64,8,2,8,2 --config 32,128,128,32,8,2,8,2
    python tools/bwd_bench.py --candidates sweep --graph --csv bwd.csv
    python tools/bwd_bench.py --report --candidates sweep      # registers, spills, shared memory on
                                                               # sm_90, compiled without a GPU
    python tools/bwd_bench.py --report --gluon                 # the Gluon dK/dV kernel's, likewise
    python tools/bwd_bench.py --d 64 --config 128,128,128,64,12,2,8,3,WS
    python tools/bwd_bench.py --graph --n 1024 --n 8192 --config 64,128,128,64,12,2,8,3,IN_KERNEL

A configuration is `BwdConfig`'s fields in order: BLOCK_M1,BLOCK_N1,BLOCK_M2,BLOCK_N2 (dK/dV query
and key tiles, dQ query and key tiles), then WARPS_KV,STAGES_KV,WARPS_Q,STAGES_Q (optional,
4,2,4,2), then WS (optional: the warp-specialized Gluon dK/dV kernel for Hopper, `BwdConfig.dkdv`
"gluon_ws", with the tl dQ pass) or IN_KERNEL (the same with dQ added in it by TMA reductions). The
shipped configuration (`default_bwd_config`) of each point is always run too (`shipped`).

Each configuration is first checked once per (d, causal) at (2, 4, 1000, d) fp16 against float64
autograd (the forward's rule, `minimodel.gpu.kernel_check`); one that fails is said and not timed.
Timed is the backward alone: the forward's O and LSE saved, one dO, `flash_attn_backward`
(`backward_fn`), against SDPA's backward of the same inputs through autograd (`autograd.grad` of a
saved graph) and FA4's (`fa4_ms`, where `flash_attn.cute` imports). Medians of
`triton.testing.do_bench` (eager) or of CUDA-graph replays (`--graph`, `graph_ms`), in ms; TFLOP/s
under FlashAttention's convention, backward = 2.5 × the forward's 4·B·H·N²·d, halved when
causal. The last lines give each configuration's geometric mean of SDPA flash's time over the
kernel's (the target is >= 1.00); the csv has cuDNN's and FA4's too (`vs_cudnn`, `vs_fa4`). A
development tool: the workflow never imports it.
Like tools/kernel_report.py it does not import minimodel.entry: it times on a CUDA device, where
Triton compiles, and `--report` compiles for sm_90 on a machine without one.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import re
import sys
from functools import partial

import kernel_report
import torch

from minimodel.contenders import builtin
from minimodel.floor import contract, timers
from minimodel.floor.byte_model.forward import attention_flops
from minimodel.gpu import grids
from minimodel.gpu.kernel_check import check_backward_case
from minimodel.kernel import BwdConfig, backward_fn, default_bwd_config, get_bwd_config, gluon_ws_config
from minimodel.kernel.backward import arguments

CANDIDATES = {
    "sweep": [BwdConfig(m1, n1, m2, n2, w, s, w, s)
              for (m1, n1), (m2, n2), w, s in itertools.product(
                  ((32, 128), (64, 128), (64, 64)), ((128, 64), (128, 32), (64, 64)), (4, 8), (2, 3))],
    # the warp-specialized Gluon dK/dV kernel, with the Hopper table's dQ tiles
    "gluon": [BwdConfig(m1, 128, 128, 64, 12, s, 8, 3, "gluon_ws")
              for m1, s in itertools.product((32, 64, 128), (2, 3))],
}
CHECK_SHAPE = (2, 4, 1000)  # B, H, N of the correctness check
CHECK_SEED: int | None = None  # its inputs' seed; None: a fresh one per check, which the check names
DEVICE = "cuda"  # where `run` checks and times (its test runs it on the CPU, under the interpreter)


FLAGS = {"WS": "tl_pass", "IN_KERNEL": "in_kernel"}  # gluon_ws, with its dQ


def parse_config(spec: str) -> BwdConfig:
    """`BLOCK_M1,BLOCK_N1,BLOCK_M2,BLOCK_N2[,WARPS_KV,STAGES_KV,WARPS_Q,STAGES_Q][,WS|,IN_KERNEL]`;
    WS: the warp-specialized Gluon kernel (WARPS_KV 12) with the tl dQ pass; IN_KERNEL: with dQ
    added in it by TMA reductions."""
    parts = [p.strip() for p in spec.split(",")]
    flag = parts[-1].upper() if parts[-1].upper() in FLAGS else None
    try:
        sizes = [int(p) for p in parts[:-1 if flag else None]]
        if len(sizes) not in (4, 8):
            raise ValueError(f"{len(sizes)} numbers")
        if flag:
            return BwdConfig(*sizes, dkdv="gluon_ws", dq=FLAGS[flag])
        return BwdConfig(*sizes)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(
            f"{spec!r}: expected BLOCK_M1,BLOCK_N1,BLOCK_M2,BLOCK_N2[,WARPS_KV,STAGES_KV,WARPS_Q,STAGES_Q]"
            f"[,WS|,IN_KERNEL] ({e})") from e


def backward_flops(B, H, N, d, causal) -> float:
    return 2.5 * attention_flops(B, H, N, d, causal)


def _timer(graph: bool, warmup_ms: float, rep_ms: float):
    """ms of the call `make()` builds: eager (`timers.bench_ms`, do_bench's median) or graph replays."""
    if graph:
        return lambda make: timers.graph_ms(make, rep_ms)
    return lambda make: timers.bench_ms(make(), warmup_ms, rep_ms)


def sdpa_backward(q, k, v, do, causal: bool, backend: str):
    """A call running SDPA's backward (`backend` of `contract.SDPA_BACKENDS`) of a saved graph."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(getattr(SDPBackend, contract.SDPA_BACKENDS[backend])):
        out = sdpa(*leaves, is_causal=causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def fa4_backward(q, k, v, do, causal: bool):
    """A call running FA4's backward (`flash_attn.cute`, the contenders' `fa4`) of a saved graph."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    return timers.autograd_call(lambda *x: builtin.fa4(*x, causal=causal), leaves, do, contract.BACKWARD)


# what the kernel's backward is timed beside: each a maker of a call from (q, k, v, do, causal)
BESIDE = {**{backend: partial(sdpa_backward, backend=backend) for backend in contract.SDPA_BACKENDS},
          "fa4": fa4_backward}


def check(cfg: BwdConfig | None, d: int, causal: bool) -> tuple[bool, str]:
    """(passed, the errors against their tolerances); a configuration that cannot run here (more
    shared memory than the GPU has, say) does not pass, and the run goes on with the others."""
    seed = torch.seed() if CHECK_SEED is None else CHECK_SEED
    try:
        row = check_backward_case(*CHECK_SHAPE, d, causal, "float16", device=DEVICE,
                                  generator=torch.Generator().manual_seed(seed), config=cfg)
    except Exception as e:  # triton's OutOfResources, a compile error: whatever the config raised
        return False, f"did not run: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    text = " ".join(f"{g} {row[f'err_{g}_kernel_vs_fp64']:.1e}/{row[f'tolerance_{g}']:.1e}"
                    for g in ("dq", "dk", "dv"))
    return bool(row["passed"]), f"{text}, seed {seed}"


def run(args) -> list[dict]:
    timing = grids.default_timing_config()
    time_ms = _timer(args.graph, timing["warmup_ms"], args.rep_ms)
    points = [p for p in grids.flashattention_grid(timing)
              if (not args.d or p.d in args.d) and (not args.n or p.N in args.n)
              and (args.causal is None or p.causal == args.causal)]
    configs = [*args.config, *(c for name in args.candidates for c in CANDIDATES[name])]
    passed: dict = {}
    rows = []
    for p in points:
        q, k, v, do = (torch.randn(p.B, p.H, p.N, p.d, device=DEVICE, dtype=torch.float16) for _ in range(4))
        shipped = default_bwd_config(q, p.causal)
        flops = backward_flops(p.B, p.H, p.N, p.d, p.causal)
        base = {"d": p.d, "causal": p.causal, "N": p.N, "B": p.B, "H": p.H}
        beside_ms = {}
        for name, make in BESIDE.items():
            try:
                beside_ms[name] = time_ms(partial(make, q, k, v, do, p.causal))
            except Exception as e:  # FA4 not installed, a backend refusing the case
                print(f"{name} at {base}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
                beside_ms[name] = math.nan
        for cfg in dict.fromkeys([shipped, *configs]):
            key = (cfg, p.d, p.causal)
            if key not in passed:
                passed[key] = check(cfg, p.d, p.causal)
                print(f"check d={p.d} causal={p.causal} {cfg}: {'pass' if passed[key][0] else 'FAIL'} "
                      f"({passed[key][1]})", flush=True)
            row = {**base, "config": ",".join(str(x) for x in cfg.as_dict().values()),
                   "shipped": cfg == shipped, "passed": passed[key][0], "ms": math.nan}
            if passed[key][0]:
                try:
                    row["ms"] = time_ms(partial(backward_fn, q, k, v, p.causal, do=do, config=cfg))
                except Exception as e:
                    print(f"{cfg} at {base}: {type(e).__name__}: {str(e)[:100]}", file=sys.stderr)
            row["tflops"] = flops / row["ms"] / 1e9
            row.update({f"{b}_ms": t for b, t in beside_ms.items()})
            row["vs_sdpa_flash"] = beside_ms[contract.SDPA_FLASH] / row["ms"]
            row["vs_cudnn"] = beside_ms[contract.SDPA_CUDNN] / row["ms"]
            row["vs_fa4"] = beside_ms["fa4"] / row["ms"]
            rows.append(row)
            print("  ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    return rows


def summary(rows: list[dict]) -> list[tuple]:
    """Per configuration ("shipped" for the table's own), per (d, causal) and over all points:
    (name, d, causal, points, geometric mean of SDPA flash's time over the kernel's); NaN where a
    point has no ratio (a config or SDPA that did not run there)."""
    groups: dict = {}
    for r in rows:
        name = "shipped" if r["shipped"] else r["config"]
        for key in ((name, r["d"], r["causal"]), (name, "all", "all")):
            groups.setdefault(key, []).append(r["vs_sdpa_flash"])
    found = []
    for (name, d, causal), ratios in groups.items():
        ok = [x for x in ratios if x > 0 and math.isfinite(x)]
        mean = math.exp(sum(map(math.log, ok)) / len(ok)) if ok and len(ok) == len(ratios) else math.nan
        found.append((name, d, causal, len(ratios), mean))
    return found


def print_summary(rows: list[dict]) -> None:
    print("\nconfig                      d     causal  points  geomean(sdpa_flash / kernel)")
    for name, d, causal, points, mean in summary(rows):
        print(f"{name:26s}  {d!s:5s} {causal!s:7s} {points:6d}  {mean:.3f}")


def compiled_usage(kernel, kargs: dict, options: dict, arch: int = 90) -> str:
    """Registers per thread, spill bytes and shared memory of `kernel` compiled for sm_`arch` as a
    launch with these arguments specializes it (tools/kernel_report.py's signature and cubin
    reading), and its warps (the warp-specialized Gluon kernel's partitions then set their own
    registers: tools/bwd_ws_report.py reads those)."""
    compiled = kernel_report.compile_for(kernel, kernel_report._as_types(kargs), options, arch)
    usage = kernel_report._cuobjdump(compiled.asm["cubin"], "--dump-resource-usage")
    regs, stack = (re.search(rf"{key}:(\d+)", usage).group(1) for key in ("REG", "STACK"))
    return (f"{regs} registers, {stack} spill bytes, {compiled.metadata.shared} shared bytes, "
            f"{options.get('num_warps', 4)} warps")


def report(args) -> None:
    """Compile each configuration's two gradient kernels for sm_90 without a GPU (run it without
    TRITON_INTERPRET=1): registers per thread, spill bytes, shared memory."""
    configs = [*args.config, *(c for name in args.candidates for c in CANDIDATES[name])]
    causals = (False, True) if args.causal is None else (args.causal,)
    for d, causal in itertools.product(args.d or (64, 128), causals):
        t = torch.empty(1, 1, 4096, d, dtype=torch.float16)
        lse = torch.empty(1, 1, 4096)
        shipped = gluon_ws_config(d, causal) if args.gluon else get_bwd_config(d, causal, "cuda")
        for cfg in dict.fromkeys([shipped, *configs]):
            launches = arguments(t, t, t, t, lse, t, t, t, t, lse, 0.125, cfg, causal)[1:]
            found = [f"{kernel.__name__}: " + compiled_usage(kernel, kargs, options)
                     for kernel, _, kargs, options in launches]
            print(f"d={d} causal={causal} {cfg}: " + "; ".join(found), flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=parse_config, action="append", default=[])
    parser.add_argument("--candidates", action="append", default=[], choices=sorted(CANDIDATES))
    parser.add_argument("--d", type=int, action="append", help="head dims (default: the grid's)")
    parser.add_argument("--n", type=int, action="append", help="sequence lengths (default: the grid's)")
    parser.add_argument("--causal", type=lambda s: s.lower() in ("1", "true", "yes"), default=None)
    parser.add_argument("--graph", action="store_true", help="time CUDA-graph replays, not eager calls")
    parser.add_argument("--rep-ms", type=float, default=200.0)
    parser.add_argument("--csv", help="write every row to this file")
    parser.add_argument("--report", action="store_true", help="compile for sm_90 and report; no GPU needed")
    parser.add_argument("--gluon", action="store_true",
                        help="with --report: start from the Gluon dK/dV kernel's configurations "
                             "(`gluon_ws_config`), not the shipped table's")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.report:
        report(args)
        return 0
    if not torch.cuda.is_available():
        parser.error("timing needs a CUDA device (--report compiles without one)")
    rows = run(args)
    print_summary(rows)
    if args.csv and rows:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
