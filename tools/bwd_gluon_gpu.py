"""The Gluon backward's new paths on an H200, in one call of a few minutes: checked, then timed.

    PYTHONPATH=src python3 tools/bwd_gluon_gpu.py --out DIR [--commit SHA]

The paths (`PATHS`): the warp-specialized dK/dV kernel (`gluon_ws_config`) with the tl dQ pass
(`ws64`, `ws128`, deterministic), with dQ added in the kernel by fp32 atomics (`wsdq64`,
`wsdq128`, no dQ pass, not deterministic) and by TMA reductions (`wstma64`, `wstma128`, likewise;
at d = 64 with 128 query rows, its Pᵀ and dSᵀ through shared memory; `wstma64m64` with 64), and
by TMA reductions in a fixed order (`wsord64`, `wsord128`, deterministic: `gluon_bwd_order`);
`g1` is step 1's one-partition kernel
(`gluon_bwd_config`), timed only, for comparison.

1. check: one child process per path, all at once (they compile in parallel), each case through
   `flash_attn_backward` with the path forced, against float64 autograd under the project's rule
   (`correctness_rule`), the kernel that ran asserted (`BwdConfig.kernel`). Smallest grids first
   (N = 1, 77, then the sweep's cases, B = 2, H = 4, fp16 and bf16, causal and not, H_kv = 4 and 1,
   by N = 128, 1000, 4096), then B·H past 65,535, rows past 2³¹ elements, a transposed layout, a
   given sm_scale, and twice on one input (the same bits required of the deterministic paths,
   reported for the atomic ones). A child that prints nothing for `--stall-s` (a hung kernel) or
   outlives `--check-limit-s` is killed; its cases so far stay in checks.jsonl. A kernel that
   fails to compile fails its cases, one line each. A case that breaks the child's CUDA context
   (an illegal instruction: every later call would fail too) is recorded, and a fresh child goes on
   from the next case (`check_restarting`).
2. time: one child, (4, 16, 4096, 128) and (4, 32, 4096, 64) (FlashAttention's grid at N = 4096),
   causal and not, fp16, the backward alone (O and LSE saved), medians of CUDA-graph replays: the
   tl backward, `g1`, each path that passed every case it reached with none failed, and SDPA's
   cuDNN backward through autograd; also each dK/dV launch alone.
Writes checks.jsonl and timing.jsonl under --out and prints the table last.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.correctness_rule import failure_reason, grad_errors, reference_grads
from minimodel.kernel import backward
from minimodel.kernel.bwd_config import gluon_bwd_config, gluon_ws_config, tl_bwd_config
from minimodel.kernel.flash import flash_attn_forward

# name -> (head dim, configuration per causal)
PATHS = {"ws64": (64, partial(gluon_ws_config, 64)), "ws128": (128, partial(gluon_ws_config, 128)),
         "wsdq64": (64, partial(gluon_ws_config, 64, atomic_dq=True)),
         "wsdq128": (128, partial(gluon_ws_config, 128, atomic_dq=True)),
         "wstma64": (64, partial(gluon_ws_config, 64, tma_dq=True)),
         "wstma128": (128, partial(gluon_ws_config, 128, tma_dq=True)),
         "wsord64": (64, partial(gluon_ws_config, 64, ordered_dq=True)),
         "wsord128": (128, partial(gluon_ws_config, 128, ordered_dq=True)),
         # 64 query rows at d = 64, the TMA path's tile before 128 rows (`Config.SMEM_OPERANDS`) fitted
         "wstma64m64": (64, lambda causal: replace(gluon_ws_config(64, causal, tma_dq=True), BLOCK_M1=64))}
TIMED_ONLY = {"g1": gluon_bwd_config}  # checked on the H200 before (notes/backward.md)
SWEEP = [(n, dtype, causal, h_kv) for n in (128, 1000, 4096) for dtype in ("float16", "bfloat16")
         for causal in (False, True) for h_kv in (4, 1)]
POINTS = [(4, 16, 4096, 128), (4, 32, 4096, 64)]


def config_of(name: str, d: int, causal: bool):
    if name == "tl":
        return tl_bwd_config(d, causal, "cuda")
    if name in TIMED_ONLY:
        return TIMED_ONLY[name](d, causal)
    return PATHS[name][1](causal)


def inputs(B, H, N, d, dtype, H_kv, seed, layout="contiguous"):
    gen = torch.Generator().manual_seed(seed)

    def rand(heads):
        if layout == "bnhd":
            return torch.randn(B, N, heads, d, generator=gen).to("cuda", dtype).transpose(1, 2)
        return torch.randn(B, heads, N, d, generator=gen).to("cuda", dtype)

    return rand(H), rand(H_kv), rand(H_kv), rand(H)


def far_apart(N, d, row_stride, seed):
    """Four (1, 1, N, d) fp16 views whose rows lie `row_stride` elements apart (past 2³¹)."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.empty(row_stride * (N - 1) + 4 * d, dtype=torch.float16, device="cuda")
    views = []
    for j in range(4):
        view = base.as_strided((1, 1, N, d), (0, 0, row_stride, 1), j * d)
        view.copy_(torch.randn(1, 1, N, d, generator=gen).half())
        views.append(view)
    return views


