"""Whether a process compiling FlexAttention moves the samples that the timing stage takes meanwhile,
on a CUDA device: the first of two questions before flex's compiles go into a helper process beside
the stage (notes/timing.md, "Where flex's 125 s go"). The kernel is sampled as the stage samples it
(`Sampler`: the config's sample_ms and warm-up, CUDA-graph replays) at three points, one round of
the three after another: rounds before, rounds while `tools/flex_compile_probe.py` compiles flex
over the timing grids in a process of its own (with the Inductor and Triton caches given), and
rounds after. Nothing of the workflow is written: a development tool.
    python tools/flex_helper_probe.py --cache DIR [--rounds 30] [--json FILE]
DIR/inductor and DIR/triton are the helper's caches (empty for a cold compile); the second question,
whether a process finding them warm runs the same kernels, is `flex_compile_probe.py --digest` run
with them and with empty ones."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import builtin, timed
from minimodel.contenders.timed import TimingCase
from minimodel.floor import contract
from minimodel.floor.timers import Sampler
from minimodel.gpu import grids

# (name, B, H, N, d, direction): a large forward and backward of FlashAttention's grid, and the lab
# grid's smallest forward, whose 3 us calls feel the host most
POINTS = [("fa forward (4, 16, 4096, 128)", 4, 16, 4096, 128, contract.FORWARD),
          ("fa backward (2, 16, 8192, 64)", 2, 16, 8192, 64, contract.BACKWARD),
          ("lab forward (2, 4, 64, 64)", 2, 4, 64, 64, contract.FORWARD)]


def sampler(i, B, H, N, d, direction, cfg) -> Sampler:
    """The kernel's call at a point as the stage builds a contender's (`timed.maker`), prepared."""
    case = TimingCase(B, H, N, d, False, i, cfg["warmup_ms"], cfg["rep_ms"], cfg["sample_ms"])
    make, _, _ = timed.maker(builtin.triton, case, direction)
    return Sampler(make, case.sample_ms)


def summary(rows: list[dict]) -> list[dict]:
    """Per point and phase: the median sample, its spread (max/min - 1), and the median's change
    against the phase before the helper."""
    out = []
    for name, *_ in POINTS:
        before = None
        for phase in ("before", "during", "after"):
            ms = [r["ms"] for r in rows if r["point"] == name and r["phase"] == phase]
            if not ms:
                continue
            median = statistics.median(ms)
            before = before or median
            out.append({"point": name, "phase": phase, "samples": len(ms), "median_ms": round(median, 5),
                        "spread": round(max(ms) / min(ms) - 1, 4), "change": round(median / before - 1, 4)})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True, help="the helper's cache folder (inductor/, triton/)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds before, and after, the helper")
    parser.add_argument("--json", help="write the samples and the summary here")
    args = parser.parse_args(argv)
    cfg = grids.default_timing_config()
    samplers = {name: sampler(i, *shape, cfg) for i, (name, *shape) in enumerate(POINTS)}
    rows, begun = [], time.perf_counter()

    def one_round(phase):
        for name, s in samplers.items():
            rows.append({"t": round(time.perf_counter() - begun, 3), "phase": phase, "point": name,
                         "ms": s.sample(cfg["sample_warmup_ms"])})

    for _ in range(args.rounds):
        one_round("before")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
           "TRITON_CACHE_DIR": str(cache / "triton")}
    started = time.perf_counter()
    with (cache / "helper.log").open("w") as helper_log:
        helper = subprocess.Popen([sys.executable, str(Path(__file__).with_name("flex_compile_probe.py"))],
                                  env=env, stdout=helper_log, stderr=subprocess.STDOUT)
        while helper.poll() is None:
            one_round("during")
    helper_s = time.perf_counter() - started
    for _ in range(args.rounds):
        one_round("after")
    result = {"helper_rc": helper.returncode, "helper_s": round(helper_s, 1), "summary": summary(rows),
              "rows": rows}
    for line in result["summary"]:
        print(json.dumps(line), flush=True)
    print(f"helper: exit {helper.returncode}, {helper_s:.1f} s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if helper.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
