"""The warp-specialized Gluon backward on an H200 in one short call: which variant of the kernel
runs, then the kernel as committed on tools/bwd_gluon_gpu.py's check list, then timing if time is left.

    PYTHONPATH=src python3 tools/bwd_ws_bisect.py --out DIR [--budget-s 110]

1. bisect: a child per variant (`VARIANTS`), all started at once, so their compiles run in
   parallel; each compiles its three launches (Triton's `warmup`), then runs them alone on the GPU
   (a lock file: one variant's fault or hang never shares the GPU with another's run) on one tiny
   case (B = 1, H = 2, fp16, not causal; O and LSE from torch, so no forward kernel), and checks
   dQ, dK, dV against float64 under the project's rule. Each variant switches one suspect: LSE and
   D by 1-D TMA (`ROWS_TMA`, the first design) at an aligned and an unaligned N, the register split
   (no move: every warpgroup at the launch's 168), dQ in the kernel or not, each head dim.
   A child that prints nothing for --stall-s once its run has started is a hang: killed.
2. check: tools/bwd_gluon_gpu.py's 40 checks of each path (ws64, ws128, wsdq64, wsdq128), a child
   per path, a fresh child after a case that breaks the CUDA context, within what the budget leaves.
3. time: if --time-min-s is left, tools/bwd_gluon_gpu.py's timing of the paths that passed (first),
   tl, g1 and cuDNN; the rows written so far are kept if the budget ends it.
Writes bisect.jsonl, checks.jsonl, timing.jsonl under --out; the bisect table prints last.
"""

import argparse
import fcntl
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import bwd_gluon_gpu as gpu
import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.correctness_rule import failure_reason, grad_errors, reference_grads
from minimodel.kernel import backward, gluon_bwd_ws
from minimodel.kernel.bwd_config import gluon_ws_config

DEVICE = "cuda"  # "cpu": a dry run of the launches' arguments, without a GPU


@dataclass(frozen=True)
class Variant:
    d: int
    atomic_dq: bool
    n: int
    rows_tma: bool = False  # LSE and D by 1-D TMA (the first design), else the producer's loads
    worker_regs: int | None = None  # the MMA warpgroups' registers (None: MMA_REGS, 240)
    expect: str = contract.OK  # what the diagnosis predicts


# N = 77: row coordinates (b·H + h)·N + start_m not multiples of 4 (16 bytes of float32) for h = 1
VARIANTS = {
    "ws64 N=77": Variant(64, False, 77),
    "ws128 N=77": Variant(128, False, 77),
    "wsdq64 N=77": Variant(64, True, 77),
    "wsdq128 N=77": Variant(128, True, 77),
    "ws64 N=1": Variant(64, False, 1),  # the case that failed first at bb5c731
    "ws64 N=77 regs 168 (no split)": Variant(64, False, 77, worker_regs=168),
    "tma-rows ws64 N=128 (aligned)": Variant(64, False, 128, rows_tma=True),
    "tma-rows ws128 N=128 (aligned)": Variant(128, False, 128, rows_tma=True),
    "tma-rows ws64 N=77 (unaligned)": Variant(64, False, 77, rows_tma=True, expect="illegal instruction"),
}


def torch_forward(q, k, v, scale: float):
    """O (q's dtype) and the natural-log LSE (float32, contiguous) of non-causal attention, by torch."""
    group = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(group, 1).float() for t in (k, v))
    s = q.float() @ kk.transpose(-1, -2) * scale
    return (torch.softmax(s, -1) @ vv).to(q.dtype), torch.logsumexp(s, -1).contiguous()


def variant_launches(var: Variant, q, k, v, o, lse, do, scale: float):
    """The three launches (preprocess, dK/dV variant, dQ pass) or two (atomic dQ), and (dq, dk, dv)."""
    cfg = gluon_ws_config(var.d, False, var.atomic_dq)
    dq = torch.zeros(q.shape, dtype=torch.float32 if var.atomic_dq else q.dtype, device=DEVICE)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:3], dtype=torch.float32, device=DEVICE)
    launches = backward.arguments(q, k, v, o, lse, do, dq, dk, dv, delta, scale, cfg, False)
    kernel, grid, args, options = gluon_bwd_ws.dkdv_launch(q, k, v, do, dq, dk, dv, lse, delta, scale, cfg,
                                                           False, worker_regs=var.worker_regs)
    if var.rows_tma:  # past `rows_tma_ok` on purpose: the unaligned variant must reach the GPU
        args.update(lse=gluon_bwd_ws._rows_descriptor(lse, cfg.BLOCK_M1),
                    delta=gluon_bwd_ws._rows_descriptor(delta, cfg.BLOCK_M1), ROWS_TMA=True)
    launches[1] = (kernel, grid, args, options)
    return launches, (dq, dk, dv)


