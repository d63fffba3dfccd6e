"""Nsight Compute beside the backward kernels a user would compare: the kernel's paths, FA4's and
cuDNN's, at FlashAttention's grid at N = 4096 (or the points given), one backward call each.

    PYTHONPATH=src:tools python3 tools/bwd_ncu.py --out DIR [--ways default ws tma fa4 cudnn]
    PYTHONPATH=src:tools python3 tools/bwd_ncu.py --out DIR --ways ws tma \
        --point 1,32,16384,64 --point 16,32,1024,64 --causal     # other points, one mask

The parent asks ncu which metrics this GPU has (`--query-metrics`) and keeps those it wants that
are there (`WANTED` by name; `STALLS`, every "issue stalled" ratio), then profiles a child
(`--child`) that runs, for each point and way (`calls`, in that order), one unprofiled call
(compiles, allocations), then between cudaProfilerStart and Stop, which alone ncu profiles (the
bytes stage's NVTX range would miss a backward that autograd runs from its own thread), its
marker kernel and one call (`gpu.hbm_probe`'s way: the kernels after a marker are that call's),
with the bytes stage's cache and clock options (`gpu.ncu.CAPTURE_OPTIONS`: caches flushed before each
kernel, clocks as they are). Writes ncu.csv (ncu's long table: a row per kernel and metric),
kernels.csv (a row per kernel: its call, the wanted metrics as columns) and prints each kernel's
time, tensor pipe and three largest stall reasons. Times under ncu are replays: compare them with
each other, not with the timing stage.
"""

import argparse
import io
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin
from minimodel.floor.timers import autograd_call
from minimodel.gpu import ncu as ncu_tool
from minimodel.gpu.hbm_probe import minimodel_bytes_marker
from minimodel.kernel import gluon_ws_config
from minimodel.kernel.backward import backward_fn

POINTS = [(4, 16, 4096, 128), (4, 32, 4096, 64)]  # FlashAttention's grid at N = 4096
# metric name prefixes wanted, each with the suffix that makes it a number per kernel
WANTED = {
    "gpu__time_duration": ".sum",
    "sm__throughput": ".avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_gmma_cycles_active": ".avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active": ".avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active": ".avg.pct_of_peak_sustained_active",
    "sm__warps_active": ".avg.pct_of_peak_sustained_active",
    "smsp__issue_active": ".avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread": "",
    "launch__shared_mem_per_block_dynamic": "",
    "launch__shared_mem_per_block_static": "",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_st": ".sum",  # spills' stores
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld": ".sum",
    "dram__bytes_read": ".sum",
    "dram__bytes_write": ".sum",
}
# the bytes stage's options, but what is profiled is what runs between cudaProfilerStart and Stop:
# autograd runs a contender's backward in a thread of its own, outside the caller's NVTX range
PROFILED_OPTIONS = [*ncu_tool.CAPTURE_OPTIONS, "--profile-from-start", "off"]
STALLS = re.compile(r"^(smsp__average_warps_issue_stalled_\w+)_per_issue_active$")


def calls(way: str, B: int, H: int, N: int, d: int, causal: bool):
    """A call of the backward alone (O and LSE, or autograd's forward, made once before)."""
    gen = torch.Generator().manual_seed(7)
    q, k, v, do = (torch.randn(B, H, N, d, generator=gen).to("cuda", torch.float16) for _ in range(4))
    if way == "default":  # what the policy runs (`get_bwd_config`): ws with the Gluon or tl dQ pass
        return backward_fn(q, k, v, causal, do=do)
    if way in ("ws", "tma"):  # ws: the warp-specialized kernel with the tl dQ pass; tma: dQ in it
        cfg = gluon_ws_config(d, causal, "in_kernel" if way == "tma" else "tl_pass")
        return backward_fn(q, k, v, causal, do=do, config=cfg)
    fn = builtin.fa4 if way == "fa4" else builtin.sdpa_cudnn
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    return autograd_call(lambda *x: fn(*x, causal=causal), leaves, do, "backward")


def order(ways: list[str], points: list[tuple], masks: list[bool]) -> list[tuple]:
    """(way, point, causal) of each profiled call, in the child's order."""
    return [(way, point, causal) for point in points for causal in masks for way in ways]


def point(spec: str) -> tuple:
    """`B,H,N,d` of a --point."""
    try:
        B, H, N, d = (int(x) for x in spec.split(","))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected B,H,N,d, four integers ({e})") from e
    return B, H, N, d


