"""The two timing grids, defined once, from the config's `gpu.timing` section.

- `contract.LAB_GRID`: lab 02's grid (notes/labs.md, lab 02 E), (lab_batch, lab_heads, N,
  lab_head_dim) for N in lab_n, where the kernel is also timed against naive PyTorch.
- `contract.FLASHATTENTION_GRID`: FlashAttention's benchmark grid, batch·N = fa_tokens and
  heads·d = fa_model_dim, for N in fa_n and d in fa_head_dims.
Each point is timed causal and not. The timing stage, its no-GPU table, and the development
tools all take their points from here, from the config the workflow validates
(`minimodel.floor.provenance.configcheck.load_config`).
"""

from __future__ import annotations

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


def default_timing_config(*configfiles) -> dict:
    """gpu.timing of the validated config (`configcheck.load_config`): kept for the tools until
    they call load_config themselves."""
    return configcheck.load_config(*configfiles)["gpu"]["timing"]