def cases(d: int):
    """(label, causal, make inputs, sm_scale), smallest grids first."""
    fp16, bf16 = torch.float16, torch.bfloat16
    for causal in (False, True):
        yield f"N=1 causal={causal}", causal, partial(inputs, 1, 2, 1, d, fp16, 2, 8), None
        yield f"N=77 bf16 GQA causal={causal}", causal, partial(inputs, 1, 4, 77, d, bf16, 2, 9), None
    for n, dtype, causal, h_kv in SWEEP:
        label = f"sweep N={n} {dtype} causal={causal} H_kv={h_kv}"
        seed = zlib.crc32(f"{d} {label}".encode())
        yield label, causal, partial(inputs, 2, 4, n, d, getattr(torch, dtype), h_kv, seed), None
    for causal in (False, True):
        yield f"B*H=66000 causal={causal}", causal, partial(inputs, 2, 33000, 24, d, fp16, 33000, 1), None
        yield f"B*H=66000 GQA causal={causal}", causal, partial(inputs, 2, 33000, 24, d, fp16, 3000, 2), None
        yield f"rows past 2^31 causal={causal}", causal, partial(far_apart, 130, d, 2**25 + 64, 3), None
        yield f"bnhd causal={causal}", causal, partial(inputs, 2, 2, 300, d, fp16, 2, 4, "bnhd"), None
        yield f"sm_scale 0.3 causal={causal}", causal, partial(inputs, 1, 2, 333, d, fp16, 1, 5), 0.3


def check_case(cfg, q, k, v, do, causal, sm_scale=None) -> dict:
    """One case against float64 under the project's rule; `kernel` is what ran."""
    ran = backward.launch_bwd_config(q, k, v, causal, cfg, do)
    exact = reference_grads(q, k, v, do, causal, sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, do, causal, sm_scale)
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    got = backward.flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, cfg)
    torch.cuda.synchronize()
    row = grad_errors(got, exact, lowp)
    return {"kernel": ran.kernel, **row, "reason": failure_reason(row)}


# what a CUDA error that poisons the process's context says: the child records the case and exits
# with STICKY, and the parent starts a fresh child from the next case
STICKY = 3
_STICKY_WORDS = ("illegal instruction", "illegal memory access", "misaligned address",
                 "unspecified launch failure", "an illegal", "device-side assert", "AcceleratorError")


