"""GPU timing (notes/labs.md, lab 02 E): the Triton kernel against naive attention, SDPA's backends
and the contenders, in every pass.

At every point of two grids (`minimodel.gpu.grids`: the lab's (2, 4, N, 64), where the kernel is
also set against naive PyTorch, and FlashAttention's benchmark grid, batch·N = 16384,
heads = 2048/d), in every pass (`direction`: the forward; with `backward`, the config's, the
backward alone and forward + backward), every implementation (`minimodel.gpu.implementations`:
the kernel first, naive, SDPA's backends, then each contender in its child process) is prepared
once on the point's inputs and checked against float64, then sampled in interleaved rounds
(`minimodel.gpu.timing_point`). Per implementation:
- `ms`: GPU time per call, the median of `samples` samples; each sample is the median over
  replays of a CUDA graph of back-to-back calls (`minimodel.floor.timers.Sampler`), with no host time
  in it. The ratios between implementations are ratios of these; the samples themselves are
  the stage's long table (gpu/timing/samples.csv), which `compare` judges a rerun with.
- `eager_ms`: the median of `triton.testing.do_bench`, one Python call at a time with the L2
  cache flushed before each. Where a call's host work (argument checks, TMA descriptors, the
  launch) outlasts its GPU work, as on the lab grid's small sizes, this is host time; there
  `host_ms` is the host's own cost per call (the forward).

FLOPs: `byte_model.backward.attention_flops` (the backward 2.5 × the forward's, fwd+bwd 3.5 ×). The machine's
ceilings (a large fp16 matmul, a large device copy) are measured in the same run, after the GPU
has been under load long enough to hold its sustained clocks (`SUSTAIN_S`), so every number is
also a fraction of a ceiling of the same machine state. The rows are built and rated by
`minimodel.gpu.timing_rows`, and the kernel's ratios are taken within a pass.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import torch
import triton
from tqdm import tqdm

from minimodel.contenders import registry
from minimodel.contenders.run import Child, failure_line
from minimodel.contenders.timed import TimingCase
from minimodel.floor import contract, roofline_model
from minimodel.floor.timers import bench_ms
from minimodel.gpu import grids
from minimodel.gpu.implementations import implementations
from minimodel.gpu.timing_point import Clock, time_pass
from minimodel.gpu.timing_rows import add_ratios
from minimodel.kernel import default_config

log = logging.getLogger(__name__)


# Seconds of back-to-back matmuls before the ceilings are measured. A GPU that was idle runs its
# first seconds of load at boost clocks, faster than at the power limit it soon reaches, where
# every point of the grids runs: measured cold, the ceiling would belong to another machine state
# than the points set beside it (notes/kernel.md, "The matmul ceiling, cold and under load").
SUSTAIN_S = 15


def sustain(fn, seconds: float) -> None:
    """Run `fn` back to back for `seconds`: the GPU reaches the clocks it holds under load."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()


