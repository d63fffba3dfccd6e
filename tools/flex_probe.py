"""FlexAttention's call at one point in several fresh processes: its time and the kernels its CUDA
graph launches in each, to tell whether a time that differs between runs (the lab grid's
(2, 4, 64, 64) forward: 13.3 µs in one H200 run, 11.2 in the next, notes/timing.md) is two programs
or one program at two speeds.

    PYTHONPATH=src:tools python3 tools/flex_probe.py --out DIR [--processes 3] [--n 64] [--causal]

Each process: the built-in `flex` contender's call (`minimodel.contenders.builtin.flex`, what the
stages time) on fp16 inputs drawn from one seed, sampled as the timing stage samples it
(`floor.timers.Sampler`, 10 samples of 20 ms after 40 ms of warm-up), then one replay under
`torch.profiler`: each CUDA kernel's name and time. Writes flex_probe.jsonl (a line a process).
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders.builtin import flex
from minimodel.floor.timers import Sampler


def one(n: int, causal: bool) -> dict:
    """flex's call at (2, 4, n, 64) in this process: its samples and one replay's kernels."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, n, 64, generator=gen).to("cuda", torch.float16) for _ in "qkv")
    sampler = Sampler(lambda: (lambda: flex(q, k, v, causal=causal)), sample_ms=20)
    samples = [sampler.sample(40) * 1e3 for _ in range(10)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        sampler.graph.replay()
        torch.cuda.synchronize()
    kernels = [{"name": e.name[:120], "us": e.device_time} for e in prof.events()
               if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"N": n, "causal": causal, "calls_per_replay": sampler.calls,
            "median_us": statistics.median(samples), "samples_us": samples,
            "kernels_in_one_replay": len(kernels),
            "kernel_names": sorted({x["name"] for x in kernels}), "torch": torch.__version__}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(one(args.n, args.causal)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "flex_probe.jsonl", "w") as f:
        for i in range(args.processes):
            cmd = [sys.executable, __file__, "--child", "--n", str(args.n),
                   *(["--causal"] if args.causal else [])]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            line = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else json.dumps(
                {"error": done.stderr.strip()[-500:]})
            f.write(line + "\n")
            print(f"process {i}: {line[:300]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
