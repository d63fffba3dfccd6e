"""Time this tree's kernel against another version of it, side by side in one run (CUDA only).

    git show <rev>:src/minimodel/kernel/flash.py > /tmp/other.py
    python tools/kernel_ab.py --other /tmp/other.py --out ab.csv

Older revisions have it at src/minimodel/attention_flash.py. The other file is loaded as a
module of its own; what it imports from `minimodel` (the tile policy, the Gluon kernel) is this
tree's.

Both kernels run every (B, H, N, d) of the timing grids (config/config.yaml's gpu.timing; `--grid`
takes one), causal and not, with their own default configuration (or `--pointer`, which forces
pointer loads), and are checked against a float64 head first, as `tools/tune.py` checks. Each
point is timed as GPU time per call over CUDA-graph replays, A then B then A then B, so the table
carries each side's spread beside the ratio. A development tool: the workflow never imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import sys

import pandas as pd
import torch
from tune import checked_run, timing_config

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.timers import bench_graph_ms
from minimodel.gpu import grids
from minimodel.gpu.timing_point import forward_reference
from minimodel.kernel import flash


def shapes(grid_names=contract.GRIDS) -> list[tuple[int, int, int, int]]:
    """(B, H, N, d) of every point of the named timing grids, each once, in the stage's order."""
    return list(dict.fromkeys((p.B, p.H, p.N, p.d) for p in grids.points(timing_config())
                              if p.grid in grid_names))


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _caller(module, causal: bool, pointer: bool, like: torch.Tensor):
    cfg = module.default_config(like, causal)
    if pointer:
        cfg = dataclasses.replace(cfg, TMA=False)
    return cfg, lambda a, b, c: module.flash_attn_forward(a, b, c, causal=causal, config=cfg)


def run(other_path: str, pointer: bool, rep_ms: float, grid_names=contract.GRIDS) -> pd.DataFrame:
    kernels = {"this": flash, "other": load(other_path, "other_attention_flash")}
    rows = []
    for (B, H, N, d) in shapes(grid_names):
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(N * d + causal)
            q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16, generator=gen)
                       for _ in range(3))
            reference = forward_reference(q, k, v, causal)
            one = [t[:1, :1] for t in (q, k, v)]
            row = {"B": B, "H": H, "N": N, "d": d, "causal": causal}
            calls = {}
            for name, module in kernels.items():
                cfg, fn = _caller(module, causal, pointer, q)
                ok, err = checked_run(fn, one, reference)
                row.update({f"{name}_ok": ok, f"{name}_err": err, f"{name}_tma": cfg.TMA})
                calls[name] = functools.partial(fn, q, k, v)
            for rep in range(2):
                for name, call in calls.items():
                    row[f"{name}_ms{rep}"] = bench_graph_ms(call, rep_ms)
            for name in kernels:
                row[f"{name}_ms"] = min(row[f"{name}_ms0"], row[f"{name}_ms1"])
            row["this_over_other"] = row["other_ms"] / row["this_ms"]
            rows.append(row)
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()},
                  file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--other", required=True, help="another version's flash.py")
    parser.add_argument("--pointer", action="store_true", help="force pointer loads on both sides")
    parser.add_argument("--rep-ms", type=float, default=100)
    parser.add_argument("--grid", nargs="+", choices=contract.GRIDS, default=list(contract.GRIDS),
                        help="the timing grids whose points are run (default: both)")
    parser.add_argument("--out", default="kernel_ab.csv")
    args = parser.parse_args(argv)
    table = run(args.other, args.pointer, args.rep_ms, args.grid)
    table.to_csv(args.out, index=False)
    cols = ["B", "H", "N", "d", "causal", "this_ok", "other_ok", "this_tma", "this_ms0", "this_ms1",
            "other_ms0", "other_ms1", "this_over_other"]
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    return 0 if table["this_ok"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
