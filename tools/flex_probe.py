"""FlexAttention's call at one point in several fresh processes: its time and the kernels its CUDA
graph launches in each, to tell whether a time that differs between runs (the lab grid's
(2, 4, 64, 64) forward: 13.3 µs in one H200 run, 11.2 in the next, notes/timing.md) is two programs
or one program at two speeds.

    PYTHONPATH=src:tools python3 tools/flex_probe.py --out DIR [--processes 3] [--n 64] [--causal]
                                                    [--no-pointwise-autotune]

Each process: the built-in `flex` contender's call (`minimodel.contenders.builtin.flex`, what the
stages time) on fp16 inputs drawn from one seed, sampled as the timing stage samples it
(`floor.timers.Sampler`, 10 samples of 20 ms after 40 ms of warm-up), then one replay under
`torch.profiler`: each CUDA kernel's name and time. Writes flex_probe.jsonl (a line a process).

Each process compiles with an Inductor cache of its own (TORCHINDUCTOR_CACHE_DIR, a fresh folder),
as on a fresh machine: Inductor benchmarks several configurations of its pointwise kernels at their
first run and keeps the winner in that cache (`torch._inductor.config.triton.autotune_pointwise`,
`autotune_local_cache`), so with one shared cache every process would repeat the first one's
choice. `--no-pointwise-autotune` turns that benchmarking off (one configuration each): if the two
speeds go with it, that is their cause.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders.builtin import flex
from minimodel.floor.timers import Sampler


def one(n: int, causal: bool, pointwise_autotune: bool) -> dict:
    """flex's call at (2, 4, n, 64) in this process: its samples and one replay's kernels."""
    torch._inductor.config.triton.autotune_pointwise = pointwise_autotune
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 64, generator=gen).to("cuda", torch.float16) for _ in "qkv")
    sampler = Sampler(lambda: (lambda: flex(q, k, v, causal=causal)), sample_ms=20)
    samples = [sampler.sample(40) * 1e3 for _ in range(10)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        sampler.graph.replay()
        torch.cuda.synchronize()
    per_call = {}  # kernel name -> (launches, µs) per call of flex, over the replay's calls
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            count, us = per_call.get(e.name[:120], (0, 0.0))
            per_call[e.name[:120]] = (count + 1 / sampler.calls, us + e.device_time / sampler.calls)
    return {"N": n, "causal": causal, "calls_per_replay": sampler.calls,
            "median_us": statistics.median(samples), "samples_us": samples,
            "kernels_per_call": {name: {"launches": round(c, 3), "us": round(us, 3)}
                                 for name, (c, us) in sorted(per_call.items())},
            "pointwise_autotune": pointwise_autotune, "torch": torch.__version__}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--no-pointwise-autotune", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one(args.n, args.causal, not args.no_pointwise_autotune)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "flex_probe.jsonl", "w") as f:
        for i in range(args.processes):
            cmd = [sys.executable, __file__, "--child", "--n", str(args.n),
                   *(["--causal"] if args.causal else []),
                   *(["--no-pointwise-autotune"] if args.no_pointwise_autotune else [])]
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
            line = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else json.dumps(
                {"error": done.stderr.strip()[-500:]})
            f.write(line + "\n")
            print(f"process {i}: {line[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