def run_variant(name: str, out: Path, lock_wait_s: float) -> int:
    """One variant, in this (child) process: writes bisect_<index>.json."""
    var = VARIANTS[name]
    row = {"variant": name, **asdict(var)}
    path = out / f"bisect_{list(VARIANTS).index(name)}.json"
    beat = threading.Event()

    def heartbeat():  # the parent kills a child silent for --stall-s: compiling is not silence
        while not beat.wait(5):
            print("compiling", flush=True)

    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        gen = torch.Generator().manual_seed(39)
        q, k, v, do = (torch.randn(1, 2, var.n, var.d, generator=gen).to(DEVICE, torch.float16)
                       for _ in range(4))
        scale = var.d ** -0.5
        o, lse = torch_forward(q, k, v, scale)
        launches, grads = variant_launches(var, q, k, v, o, lse, do, scale)
        exact, lowp = reference_grads(q, k, v, do, False, upcast=True), reference_grads(q, k, v, do, False)
        torch.cuda.synchronize()
        started = time.time()
        for kernel, grid, args, options in launches:
            try:
                kernel.warmup(grid=grid, **args, **options)
            except Exception as err:  # then it compiles in the run, under the lock
                row["warmup"] = f"{type(err).__name__}: {str(err)[-200:]}"
        row["compile_s"] = round(time.time() - started, 1)
    except Exception as err:
        row.update(result="error before the run", reason=f"{type(err).__name__}: {str(err).strip()[-300:]}")
        path.write_text(json.dumps(row))
        return 1
    finally:
        beat.set()
    with open(out / "gpu.lock", "w") as lock:
        waited = last = time.time()
        while time.time() - waited < lock_wait_s:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.2)
            if time.time() - last > 5:  # waiting is not silence either
                print("waiting for the GPU", flush=True)
                last = time.time()
        else:
            row["lock"] = f"ran without the lock after {lock_wait_s:.0f} s"
        print("running", flush=True)
        started = time.time()
        try:
            for kernel, grid, args, options in launches:
                kernel[grid](**args, **options)
            torch.cuda.synchronize()
        except Exception as err:
            text = f"{type(err).__name__}: {str(err).strip()}"
            result = next((w for w in ("illegal instruction", "illegal memory access", "misaligned address")
                           if w in text), "error")
            row.update(result=result, reason=text[-300:], run_s=round(time.time() - started, 2))
            path.write_text(json.dumps(row))
            return 1
        row["run_s"] = round(time.time() - started, 2)
    dq, dk, dv = grads
    errors = grad_errors((dq.to(torch.float16) if var.atomic_dq else dq, dk, dv), exact, lowp)
    worst = errors["err_kernel_vs_fp64"] / errors["tolerance"]
    row.update(result=contract.OK if errors["passed"] else f"wrong by {worst:.3g}x the tolerance",
               reason=failure_reason(errors),
               errors={g: [errors[f"err_{g}_kernel_vs_fp64"], errors[f"tolerance_{g}"]]
                       for g in ("dq", "dk", "dv")})
    path.write_text(json.dumps(row))
    print(json.dumps(row), flush=True)
    return 0


def bisect(out: Path, names: list[str], limit_s: float, stall_s: float) -> list[dict]:
    """Every variant in its own child at once; their rows (a killed child's says why)."""
    wait = str(max(5.0, limit_s - 25))
    me = [sys.executable, __file__, "--out", str(out), "--child", "--lock-wait-s", wait]
    for i in range(len(VARIANTS)):
        (out / f"bisect_{i}.json").unlink(missing_ok=True)
    status = gpu.run_children({n: [*me, "--variant", n] for n in names}, limit_s, stall_s)
    rows = []
    for name in names:
        path = out / f"bisect_{list(VARIANTS).index(name)}.json"
        if path.exists():
            row = json.loads(path.read_text())
            path.unlink()
        else:  # killed: while compiling (heartbeats) or once running (a hang)
            row = {"variant": name, **asdict(VARIANTS[name]), "result": f"hang or crash: {status[name]}"}
        row["exit"] = status[name]
        rows.append(row)
    with open(out / "bisect.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def print_table(rows: list[dict]) -> None:
    print("\nbisect (B=1, H=2, fp16, not causal): variant: result [predicted] compile s, run s")
    for r in rows:
        mark = "" if r["result"] == r["expect"] else "  <-- not as predicted"
        print(f"  {r['variant']:34s} {r['result']:24s} [{r['expect']}] {r.get('compile_s', '-')} s, "
              f"{r.get('run_s', '-')} s{mark}")
        if r.get("reason") and r["result"] != contract.OK:
            print(f"      {r['reason'][-200:]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=110.0, help="the whole call, compiles included")
    parser.add_argument("--bisect-limit-s", type=float, default=55.0)
    parser.add_argument("--stall-s", type=float, default=20.0, help="a silent child is killed (a hang)")
    parser.add_argument("--time-min-s", type=float, default=25.0, help="time only if this much is left")
    parser.add_argument("--variant", action="append", choices=list(VARIANTS), help="default: every one")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one variant's child
    parser.add_argument("--lock-wait-s", type=float, default=30.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        return run_variant(args.variant[0], args.out, args.lock_wait_s)
    started = time.time()
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    rows = bisect(args.out, args.variant or list(VARIANTS), args.bisect_limit_s, args.stall_s)
    print_table(rows)
    left = args.budget_s - (time.time() - started)
    passed = []
    if not args.no_check and left > 20:
        (args.out / "checks.jsonl").unlink(missing_ok=True)
        passed = gpu.check_paths(list(gpu.PATHS), args.out, left - args.time_min_s - 5, 30.0)
    left = args.budget_s - (time.time() - started)
    if passed and left >= args.time_min_s:
        me = [sys.executable, gpu.__file__, "--out", str(args.out), "--stage", "time"]
        gpu.run_children({"time": [*me, *(a for x in passed for a in ("--path", x))]}, left - 3, 30.0)
        gpu.table(args.out)
    print(f"\ntook {time.time() - started:.0f} s of a {args.budget_s:.0f} s budget; paths that passed every "
          f"check they reached: {passed}")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
