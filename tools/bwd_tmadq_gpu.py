"""The warp-specialized backward with dQ by TMA reductions (`minimodel.kernel.gluon_bwd_tmadq`) on an
H100 or H200, in one short call: checked against float64, then timed beside the shipped paths.

    PYTHONPATH=src:tools python3 tools/bwd_tmadq_gpu.py --out DIR

1. check (a child, killed after --check-limit-s): d = 64 and 128, `bwd_gluon_gpu.cases` (N = 1
   and 77, the sweep in fp16 and bf16 with H_kv = 4 and 1, B·H past 65,535, rows past 2³¹
   elements, a (B, N, H, d) layout, sm_scale 0.3), each against float64 autograd under the
   project's rule; a case the kernel cannot take (inputs TMA cannot read) is said, not counted.
   Then twice on one input: whether dQ's bits repeat (they need not: the reductions' order is the
   hardware's), dK's and dV's must.
2. time (a child, killed after --time-limit-s): `bwd_gluon_gpu.POINTS`, causal and not, fp16, the
   backward alone, CUDA-graph medians: tmadq, ws (shipped: the tl dQ pass after the kernel), wsdq
   (fp32 atomics) and SDPA's cuDNN, side by side.
Writes check_tmadq.jsonl and timing_tmadq.jsonl under --out.
"""

import argparse
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import bwd_gluon_gpu as base
import torch

from minimodel.floor.correctness_rule import failure_reason, grad_errors, reference_grads
from minimodel.kernel import backward
from minimodel.kernel.bwd_config import gluon_ok, gluon_ws_config
from minimodel.kernel.flash import flash_attn_forward
from minimodel.kernel.gluon_bwd_tmadq import flash_attn_backward_tmadq, tmadq_config


def tmadq_fn(q, k, v, causal, do, sm_scale=None):
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    cfg = tmadq_config(q.shape[-1], causal)
    return lambda: flash_attn_backward_tmadq(q, k, v, o, lse, do, causal, sm_scale, cfg)


def check_one(d, causal, make, sm_scale) -> dict:
    q, k, v, do = make()
    if not gluon_ok(q, k, v, do):
        return {"ok": True, "skipped": "inputs TMA cannot read"}
    got = tmadq_fn(q, k, v, causal, do, sm_scale)()
    torch.cuda.synchronize()
    row = grad_errors(got, reference_grads(q, k, v, do, causal, sm_scale, upcast=True),
                      reference_grads(q, k, v, do, causal, sm_scale))
    errors = " ".join(f"{g} {row[f'err_{g}_kernel_vs_fp64']:.2e}/{row[f'tolerance_{g}']:.2e}"
                      for g in ("dq", "dk", "dv"))
    return {"ok": bool(row["passed"]), "errors": errors, "reason": failure_reason(row)}


def twice(d, causal) -> dict:
    q, k, v, do = base.inputs(2, 4, 1000, d, torch.float16, 1, 6)
    call = tmadq_fn(q, k, v, causal, do)
    same = [torch.equal(a, b) for a, b in zip(call(), call(), strict=True)]
    return {"ok": same[1] and same[2], "reason": f"same bits dQ, dK, dV: {same}"}


def run_check(out: Path) -> None:
    with open(out / "check_tmadq.jsonl", "a") as f:
        for d in (64, 128):
            calls = [(label, partial(check_one, d, causal, make, sm_scale))
                     for label, causal, make, sm_scale in base.cases(d)]
            calls += [(f"twice causal={c}", partial(twice, d, c)) for c in (False, True)]
            for label, call in calls:
                try:
                    row = call()
                except Exception as err:  # a compile or launch error fails this case
                    row = {"ok": False, "reason": f"{type(err).__name__}: {str(err).strip()[-300:]}"}
                row = {"d": d, "case": label, **row}
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(("ok   " if row["ok"] else "FAIL ") + json.dumps(row), flush=True)


def run_time(out: Path) -> None:
    ways = {"tmadq": lambda q, k, v, do, c: tmadq_fn(q, k, v, c, do),
            "ws": lambda q, k, v, do, c: backward.backward_fn(q, k, v, c, do=do,
                                                               config=gluon_ws_config(q.shape[-1], c)),
            "wsdq": lambda q, k, v, do, c: backward.backward_fn(
                q, k, v, c, do=do, config=gluon_ws_config(q.shape[-1], c, atomic_dq=True)),
            "cudnn": base.sdpa_backward}
    with open(out / "timing_tmadq.jsonl", "w") as f:
        for B, H, n, d in base.POINTS:
            for causal in (False, True):
                q, k, v, do = base.inputs(B, H, n, d, torch.float16, H, 7)
                row = {"B": B, "H": H, "N": n, "d": d, "causal": causal}
                for name, make in ways.items():
                    try:
                        row[f"{name}_ms"] = base.graph_ms(partial(make, q, k, v, do, causal))
                    except Exception as err:
                        print(f"{name} at {row}: {type(err).__name__}: {str(err).strip()[-200:]}", flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps(row), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", choices=("check", "time"))
    parser.add_argument("--check-limit-s", type=float, default=150)
    parser.add_argument("--time-limit-s", type=float, default=90)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "check":
        run_check(args.out)
        return 0
    if args.stage == "time":
        run_time(args.out)
        return 0
    for stage, limit in (("check", args.check_limit_s), ("time", args.time_limit_s)):
        try:
            subprocess.run([sys.executable, __file__, "--out", str(args.out), "--stage", stage],
                           timeout=limit)
        except subprocess.TimeoutExpired:
            print(f"{stage}: killed after {limit:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
