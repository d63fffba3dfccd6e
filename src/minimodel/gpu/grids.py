"""The two timing grids, defined once, from the config's `gpu.timing` section.

- "seed": lab 02's grid, (seed_batch, seed_heads, N, seed_head_dim) for N in seed_n, where the
  kernel is also timed against naive PyTorch.
- "flashattention": FlashAttention's benchmark grid, batch·N = fa_tokens and heads·d =
  fa_model_dim, for N in fa_n and d in fa_head_dims.
Each point is timed causal and not. The timing stage, its no-GPU table, and the development
tools (tools/tune.py, tools/kernel_report.py, whose defaults are config/config.yaml's) all take
their points from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

SEED, FLASHATTENTION = "seed", "flashattention"
CONFIG = Path(__file__).resolve().parents[3] / "config" / "config.yaml"


@dataclass(frozen=True)
class Point:
    grid: str
    B: int
    H: int
    N: int
    d: int
    causal: bool


def seed_grid(cfg: dict) -> list[Point]:
    return [Point(SEED, cfg["seed_batch"], cfg["seed_heads"], n, cfg["seed_head_dim"], causal)
            for n in cfg["seed_n"] for causal in (False, True)]


def flashattention_shape(n: int, d: int, cfg: dict) -> tuple[int, int, int, int]:
    """(B, H, N, d) of FlashAttention's grid at (N, d): batch·N = fa_tokens, heads·d = fa_model_dim."""
    return max(cfg["fa_tokens"] // n, 1), cfg["fa_model_dim"] // d, n, d


def flashattention_grid(cfg: dict) -> list[Point]:
    return [Point(FLASHATTENTION, *flashattention_shape(n, d, cfg), causal)
            for d in cfg["fa_head_dims"] for n in cfg["fa_n"] for causal in (False, True)]


def points(cfg: dict) -> list[Point]:
    """Every point the timing stage times: the seed grid, then FlashAttention's."""
    return seed_grid(cfg) + flashattention_grid(cfg)


def default_timing_config(config: Path = CONFIG) -> dict:
    """config/config.yaml's gpu.timing: the defaults of the tools that time outside the workflow."""
    return yaml.safe_load(config.read_text())["gpu"]["timing"]
