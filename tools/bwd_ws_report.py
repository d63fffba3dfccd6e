"""The warp-specialized Gluon dK/dV kernel (`minimodel.kernel.gluon_bwd_ws`) and the Gluon dQ pass
(`gluon_bwd_dqpass`) compiled for sm_90 on a machine without a GPU: registers per partition,
spills, shared memory, the instructions that say the schedule is there.

    python tools/bwd_ws_report.py                          # each configuration the policy can pick
    python tools/bwd_ws_report.py --d 128 --m 64 --stages 2 --causal --dq in_kernel
    python tools/bwd_ws_report.py --case 64,1,tl_pass --case 128,0,gluon_pass:3   # (d, causal, dQ)
    python tools/bwd_ws_report.py --json out.json          # also write the rows

A case's dQ is the configuration's (`BwdConfig.dq`): tl_pass or in_kernel report the dK/dV
kernel; gluon_pass[:CONSUMERS] the launch of the Gluon dQ pass that runs after it (its consumers
the policy's, `policy.GLUON_DQ_PASS`, or CONSUMERS). With warp specialization the cubin's register
count is the launch's (65,536 / 384 threads, rounded down to 8: 168): each partition then moves to
its own with `setmaxnreg`, which ptxas compiles it under. So the register split is read from the
SASS (`USETMAXREG`), spills from cuobjdump's stack size and from ptxas's local-memory instructions
(`STL`/`LDL`), as tools/kernel_report.py reads the forward. Nothing runs.
"""

import argparse
import collections
import json
import re
import sys
from dataclasses import replace

import compiled_entry  # noqa: F401 (first: Triton's compiler, whatever the device)
import kernel_report
import torch

from minimodel.kernel.config import WS_WARPS
from minimodel.kernel.gluon_bwd_dqpass import config_launch
from minimodel.kernel.gluon_bwd_ws import dkdv_launch
from minimodel.kernel.policy import gluon_ws_config

# (d, causal, dQ) of `gluon_ws_config`: every dK/dV kernel and dQ pass the policy can pick
DEFAULT = [(d, causal, dq) for d in (64, 128) for causal in (False, True) for dq in ("tl_pass", "in_kernel")]
# warpgroup MMAs, exp2, reductions and atomics to global memory (REDG, ATOMG: no path has them),
# mbarrier operations, CTA barriers, local-memory stores and loads (spills), TMA loads, TMA reductions
OPCODES = ("HGMMA", "MUFU", "REDG", "SYNCS", "BAR", "STL", "LDL", "UTMALDG", "UTMAREDG", "ATOMG")


def compile_ws(cfg, d: int, causal: bool, dtype=torch.float16, n: int = 4096, arch: int = 90):
    """Triton's compiled kernel of `dkdv_launch` for `cfg` on a contiguous (1, 1, n, d) problem (with
    dq "gluon_pass", of the Gluon dQ pass's launch instead)."""
    t = torch.empty(1, 1, n, d, dtype=dtype)
    rows = torch.empty(1, 1, n, dtype=torch.float32)
    dq = torch.empty(1, 1, n, d, dtype=torch.float32 if cfg.dq == "in_kernel" else dtype)
    if cfg.dq == "gluon_pass":
        kernel, _, args, options = config_launch(t, t, t, t, dq, rows, rows, 0.125, cfg, causal)
    else:
        kernel, _, args, options = dkdv_launch(t, t, t, t, dq, t, t, rows, rows, 0.125, cfg, causal)
    return kernel_report.compile_for(kernel, kernel_report._as_types(args), options, arch)


def report(cfg, d: int, causal: bool, dtype=torch.float16) -> dict:
    """Registers (the launch's, and each partition's after setmaxnreg), spill bytes, shared bytes, counts."""
    compiled = compile_ws(cfg, d, causal, dtype)
    cubin = compiled.asm["cubin"]
    usage = kernel_report._cuobjdump(cubin, "--dump-resource-usage")
    sass = kernel_report._cuobjdump(cubin, "--dump-sass")
    ops = collections.Counter(m.group(1).split(".")[0] for m in
                              re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))
    maxnreg = sorted({int(x) for x in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)",
                                                 compiled.asm["ptx"])})
    return {"d": d, "causal": causal, "kernel": compiled.metadata.name, "BLOCK_M1": cfg.BLOCK_M1,
            "stages": cfg.num_stages_q if cfg.dq == "gluon_pass" else cfg.num_stages_kv, "dq": cfg.dq,
            "dtype": str(dtype).removeprefix("torch."),
            # MMA warpgroups: the dQ pass's, or the dK/dV kernel's (all but its producer's)
            "consumers": cfg.dq_consumers or WS_WARPS // 4 - 1,
            "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
            "setmaxnreg": maxnreg, "spill_stack_bytes": int(re.search(r"STACK:(\d+)", usage).group(1)),
            "shared_bytes": int(compiled.metadata.shared), "warps": compiled.metadata.num_warps,
            **{op.lower(): ops[op] for op in OPCODES}}


def _case(spec: str) -> tuple:
    """`d,causal,dq[,BLOCK_M1]`, dq one of tl_pass, in_kernel, gluon_pass[:CONSUMERS]."""
    d, causal, dq, *block_m = spec.split(",")
    return int(d), bool(int(causal)), dq, int(block_m[0]) if block_m else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, choices=(64, 128))
    parser.add_argument("--m", type=int, help="BLOCK_M1 (default: gluon_ws_config's)")
    parser.add_argument("--stages", type=int)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dq", default="tl_pass",
                        help="with --d: tl_pass, in_kernel or gluon_pass[:CONSUMERS]")
    parser.add_argument("--case", action="append", type=_case,
                        help="d,causal,dq[,BLOCK_M1] (dq as --dq), instead of --d")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    cases = args.case or ([(args.d, args.causal, args.dq, None)] if args.d else [(*c, None) for c in DEFAULT])
    rows, bad = [], 0
    for d, causal, dq, block_m in cases:
        kind, _, consumers = dq.partition(":")
        cfg = gluon_ws_config(d, causal, kind, int(consumers) if consumers else None)
        cfg = replace(cfg, BLOCK_M1=block_m or args.m or cfg.BLOCK_M1,
                      num_stages_kv=args.stages or cfg.num_stages_kv)
        try:
            row = report(cfg, d, causal, torch.bfloat16 if args.bf16 else torch.float16)
        except Exception as err:  # a configuration Triton cannot lower: said, and the next one goes on
            row = {"d": d, "causal": causal, "BLOCK_M1": cfg.BLOCK_M1, "dq": cfg.dq,
                   "error": f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"}
        bad += "error" in row or row["spill_stack_bytes"] > 0 or row["stl"] > 0
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