def child_args(args) -> list[str]:
    """The child's command line: the same calls, in the same order."""
    points = [a for p in args.point or [] for a in ("--point", ",".join(map(str, p)))]
    masks = ["--causal"] if args.causal else ["--not-causal"] if args.not_causal else []
    return ["--child", "--ways", *args.ways, *points, *masks]


def child(calls_of: list[tuple]) -> None:
    marker = torch.zeros(1, device="cuda", dtype=torch.int32)
    for way, (B, H, N, d), causal in calls_of:
        call = calls(way, B, H, N, d, causal)
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()  # process-wide, unlike an NVTX range: autograd's thread too
        minimodel_bytes_marker[(1,)](marker)
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        del call
        torch.cuda.empty_cache()


def metrics(ncu: str) -> list[str]:
    """The wanted metrics this GPU has, with their suffixes, and every stall ratio."""
    listed = subprocess.run([ncu, "--query-metrics", "--csv"], capture_output=True, text=True,
                            timeout=300).stdout
    names = set(re.findall(r"^\"?([a-z0-9_]+__[a-z0-9_]+)", listed, flags=re.M))
    found = [name + suffix for name, suffix in WANTED.items() if name in names]
    stalls = sorted(f"{m.group(1)}_per_issue_active.ratio" for n in names if (m := STALLS.match(n)))
    return found + stalls


def parse(argv=None):
    """(the options, the calls they ask for in the child's order)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--ways", nargs="+", default=["default", "tma", "fa4", "cudnn"],
                        choices=["default", "ws", "tma", "fa4", "cudnn"])
    parser.add_argument("--point", type=point, action="append",
                        help="B,H,N,d (repeatable; default the issue's two points at N = 4096)")
    masks = parser.add_mutually_exclusive_group()
    masks.add_argument("--causal", action="store_true", help="only the causal calls")
    masks.add_argument("--not-causal", action="store_true", help="only the calls without the mask")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    return args, order(args.ways, args.point or POINTS,
                       [True] if args.causal else [False] if args.not_causal else [False, True])


def main(argv=None) -> int:
    args, calls_of = parse(argv)
    if args.child:
        child(calls_of)
        return 0
    ncu = ncu_tool.find_ncu()
    if ncu is None:
        print("no ncu on this machine", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    cmd = [ncu, *PROFILED_OPTIONS, "--metrics", ",".join(metrics(ncu)), "--csv", "--page", "details",
           "--print-units", "base", sys.executable, __file__, *child_args(args)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    (args.out / "ncu.log").write_text(done.stderr[-20000:])
    start = done.stdout.find('"ID"')
    if start < 0:
        print(f"ncu wrote no table (exit {done.returncode}): {done.stderr.strip()[-800:]}", file=sys.stderr)
        return 1
    (args.out / "ncu.csv").write_text(done.stdout[start:])
    long = pd.read_csv(io.StringIO(done.stdout[start:]), dtype=str, keep_default_na=False)
    wide = long.pivot_table(index=["ID", "Kernel Name"], columns="Metric Name", values="Metric Value",
                            aggfunc="first").reset_index()
    wide["ID"] = wide["ID"].astype(int)
    wide = wide.sort_values("ID")
    is_marker = wide["Kernel Name"].str.startswith(ncu_tool.MARKER)
    if is_marker.sum() != len(calls_of):
        print(f"ncu profiled {is_marker.sum()} marked calls, the child made {len(calls_of)}", file=sys.stderr)
        return 1
    wide["call"] = [f"{w} {p} causal={c}" for w, p, c in (calls_of[i] for i in is_marker.cumsum() - 1)]
    wide = wide[~is_marker]
    wide.to_csv(args.out / "kernels.csv", index=False)
    stall_columns = [c for c in wide.columns if STALLS.match(c.removesuffix(".ratio"))]
    for _, row in wide.iterrows():
        stalls = sorted(((pd.to_numeric(row[c], errors="coerce"), c) for c in stall_columns),
                        reverse=True)[:3]
        tensor = next((row[c] for c in wide.columns if "pipe_tensor" in c), "?")
        print(f"{row['call']}: {row['Kernel Name'][:60]} {row.get('gpu__time_duration.sum', '?')} ns, "
              f"tensor {tensor} %, " + ", ".join(f"{c.split('stalled_')[1].split('_per')[0]} {v:.2f}"
                                                 for v, c in stalls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
