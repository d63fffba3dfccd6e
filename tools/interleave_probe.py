"""How much an interleaved sample carries of the implementation sampled before it (H200 only).

The timing stage samples every implementation at a point in shuffled rounds, each sample after
`sample_warmup_ms` of untimed replays of its own call (`minimodel.gpu.timing_point`). On a GPU at
its power limit the clocks follow the last tens of ms of work, so a short sample taken right
after another implementation runs partly at that one's clocks. This tool measures it at one point
of FlashAttention's grid, for the implementations always timed (forward and backward alone):
- `alone`: each implementation after a second of its own work, then its samples back to back;
- `w<ms>`: shuffled rounds, each sample after <ms> of its own replays (the stage's way).
Each row gives every implementation's median over the rounds, and the kernel's ratios: the warm-up
at which the interleaved ratios match `alone` is the one the stage needs.

    python tools/interleave_probe.py --n 4096 --d 128 --warmups 0 10 20 40 80
"""

from __future__ import annotations

import argparse
import random
import statistics

import torch

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders.timed import TimingCase, timing_inputs
from minimodel.floor import contract
from minimodel.floor.provenance import configcheck
from minimodel.gpu import grids
from minimodel.gpu.implementations import Local

NAMES = (contract.TRITON, contract.SDPA_CUDNN, contract.SDPA_FLASH)


def prepare(point, sample_ms: float) -> dict:
    """name -> Prepared, for every implementation always timed but naive, forward and backward."""
    prepared = {}
    for direction in (contract.FORWARD, contract.BACKWARD):
        case = TimingCase(point.B, point.H, point.N, point.d, point.causal, 0, 5, 5, sample_ms)
        inputs = timing_inputs(case, 3 if direction == contract.FORWARD else 4)
        for name in NAMES:
            prepared[f"{name} {direction}"] = Local(name).prepare(case, direction, inputs)
    return prepared


def medians(prepared: dict, warmup_ms: float | None, rounds: int) -> dict:
    """name -> median sample: `alone` (warmup_ms None) or in shuffled rounds after `warmup_ms`."""
    taken = {name: [] for name in prepared}
    if warmup_ms is None:
        for name, ready in prepared.items():
            ready.sample.func(1000.0)  # a second of its own work: its clocks, settled
            taken[name] = [ready.sample.func(0.0) for _ in range(rounds)]
    else:
        order = list(prepared)
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                taken[name].append(prepared[name].sample.func(warmup_ms))
    return {name: statistics.median(values) for name, values in taken.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--sample-ms", type=float, default=None, help="default: the config's sample_ms")
    parser.add_argument("--warmups", type=float, nargs="+", default=[0, 10, 20, 40, 80])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    cfg = configcheck.load_config()["gpu"]["timing"]
    point = grids.Point(contract.FLASHATTENTION_GRID, *grids.flashattention_shape(args.n, args.d, cfg),
                        args.causal)
    prepared = prepare(point, args.sample_ms or cfg["sample_ms"])
    kernel = {d: f"{contract.TRITON} {d}" for d in (contract.FORWARD, contract.BACKWARD)}
    print(f"{point}; medians in ms; ratio = other / kernel, same pass")
    for mode in [None, *args.warmups, None]:
        got = medians(prepared, mode, args.rounds)
        ratios = {name: got[name] / got[kernel[name.split()[1]]] for name in got
                  if name not in kernel.values()}
        print(f"{'alone' if mode is None else f'w{mode:g}':>7} "
              + " ".join(f"{name}={ms:.4f}" for name, ms in got.items()) + " | "
              + " ".join(f"{name}/kernel={r:.3f}" for name, r in ratios.items()), flush=True)
    for ready in prepared.values():
        ready.release()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