def context_broken(err: Exception) -> bool:
    """Whether err left this process's CUDA context unusable (a sticky error): every later call fails."""
    if not any(w in f"{type(err).__name__}: {err}" for w in _STICKY_WORDS):
        return False
    try:
        torch.cuda.synchronize()
        (torch.ones(1, device="cuda") + 1).item()
    except Exception:  # whatever it says now, the context is broken
        return True
    return False


def deterministic_case(name: str, d: int, causal: bool) -> dict:
    """Twice on one input: the same bits required of the deterministic paths, reported for the atomic ones."""
    q, k, v, do = inputs(2, 4, 1000, d, torch.float16, 1, 6)
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    cfg = config_of(name, d, causal)
    first, second = (backward.flash_attn_backward(q, k, v, o, lse, do, causal, None, cfg) for _ in range(2))
    same = [torch.equal(a, b) for a, b in zip(first, second, strict=True)]
    return {"ok": all(same) or not cfg.deterministic, "reason": f"same bits dQ, dK, dV: {same}"}


def forced_case(name: str, d: int, causal: bool, make, sm_scale) -> dict:
    cfg = config_of(name, d, causal)
    q, k, v, do = make()
    row = check_case(cfg, q, k, v, do, causal, sm_scale)
    row["errors"] = " ".join(f"{g} {row[f'err_{g}_kernel_vs_fp64']:.2e}/{row[f'tolerance_{g}']:.2e}"
                             for g in ("dq", "dk", "dv"))
    row["ok"] = row["passed"] and row["kernel"] == cfg.kernel
    return row


def check_list(name: str) -> list:
    """(label, call returning the row) of every check of path `name`, in order: `cases`, then twice
    on one input."""
    d, _ = PATHS[name]
    found = [(label, partial(forced_case, name, d, causal, make, sm_scale))
             for label, causal, make, sm_scale in cases(d)]
    twice = [(f"deterministic causal={c}", partial(deterministic_case, name, d, c)) for c in (False, True)]
    return found + twice


def run_check(name: str, out: Path, start: int = 0) -> int:
    """The checks of `name` from index `start` on, each a line of check_{name}.jsonl (appended).
    Exit status: 0 all ok, 1 some failed, STICKY when a case broke the CUDA context (its row says
    which; the parent goes on from the next one in a fresh child)."""
    failed = 0
    with open(out / f"check_{name}.jsonl", "a") as f:
        def record(row: dict):
            f.write(json.dumps({"path": name, **row}) + "\n")
            f.flush()
            print(f"{'ok  ' if row['ok'] else 'FAIL'} {name} #{row['index']} {row['case']} "
                  f"{row.get('kernel', '')} {row.get('errors', '')} {row.get('reason', '')}", flush=True)

        for i, (label, call) in enumerate(check_list(name)):
            if i < start:
                continue
            try:
                row = call()
            except Exception as err:  # a compile or launch error: this case fails, the next one runs
                row = {"ok": False, "reason": f"{type(err).__name__}: {str(err).strip()[-300:]}"}
                if context_broken(err):
                    record({"case": label, "index": i, **row, "sticky": True})
                    print(f"STICKY {i}", flush=True)
                    return STICKY
            failed += not row["ok"]
            record({"case": label, "index": i, **row})
    return min(failed, 1)


def check_restarting(name: str, me: list[str], limit_s: float, stall_s: float, log) -> str:
    """Path `name`'s checks in a child, a fresh child from the next case after each sticky CUDA
    error, until the list ends or limit_s (all children together) runs out."""
    started, start, restarts = time.time(), 0, 0
    while True:
        left = limit_s - (time.time() - started)
        if left <= 5:
            return f"out of time before case {start} ({restarts} restarts)"
        cmd = [*me, "--stage", "check", "--path", name, "--from-case", str(start)]
        status = watch(name, cmd, left, stall_s, log)
        if status != STICKY:
            return f"{status} ({restarts} restarts)" if restarts else status
        rows = read_rows(name, Path(me[me.index("--out") + 1]))
        start = max(r["index"] for r in rows) + 1
        restarts += 1
        if start >= len(check_list(name)):
            return f"{STICKY} ({restarts} restarts, the last case sticky)"