def gpu_ceilings(warmup_ms: float = 25, rep_ms: float = 200, sustain_s: float = SUSTAIN_S) -> dict:
    """fp16 matmul (8192³) FLOP/s and device-copy bytes/s (2 GiB; read + write), medians, after
    `sustain_s` seconds of matmuls (`SUSTAIN_S`: the clocks of a GPU under load)."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    sustain(lambda: a @ b, sustain_s)
    mm_ms = bench_ms(lambda: a @ b, warmup_ms, rep_ms)
    src = torch.randn(2**29, device="cuda")  # 2 GiB of fp32, far past the L2 (the H200's: 60 MiB)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src), warmup_ms, rep_ms)
    return {
        "peak_flops_per_s": 2 * n**3 / (mm_ms * 1e-3),
        "bandwidth_bytes_per_s": 2 * src.numel() * 4 / (copy_ms * 1e-3),
        "matmul": {"n": n, "dtype": "float16", "median_ms": mm_ms, "after_sustained_load_s": sustain_s},
        "copy": {"bytes": src.numel() * 4, "median_ms": copy_ms},
    }


def run(cfg: dict, random_seed: int, cpu_prediction: dict | None = None, progress=None,
        contenders=()) -> dict:
    """The whole timing stage on the CUDA device: ceilings, both grids in every pass, ratios,
    predictions; the samples behind every time under "samples".

    `contenders` (`minimodel.contenders.Contender`) are timed at every point too, each in a
    child process that lives for the whole stage.
    """
    clock = Clock()
    rows, samples = [], []
    # the contenders' processes start while the ceilings are measured (`starting`): a shard of the
    # stage pays the longer of the two, not both; no idle GPU between the ceilings and the points
    with starting(contenders) as start:
        with clock.on("ceilings"):
            ceilings = gpu_ceilings(cfg["warmup_ms"])
        with clock.on("contenders' processes started"):  # what their start took past the ceilings
            children = start.wait()
        impls = implementations(children)
        always = {impl.name: impl for impl in impls[:len(contract.IMPLEMENTATIONS)]}  # in each grid's order
        contenders_timed = impls[len(contract.IMPLEMENTATIONS):]
        for p, direction, case in tqdm(list(passes(cfg, random_seed)), desc="timing", file=progress):
            order = [always[name] for name in contract.IMPLEMENTATIONS_BY_GRID[p.grid]] + contenders_timed
            got, taken = time_pass(p, direction, order, case, cfg["samples"], ceilings, clock)
            rows += got
            samples += taken
    say_failures(children, rows, progress)
    add_ratios(rows)
    machine = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
               "triton": triton.__version__}
    # the device's L2, beside the config's assumed symbolic.l2_bytes (not a column: every row's)
    device_l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    for row in rows:
        row.update(machine)  # every row says where and with what it was measured
    predictions = []
    for p in lab_forward_points(cfg):
        block_m = default_config(torch.empty(p.B, p.H, p.N, p.d, device="cuda"), False).BLOCK_M
        predictions.append(roofline_model.predict_speedup(ceilings, p.N, p.d, block_m, block_m, "float16"))
    return {
        **machine,
        "directions": list(directions(cfg)),
        "device_l2_bytes": device_l2,
        "ceilings": ceilings,
        "lab_grid_predictions_from_gpu_ceilings": predictions,
        "lab01_prediction_from_cpu_ceilings": cpu_prediction,
        # where the stage's time went, most first: the reference, each implementation's
        # preparations and rounds (`timing_point.Clock`)
        "seconds": {what: round(s, 1) for what, s in clock.most_common()},
        "rows": rows,
        "samples": samples,
    }


directions = grids.directions


def passes(cfg: dict, random_seed: int):
    """(point, direction, TimingCase) of every pass the stage (or a shard of it) times, in the
    order it times them (`grids.passes`): the grids' points, each in every direction; a point's
    inputs are drawn from `random_seed` + its index. The lab grid's forward also reads the host's
    cost per call."""
    for each in grids.passes(cfg):
        p, direction = each.point, each.direction
        host_cost = p.grid == contract.LAB_GRID and direction == contract.FORWARD
        yield p, direction, TimingCase(p.B, p.H, p.N, p.d, p.causal, random_seed + each.index,
                                       cfg["warmup_ms"], cfg["rep_ms"], cfg["sample_ms"], host_cost,
                                       cfg["sample_warmup_ms"])


def lab_forward_points(cfg: dict) -> list[grids.Point]:
    """The lab grid's points, not causal, that the stage (or a shard) times forward: where the
    roofline's predictions are made."""
    return [each.point for each in grids.passes(cfg) if each.point.grid == contract.LAB_GRID
            and not each.point.causal and each.direction == contract.FORWARD]


@contextlib.contextmanager
def started(contenders, clock: Clock):
    """A child process (`Child`) for each of `contenders`, started (its module imported) and
    stopped at the end of the block."""
    children = [Child(c, registry.SEARCH) for c in contenders]
    try:
        with clock.on("contenders' processes started"):
            for child in children:
                child.start()
        yield children
    finally:
        for child in children:
            child.stop()


class Starting:
    """The contenders' child processes (`Child`) being started by a thread of their own, which
    lives as long as they may: a child dies with the thread that started it
    (`minimodel.floor.subprocesses.die_with_parent`). The children start one after another, their
    modules imported while this process goes on (the ceilings: GPU work, which the children's
    imports on the CPU leave alone)."""

    def __init__(self, contenders):
        self.children = [Child(c, registry.SEARCH) for c in contenders]
        self._ready, self._done = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._keeper = threading.Thread(target=self._keep, name="contenders", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        try:
            for child in self.children:
                child.start()
        except BaseException as err:  # raised in the stage's thread, by `wait`
            self._error = err
        finally:
            self._ready.set()
        self._done.wait()

    def wait(self) -> list:
        """The children, once each has started (its module imported) or failed to (its rows say why)."""
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self.children

    def stop(self) -> None:
        self._ready.wait()
        for child in self.children:
            child.stop()
        self._done.set()
        self._keeper.join()


@contextlib.contextmanager
def starting(contenders):
    """`Starting` the children of `contenders`, all stopped at the end of the block."""
    start = Starting(contenders)
    try:
        yield start
    finally:
        start.stop()


def say_failures(children, rows: list[dict], progress) -> None:
    """One line on the console (and in the log) for each contender with failed rows."""
    for child in children:
        mine = [r for r in rows if r["impl"] == child.contender.name]
        failed = [r["status"] for r in mine if str(r["status"]).startswith(contract.FAILED)]
        ran = sum(not str(r["status"]).startswith(contract.SKIPPED) for r in mine)
        line = failure_line(child.contender.name, failed, ran, child.log)
        if line:
            print(line, file=progress)
