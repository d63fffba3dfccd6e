"""The two timing grids, defined once, from the config's `gpu.timing` section.

- `contract.LAB_GRID`: lab 02's grid (notes/labs.md, lab 02 E), (lab_batch, lab_heads, N,
  lab_head_dim) for N in lab_n, where the kernel is also timed against naive PyTorch.
- `contract.FLASHATTENTION_GRID`: FlashAttention's benchmark grid, batch·N = fa_tokens and
  heads·d = fa_model_dim, for N in fa_n and d in fa_head_dims.
Each point is timed causal and not, in every pass (`directions`). The timing stage, its no-GPU
tables (`no_gpu_timing_rows`, the warm-up's `no_gpu_warm_rows`) and the development tools all take
their points from here, from the config the workflow validates
(`minimodel.floor.provenance.configcheck.load_config`). A shard of the stage
(`minimodel.gpu.shards`) gives its passes instead, as `passes`, each with its point's index in
the whole grid (its inputs' seed), so that a shard times what the whole stage would at its points.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from minimodel.contenders.catalog import Where
from minimodel.floor import contract
from minimodel.floor.provenance import configcheck


@dataclass(frozen=True)
class Point:
    grid: str
    B: int
    H: int
    N: int
    d: int
    causal: bool

    @property
    def where(self) -> Where:
        """The point as `catalog.runs_at` asks about it: float16 on the GPU, in its grid."""
        return Where(self.d, self.causal, grid=self.grid)


def lab_grid(cfg: dict) -> list[Point]:
    return [Point(contract.LAB_GRID, cfg["lab_batch"], cfg["lab_heads"], n, cfg["lab_head_dim"], causal)
            for n in cfg["lab_n"] for causal in (False, True)]


def flashattention_shape(n: int, d: int, cfg: dict) -> tuple[int, int, int, int]:
    """(B, H, N, d) of FlashAttention's grid at (N, d): batch·N = fa_tokens, heads·d = fa_model_dim."""
    return max(cfg["fa_tokens"] // n, 1), cfg["fa_model_dim"] // d, n, d


def flashattention_grid(cfg: dict) -> list[Point]:
    return [Point(contract.FLASHATTENTION_GRID, *flashattention_shape(n, d, cfg), causal)
            for d in cfg["fa_head_dims"] for n in cfg["fa_n"] for causal in (False, True)]


def points(cfg: dict) -> list[Point]:
    """Every point the timing stage times: the lab grid, then FlashAttention's."""
    return lab_grid(cfg) + flashattention_grid(cfg)


def directions(cfg: dict) -> tuple[str, ...]:
    """The directions timed: the forward, then with `backward` the backward alone and fwd+bwd."""
    return contract.DIRECTIONS if cfg["backward"] else (contract.FORWARD,)


@dataclass(frozen=True)
class Pass:
    """A point in one direction, and the point's index in the whole grid (`points`): its inputs
    are drawn from random_seed + index, in a shard as in the whole stage."""

    index: int
    point: Point
    direction: str

    def as_list(self) -> list:
        """The pass as a shard's config lists it (`passes`)."""
        p = self.point
        return [self.index, p.grid, p.B, p.H, p.N, p.d, p.causal, self.direction]


def passes(cfg: dict) -> list[Pass]:
    """Every pass the stage times, in its order: each point (`points`) in every direction; a
    shard's own (`cfg["passes"]`, `Pass.as_list` each) where the config is a shard's."""
    if "passes" in cfg:
        return [Pass(index, Point(grid, B, H, N, d, causal), direction)
                for index, grid, B, H, N, d, causal, direction in cfg["passes"]]
    return [Pass(i, p, direction) for i, p in enumerate(points(cfg)) for direction in directions(cfg)]


def default_timing_config(*configfiles) -> dict:
    """gpu.timing of the validated config (`configcheck.load_config`): kept for the tools until
    they call load_config themselves."""
    return configcheck.load_config(*configfiles)["gpu"]["timing"]


# The tables of the timing stage and its warm-up where nothing ran (no CUDA device), planned from
# the grids alone: a job that writes them imports no torch (floor/provenance/devices.py).
WARM_COLUMNS = (*contract.TIMING_KEY, "status", "checked", "seconds")


def no_gpu_timing_rows(cfg: dict) -> list[dict]:
    """Without CUDA: one row per planned point and direction saying that it could not be timed
    (the forward's rows first: `no_gpu_order`)."""
    return [{"grid": each.point.grid, "N": each.point.N, "d": each.point.d, "causal": each.point.causal,
             "status": contract.NO_GPU_TIMING, "ms": None, "direction": each.direction}
            for each in sorted(passes(cfg), key=no_gpu_order)]


def no_gpu_order(each: Pass) -> tuple[int, int]:
    """Where a pass's row stands in the no-GPU table: by direction, then by point."""
    return contract.DIRECTIONS.index(each.direction), each.index


def unwarmed_row(point: Point, direction: str, status: str) -> dict:
    """The warm-up's row of a pass it did not warm, saying why (`status`)."""
    return {**dataclasses.asdict(point), "direction": direction, "impl": None, "status": status,
            "checked": None, "seconds": None}


def no_gpu_warm_rows(cfg: dict) -> list[dict]:
    """Without CUDA: one warm-up row per timing pass, saying that nothing was compiled."""
    return [unwarmed_row(each.point, each.direction, contract.NO_GPU_WARM) for each in passes(cfg)]