def read_rows(name: str, out: Path) -> list[dict]:
    part = out / f"check_{name}.jsonl"
    return [json.loads(line) for line in part.read_text().splitlines()] if part.exists() else []


def graph_ms(make, rep_ms: float = 50.0) -> float:
    """Median ms of one replay of a CUDA graph of `make()`'s call, built and captured on a side stream."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        call = make()
        call()
        call()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(5):
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
        for _ in range(max(5, min(100, int(rep_ms / max(min(times), 1e-3))))):
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times[5:])


def sdpa_backward(q, k, v, do, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel  # not at the top: only the timing child needs it

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def dkdv_alone(q, k, v, do, causal, cfg):
    """The dK/dV launch alone (after one preprocess), as `flash_attn_backward` launches it (with
    ATOMIC_DQ it also adds dQ, into an accumulator nobody zeroes between replays: timing only)."""
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    dq = torch.zeros(q.shape, dtype=torch.float32 if cfg.ATOMIC_DQ else q.dtype, device="cuda")
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:3], dtype=torch.float32, device="cuda")
    launches = backward.arguments(q, k, v, o, lse, do, dq, dk, dv, delta, q.shape[-1] ** -0.5, cfg, causal)
    (pk, pg, pa, po), (kernel, grid, args, options) = launches[:2]
    pk[pg](**pa, **po)
    return lambda: kernel[grid](**args, **options)


def run_time(names: list[str], out: Path) -> None:
    with open(out / "timing.jsonl", "w") as f:
        for B, H, n, d in POINTS:
            for causal in (False, True):
                q, k, v, do = inputs(B, H, n, d, torch.float16, H, 7)
                row = {"B": B, "H": H, "N": n, "d": d, "causal": causal}
                # the new paths first: if the call's time runs out, theirs are the rows it keeps
                for name in [*(x for x in names if PATHS[x][0] == d), "tl", *TIMED_ONLY]:
                    cfg = config_of(name, d, causal)
                    try:
                        row[f"{name}_ms"] = graph_ms(partial(backward.backward_fn, q, k, v, causal, do=do,
                                                             config=cfg))
                        row[f"{name}_dkdv_ms"] = graph_ms(partial(dkdv_alone, q, k, v, do, causal, cfg))
                    except Exception as err:
                        print(f"{name} at {row}: {type(err).__name__}: {str(err).strip()[-200:]}", flush=True)
                try:
                    row["cudnn_ms"] = graph_ms(partial(sdpa_backward, q, k, v, do, causal))
                except Exception as err:
                    print(f"cuDNN at {row}: {str(err).strip()[-200:]}", flush=True)
                f.write(json.dumps(row) + "\n")
                f.flush()
                print(json.dumps(row), flush=True)
                del q, k, v, do
                torch.cuda.empty_cache()


def table(out: Path) -> None:
    """The last lines: every path's ms and TFLOP/s (FlashAttention's convention, backward = 2.5 ×
    4·B·H·N²·d, halved when causal), and cuDNN's time over each."""
    path = out / "timing.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    names = ["tl", *TIMED_ONLY, *PATHS]
    print("\nbackward alone, CUDA-graph median ms (TFLOP/s) [cuDNN's time / this one's]; "
          "dK/dV launch alone ms")
    for r in rows:
        flops = 2.5 * 4 * r["B"] * r["H"] * r["N"] ** 2 * r["d"] / (2 if r["causal"] else 1)
        cudnn = r.get("cudnn_ms", math.nan)
        print(f"({r['B']}, {r['H']}, {r['N']}, {r['d']}) causal={r['causal']!s:5} cuDNN {cudnn:.3f} ms "
              f"({flops / cudnn / 1e9:.0f})")
        for x in names:
            if f"{x}_ms" in r:
                ms = r[f"{x}_ms"]
                print(f"    {x:8s} {ms:7.3f} ({flops / ms / 1e9:4.0f}) [{cudnn / ms:.3f}]  dkdv "
                      f"{r.get(f'{x}_dkdv_ms', math.nan):.3f}")


