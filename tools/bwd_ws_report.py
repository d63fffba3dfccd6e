"""The warp-specialized Gluon dK/dV kernel (`minimodel.kernel.gluon_bwd_ws`) and the Gluon dQ pass
(`gluon_bwd_dqpass`) compiled for sm_90 on a machine without a GPU: registers per partition,
spills, shared memory, the instructions that say the schedule is there.

    python tools/bwd_ws_report.py                          # each configuration the GPU run checks
    python tools/bwd_ws_report.py --d 128 --m 64 --stages 2 --causal --atomic
    python tools/bwd_ws_report.py --case 64,1,0 --case 128,0,2   # (d, causal, dQ) cases: dQ 0 the
                                                                 # tl pass, 1 atomics, 2 TMA reductions,
                                                                 # 3 TMA reductions in order,
                                                                 # 4 the Gluon dQ pass (its launch),
                                                                 # 5 the same with 3 consumers
    python tools/bwd_ws_report.py --json out.json          # also write the rows

With warp specialization the cubin's register count is the launch's (65,536 / 384 threads,
rounded down to 8: 168): each partition then moves to its own with `setmaxnreg`, which ptxas
compiles it under. So the register split is read from the SASS (`USETMAXREG`), spills from
cuobjdump's stack size and from ptxas's local-memory instructions (`STL`/`LDL`), as
tools/kernel_report.py reads the forward. Nothing runs.
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

from minimodel.kernel.bwd_config import GLUON_DQ_TILES, gluon_ws_config
from minimodel.kernel.gluon_bwd_dqpass import config_launch
from minimodel.kernel.gluon_bwd_ws import WARPS, dkdv_launch

# (d, causal, dQ) of `gluon_ws_config`, dQ: 0 the tl pass, 1 atomics, 2 TMA reductions, 3 TMA
# reductions in a fixed order: what tools/bwd_gluon_gpu.py checks and times; 4: the launch of the
# Gluon dQ pass that runs after the dK/dV kernel (`gluon_dq`, its consumers the policy's,
# `bwd_config.GLUON_DQ_PASS`), reported instead of it; 5: that pass with three consumer warpgroups
DQ_PASS, DQ_ATOMIC, DQ_TMA, DQ_ORDERED, DQ_GLUON_PASS, DQ_GLUON_PASS_3 = 0, 1, 2, 3, 4, 5
DEFAULT = [(d, causal, dq) for d in (64, 128) for causal in (False, True)
           for dq in (DQ_PASS, DQ_ATOMIC, DQ_TMA, DQ_ORDERED)]
# spill bytes a configuration is known to have, (d, causal, dQ) -> bytes, each checked in the SASS
# to lie outside the loops: the ordered path's causal key blocks numbered last first
# (`KeyBlock.create`) store two values of one MMA warpgroup before its loop and load them after it
KNOWN_SPILLS = {(64, True, DQ_ORDERED): 8}
# warpgroup MMAs, exp2, fp32 reductions to global memory (the atomics into dQ), mbarrier operations,
# CTA barriers, local-memory stores and loads (spills), TMA loads, TMA reductions
OPCODES = ("HGMMA", "MUFU", "REDG", "SYNCS", "BAR", "STL", "LDL", "UTMALDG", "UTMAREDG", "ATOMG")


def compile_ws(cfg, d: int, causal: bool, dtype=torch.float16, n: int = 4096, arch: int = 90):
    """Triton's compiled kernel of `dkdv_launch` for `cfg` on a contiguous (1, 1, n, d) problem (with
    cfg.GLUON_DQ, of the Gluon dQ pass's launch instead)."""
    t = torch.empty(1, 1, n, d, dtype=dtype)
    rows = torch.empty(1, 1, n, dtype=torch.float32)
    dq = torch.empty(1, 1, n, d, dtype=torch.float32 if cfg.ATOMIC_DQ else dtype)
    if cfg.GLUON_DQ:
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
            "stages": cfg.num_stages_q if cfg.GLUON_DQ else cfg.num_stages_kv,
            "atomic_dq": cfg.ATOMIC_DQ, "tma_dq": cfg.TMA_DQ, "ordered_dq": cfg.ORDERED_DQ,
            "dtype": str(dtype).removeprefix("torch."),
            # MMA warpgroups: the dQ pass's, or the dK/dV kernel's (all but its producer's)
            "consumers": cfg.dq_consumers if cfg.GLUON_DQ else WARPS // 4 - 1,
            "registers": int(re.search(r"REG:(\d+)", usage).group(1)),
            "setmaxnreg": maxnreg, "spill_stack_bytes": int(re.search(r"STACK:(\d+)", usage).group(1)),
            "shared_bytes": int(compiled.metadata.shared), "warps": compiled.metadata.num_warps,
            **{op.lower(): ops[op] for op in OPCODES}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, choices=(64, 128))
    parser.add_argument("--m", type=int, help="BLOCK_M1 (default: gluon_ws_config's)")
    parser.add_argument("--stages", type=int)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--atomic", action="store_true", help="dQ by atomic adds in the kernel")
    parser.add_argument("--tma-dq", action="store_true", help="dQ by TMA reductions in the kernel")
    parser.add_argument("--case", action="append",
                        help="d,causal,dq[,BLOCK_M1] (dQ: 0 the tl pass, 1 atomics, 2 TMA reductions, 3 "
                             "in order, 4 the Gluon dQ pass's own launch, 5 it with 3 consumers), "
                             "instead of --d")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    dq = DQ_TMA if args.tma_dq else DQ_ATOMIC if args.atomic else DQ_PASS
    cases = [(args.d, args.causal, dq)] if args.d else DEFAULT
    if args.case:
        cases = [tuple(int(x) for x in c.split(",")) for c in args.case]
    cases = [(*c, None)[:4] for c in cases]  # a case's own BLOCK_M1, else --m's
    rows, bad = [], 0
    for d, causal, dq, block_m in cases:
        causal = bool(causal)
        cfg = gluon_ws_config(d, causal, atomic_dq=dq == DQ_ATOMIC, tma_dq=dq == DQ_TMA,
                              ordered_dq=dq == DQ_ORDERED, gluon_dq=dq in (DQ_GLUON_PASS, DQ_GLUON_PASS_3))
        cfg = replace(cfg, BLOCK_M1=block_m or args.m or cfg.BLOCK_M1,
                      num_stages_kv=args.stages or cfg.num_stages_kv)
        if dq == DQ_GLUON_PASS_3:
            m2, n2, warps = GLUON_DQ_TILES[3]
            cfg = replace(cfg, BLOCK_M2=m2, BLOCK_N2=n2, num_warps_q=warps)
        try:
            row = report(cfg, d, causal, torch.bfloat16 if args.bf16 else torch.float16)
        except Exception as err:  # a configuration Triton cannot lower: said, and the next one goes on
            row = {"d": d, "causal": causal, "BLOCK_M1": cfg.BLOCK_M1, "atomic_dq": cfg.ATOMIC_DQ,
                   "tma_dq": cfg.TMA_DQ, "ordered_dq": cfg.ORDERED_DQ,
                   "error": f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"}
        row["known_spill_bytes"] = known = KNOWN_SPILLS.get((d, causal, dq), 0)
        bad += "error" in row or row["spill_stack_bytes"] > known or (known == 0 and row["stl"] > 0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
