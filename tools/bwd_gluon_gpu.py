"""The Gluon dK/dV kernel on an H200, in one run: checked, then timed beside the tl backward and SDPA.

    PYTHONPATH=src python tools/bwd_gluon_gpu.py --out DIR [--commit SHA]

1. check (one child process per configuration, each with a time limit, so that a kernel that
   hangs costs its own limit and no more; the children compile at once, in parallel): every sweep
   case (B = 2, H = 4; fp16, bf16; d = 64, 128; N = 128, 1000, 4096; causal and not; H_kv = 4 and
   1) through `flash_attn_backward` with the configuration forced, against float64 autograd under
   the project's rule (`correctness_rule`), the path that ran asserted (`launch_bwd_config`); the
   Gluon configurations also at B·H past 65,535, rows past 2³¹ elements, a transposed layout, a
   given sm_scale, and twice on one input, bit for bit. The tl table is checked the same way.
2. time (one child): FlashAttention's grid (B·N = 16384, H·d = 2048; N = 1024, 4096, 16384;
   d = 64, 128; causal and not), fp16, the backward alone (O and LSE saved), medians of CUDA-graph
   replays of: the tl backward, each Gluon configuration that passed every case, SDPA's cuDNN and
   flash backward through autograd; and the dK/dV launch alone, tl's and each Gluon one's.
Writes checks.jsonl (every case's row) and timing.jsonl under --out; prints the table last. Needs
no snakemake, config or other stage: a development tool, as tools/bwd_bench.py.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
import zlib
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor.correctness_rule import failure_reason, grad_errors, reference_grads
from minimodel.kernel import backward
from minimodel.kernel.bwd_config import HOPPER_CONFIGS, tl_bwd_config
from minimodel.kernel.flash import flash_attn_forward

# name -> (head dim, BLOCK_M1, BLOCK_N1, Q/dO stages, causal cases it compiles for without spilling)
BOTH = (False, True)
GLUON = {"g64_m64_n128_s2": (64, 64, 128, 2, BOTH), "g64_m64_n64_s2": (64, 64, 64, 2, BOTH),
         "g128_m32_n128_s2": (128, 32, 128, 2, BOTH), "g128_m32_n64_s2": (128, 32, 64, 2, BOTH),
         "g128_m64_n128_s2": (128, 64, 128, 2, (False,))}
SWEEP = [(dtype, d, n, causal, h_kv) for dtype in ("float16", "bfloat16") for d in (64, 128)
         for n in (128, 1000, 4096) for causal in (False, True) for h_kv in (4, 1)]
FA_N, FA_TOKENS, FA_MODEL_DIM = (1024, 4096, 16384), 16384, 2048


def gluon_config(name: str, causal: bool):
    d, m, n, stages, _ = GLUON[name]
    return replace(HOPPER_CONFIGS[(d, causal)], BLOCK_M1=m, BLOCK_N1=n, num_warps_kv=n // 16,
                   num_stages_kv=stages, GLUON=True)


def config_of(name: str, d: int, causal: bool):
    return tl_bwd_config(d, causal, "cuda") if name == "tl" else gluon_config(name, causal)


def applies(name: str, d: int, causal: bool) -> bool:
    return name == "tl" or (GLUON[name][0] == d and causal in GLUON[name][4])


def inputs(B, H, N, d, dtype, H_kv, seed, layout="contiguous"):
    gen = torch.Generator().manual_seed(seed)

    def rand(heads):
        if layout == "bnhd":
            return torch.randn(B, N, heads, d, generator=gen).to("cuda", dtype).transpose(1, 2)
        return torch.randn(B, heads, N, d, generator=gen).to("cuda", dtype)

    return rand(H), rand(H_kv), rand(H_kv), rand(H)


def check_case(cfg, q, k, v, do, causal, sm_scale=None) -> dict:
    """One case against float64 under the project's rule; `path` is what ran."""
    ran = backward.launch_bwd_config(q, k, v, causal, cfg, do)
    exact = reference_grads(q, k, v, do, causal, sm_scale, upcast=True)
    lowp = reference_grads(q, k, v, do, causal, sm_scale)
    o, lse = flash_attn_forward(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    got = backward.flash_attn_backward(q, k, v, o, lse, do, causal, sm_scale, cfg)
    row = grad_errors(got, exact, lowp)
    return {"path": ran.path, **row, "reason": failure_reason(row)}


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


def extra_cases(name: str):
    """(label, causal, q, k, v, do, sm_scale) of the guarantees beyond the sweep, at this config's d."""
    d = GLUON[name][0]
    for causal in GLUON[name][4]:
        yield "B*H=66000", causal, *inputs(2, 33_000, 24, d, torch.float16, 33_000, 1), None
        yield "B*H=66000 GQA", causal, *inputs(2, 33_000, 24, d, torch.float16, 3_000, 2), None
        yield "rows past 2^31", causal, *far_apart(130, d, 2**25 + 64, 3), None
        yield "bnhd", causal, *inputs(2, 2, 300, d, torch.float16, 2, 4, "bnhd"), None
        yield "sm_scale 0.3", causal, *inputs(1, 2, 333, d, torch.float16, 1, 5), 0.3
        yield "N=1", causal, *inputs(1, 2, 1, d, torch.float16, 2, 8), None
        yield "N=77 bf16 GQA", causal, *inputs(1, 4, 77, d, torch.bfloat16, 2, 9), None


def run_check(name: str, out: Path) -> int:
    failed = 0
    with open(out / f"check_{name}.jsonl", "w") as f:
        def record(case: dict, row: dict, expect: str):
            nonlocal failed
            ok = row["passed"] and row["path"] == expect
            failed += not ok
            f.write(json.dumps({"config": name, **case, **row, "ok": ok}) + "\n")
            f.flush()
            errs = " ".join(f"{g} {row[f'err_{g}_kernel_vs_fp64']:.2e}/{row[f'tolerance_{g}']:.2e}"
                            for g in ("dq", "dk", "dv"))
            print(f"{'ok  ' if ok else 'FAIL'} {name} {case} path={row['path']} {errs} {row['reason']}",
                  flush=True)

        expect = "tl" if name == "tl" else "gluon"
        for dtype, d, n, causal, h_kv in SWEEP:
            if not applies(name, d, causal):
                continue
            case = {"dtype": dtype, "d": d, "N": n, "causal": causal, "H_kv": h_kv}
            seed = zlib.crc32(json.dumps(case).encode())
            q, k, v, do = inputs(2, 4, n, d, getattr(torch, dtype), h_kv, seed)
            record(case, check_case(config_of(name, d, causal), q, k, v, do, causal), expect)
        if name == "tl":
            return failed
        for label, causal, q, k, v, do, scale in extra_cases(name):
            record({"case": label, "causal": causal}, check_case(gluon_config(name, causal), q, k, v, do,
                                                                 causal, scale), expect)
            del q, k, v, do
        for causal in GLUON[name][4]:  # deterministic: the same bits twice
            q, k, v, do = inputs(2, 4, 1000, GLUON[name][0], torch.float16, 1, 6)
            o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
            cfg = gluon_config(name, causal)
            first, second = (backward.flash_attn_backward(q, k, v, o, lse, do, causal, None, cfg)
                             for _ in range(2))
            same = all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
            failed += not same
            print(f"{'ok  ' if same else 'FAIL'} {name} deterministic causal={causal}", flush=True)
    return failed


def graph_ms(make, rep_ms: float = 60.0) -> float:
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
        graph.replay()
        stream.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        times = []
        for _ in range(max(5, min(200, int(rep_ms / max(start.elapsed_time(end), 1e-3))))):
            start.record(stream)
            graph.replay()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    del graph
    return statistics.median(times)


def sdpa_backward(q, k, v, do, causal, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel  # not at the top: only the timing child needs it

    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(getattr(SDPBackend, backend)):
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def dkdv_alone(q, k, v, do, causal, cfg):
    """The dK/dV launch alone (after one preprocess), as `flash_attn_backward` launches it."""
    o, lse = flash_attn_forward(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(q.shape[:3], dtype=torch.float32, device="cuda")
    launches = backward.arguments(q, k, v, o, lse, do, dq, dk, dv, delta, q.shape[-1] ** -0.5, cfg, causal)
    (pk, pg, pa, po), (kernel, grid, args, options) = launches[:2]
    pk[pg](**pa, **po)
    return lambda: kernel[grid](**args, **options)


def time_point(d: int, n: int, causal: bool, names: list[str]) -> dict:
    """One point of FlashAttention's grid: every contender's backward, and the dK/dV launches alone."""
    B, H = FA_TOKENS // n, FA_MODEL_DIM // d
    q, k, v, do = inputs(B, H, n, d, torch.float16, H, 7)
    row = {"d": d, "N": n, "causal": causal, "B": B, "H": H}
    for name in ["tl", *(x for x in names if applies(x, d, causal))]:
        cfg = config_of(name, d, causal)
        row[f"{name}_ms"] = graph_ms(partial(backward.backward_fn, q, k, v, causal, do=do, config=cfg))
        row[f"{name}_dkdv_ms"] = graph_ms(partial(dkdv_alone, q, k, v, do, causal, cfg))
    for backend in ("CUDNN_ATTENTION", "FLASH_ATTENTION"):
        try:
            row[f"{backend}_ms"] = graph_ms(partial(sdpa_backward, q, k, v, do, causal, backend))
        except Exception as e:
            print(f"{backend} at {row}: {str(e).splitlines()[0][:120]}", flush=True)
            row[f"{backend}_ms"] = math.nan
    row["tflops_tl"] = 2.5 * 4 * B * H * n * n * d / (2 if causal else 1) / row["tl_ms"] / 1e9
    return row


def run_time(names: list[str], out: Path) -> None:
    with open(out / "timing.jsonl", "w") as f:
        for d in (64, 128):
            for n in FA_N:
                for causal in (False, True):
                    row = time_point(d, n, causal, names)
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    print(json.dumps(row), flush=True)
                    torch.cuda.empty_cache()


def table(out: Path) -> None:
    rows = [json.loads(line) for line in (out / "timing.jsonl").read_text().splitlines()] \
        if (out / "timing.jsonl").exists() else []
    names = sorted({key[:-3] for r in rows for key in r if key.endswith("_ms") and "dkdv" not in key
                    and key[:-3] not in ("tl", "CUDNN_ATTENTION", "FLASH_ATTENTION")})
    print("\nbackward alone, CUDA-graph ms (cuDNN/x: cuDNN's time over x's; dkdv: the dK/dV launch alone)")
    print("d    N      causal  tl      cudnn   fa2     cuDNN/tl  best gluon            ms      cuDNN/g  "
          "tl dkdv  g dkdv")
    for r in rows:
        found = [(r[f"{x}_ms"], x) for x in names if f"{x}_ms" in r]
        best_ms, best = min(found) if found else (math.nan, "-")
        print(f"{r['d']:<4} {r['N']:<6} {r['causal']!s:7} {r['tl_ms']:<7.3f} {r['CUDNN_ATTENTION_ms']:<7.3f} "
              f"{r['FLASH_ATTENTION_ms']:<7.3f} {r['CUDNN_ATTENTION_ms'] / r['tl_ms']:<9.3f} {best:21s} "
              f"{best_ms:<7.3f} {r['CUDNN_ATTENTION_ms'] / best_ms:<8.3f} {r['tl_dkdv_ms']:<8.3f} "
              f"{r.get(f'{best}_dkdv_ms', math.nan):.3f}")
    for x in ["tl", *names]:
        ratios = [r["CUDNN_ATTENTION_ms"] / r[f"{x}_ms"] for r in rows if f"{x}_ms" in r]
        if ratios and all(z > 0 for z in ratios):
            print(f"geomean cuDNN/{x} over {len(ratios)} points: "
                  f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", choices=("all", "check", "time"), default="all")
    parser.add_argument("--config", action="append", help="with --stage check: tl or a GLUON name")
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--check-limit-s", type=float, default=120.0)
    parser.add_argument("--time-limit-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.stage == "check":
        return min(run_check(args.config[0], args.out), 1)
    if args.stage == "time":
        run_time(args.config or [], args.out)
        return 0
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} commit {args.commit}", flush=True)
    me = [sys.executable, __file__, "--out", str(args.out)]
    started = time.time()
    children = {name: subprocess.Popen([*me, "--stage", "check", "--config", name])
                for name in ["tl", *GLUON]}
    passed = []
    for name, child in children.items():
        try:
            status = child.wait(timeout=max(1.0, args.check_limit_s - (time.time() - started)))
        except subprocess.TimeoutExpired:
            child.kill()
            status = "timed out"
        print(f"check {name}: {'passed every case' if status == 0 else f'FAILED ({status})'}", flush=True)
        if status == 0 and name != "tl":
            passed.append(name)
    print(f"checks took {time.time() - started:.0f} s; timing {passed}", flush=True)
    with open(args.out / "checks.jsonl", "w") as merged:  # one file: few come back from a device run
        for name in children:
            part = args.out / f"check_{name}.jsonl"
            if part.exists():
                merged.write(part.read_text())
                part.unlink()
    timing = subprocess.Popen([*me, "--stage", "time", *(a for x in passed for a in ("--config", x))])
    try:
        timing.wait(timeout=args.time_limit_s)
    except subprocess.TimeoutExpired:
        timing.kill()
        print("timing: stopped at its limit; the table holds the points it finished", flush=True)
    table(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