def watch(name: str, cmd: list[str], limit_s: float, stall_s: float, log) -> int | str:
    """Run a child, echo its lines; kill it past limit_s, or after stall_s without a line."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    last = [time.time()]

    def pump():
        for line in child.stdout:
            last[0] = time.time()
            log(f"[{name}] {line.rstrip()}")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    started = time.time()
    while child.poll() is None:
        now = time.time()
        if now - started > limit_s or now - last[0] > stall_s:
            child.kill()
            child.wait()
            why = "limit" if now - started > limit_s else "no output"
            return f"killed after {now - started:.0f} s ({why})"
        time.sleep(0.5)
    reader.join(timeout=5)
    return child.returncode


def run_children(specs: dict, limit_s: float, stall_s: float, run=None) -> dict:
    """Every child at once, each watched: {name: exit status or why it was killed}. run(name, spec,
    limit_s, stall_s, log) runs one (default: `watch` of the command `spec`)."""
    lock = threading.Lock()

    def log(line):
        with lock:
            print(line, flush=True)

    results = {}
    run = run or watch

    def one(name, spec):
        results[name] = run(name, spec, limit_s, stall_s, log)

    threads = [threading.Thread(target=one, args=item) for item in specs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def check_paths(names: list[str], out: Path, limit_s: float, stall_s: float) -> list[str]:
    """Every path's checks at once (a child per path, restarted after a sticky CUDA error); writes
    checks.jsonl; returns the paths that passed every case they reached with none failed."""
    me = [sys.executable, __file__, "--out", str(out)]
    for name in names:
        (out / f"check_{name}.jsonl").unlink(missing_ok=True)
    started = time.time()
    status = run_children({n: me for n in names}, limit_s, stall_s, run=check_restarting)
    passed = []
    with open(out / "checks.jsonl", "a") as merged:  # one file: few come back from a device run
        for name in names:
            rows = read_rows(name, out)
            merged.writelines(json.dumps(r) + "\n" for r in rows)
            (out / f"check_{name}.jsonl").unlink(missing_ok=True)
            bad = sum(not r["ok"] for r in rows)
            print(f"check {name}: {len(rows) - bad} of {len(rows)} cases ok "
                  f"(of {len(check_list(name))}), exit {status[name]}", flush=True)
            if rows and not bad:
                passed.append(name)
    print(f"checks took {time.time() - started:.0f} s", flush=True)
    return passed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", choices=("all", "check", "time"), default="all")
    parser.add_argument("--path", action="append", choices=sorted(PATHS), help="default: every one")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--check-limit-s", type=float, default=120.0)
    parser.add_argument("--time-limit-s", type=float, default=75.0)
    parser.add_argument("--stall-s", type=float, default=45.0, help="a child silent this long is killed")
    parser.add_argument("--from-case", type=int, default=0, help=argparse.SUPPRESS)  # a restarted check child
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.path or list(PATHS)
    if args.stage == "check":
        return run_check(names[0], args.out, args.from_case)
    if args.stage == "time":
        run_time(names if args.path else [], args.out)
        return 0
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} commit {args.commit}", flush=True)
    (args.out / "checks.jsonl").unlink(missing_ok=True)
    passed = check_paths(names, args.out, args.check_limit_s, args.stall_s)
    print(f"timing tl, g1, {passed}", flush=True)
    me = [sys.executable, __file__, "--out", str(args.out)]
    run_children({"time": [*me, "--stage", "time", *(a for x in passed for a in ("--path", x))]},
                 args.time_limit_s, args.stall_s)
    table(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
