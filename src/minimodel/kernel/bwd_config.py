"""The backward kernels' tile configurations (`minimodel.kernel.backward`) and the table that
picks one per head dim, causality and architecture."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from minimodel.kernel.config import HOPPER


@dataclass(frozen=True)
class BwdConfig:
    """Tiles and launch options of the two gradient kernels.

    dK/dV kernel: BLOCK_N1 key rows per program, BLOCK_M1 query rows per inner step; BLOCK_N1 is
    a multiple of BLOCK_M1, so the causal diagonal of a key tile falls in whole query tiles.
    dQ kernel: BLOCK_M2 query rows per program, BLOCK_N2 key rows per inner step; BLOCK_M2 is a
    multiple of BLOCK_N2 (the forward's rule, `flash._kv_range`). The preprocess takes BLOCK_M2 rows.
    ATOMIC_DQ: no dQ kernel; the dK/dV kernel adds each tile pair's share of dQ to a float32
    accumulator with atomic adds, as FlashAttention-2 does: P is computed once instead of twice,
    but the order of the adds, so dQ's last bits, change from run to run (the default, False, is
    deterministic). BLOCK_M2 and BLOCK_N2 then size only the preprocess.
    """

    BLOCK_M1: int
    BLOCK_N1: int
    BLOCK_M2: int
    BLOCK_N2: int
    num_warps_kv: int = 4
    num_stages_kv: int = 2
    num_warps_q: int = 4
    num_stages_q: int = 2
    ATOMIC_DQ: bool = False

    def __post_init__(self):
        blocks = (self.BLOCK_M1, self.BLOCK_N1, self.BLOCK_M2, self.BLOCK_N2)
        if any(b < 16 or b & (b - 1) for b in blocks):
            raise ValueError(f"tile sizes must be powers of two >= 16 (tl.dot's minimum), got {blocks}")
        if self.BLOCK_N1 % self.BLOCK_M1 or self.BLOCK_M2 % self.BLOCK_N2:
            raise ValueError(f"BLOCK_N1 ({self.BLOCK_N1}) must be a multiple of BLOCK_M1 ({self.BLOCK_M1}) "
                             f"and BLOCK_M2 ({self.BLOCK_M2}) of BLOCK_N2 ({self.BLOCK_N2})")

    def as_dict(self) -> dict:
        return asdict(self)


# Hopper (the H200), per (head dim, causal), none spilling when compiled for sm_90
# (`tools/bwd_bench.py --report`); timed on the H200 with tools/bwd_bench.py (notes/backward.md,
# notes/tuning/bwd_*). Head dims not listed take the next larger one's row.
HOPPER_CONFIGS = {
    (64, False): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (64, True): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (128, False): BwdConfig(64, 128, 128, 64, 8, 3, 8, 3),
    (128, True): BwdConfig(32, 128, 128, 64, 8, 3, 8, 3),
    (256, False): BwdConfig(32, 32, 32, 32, 8, 1, 8, 1),
    (256, True): BwdConfig(32, 32, 32, 32, 8, 1, 8, 1),
}
# Other GPUs: tiles whose shared memory (at most 80 KiB on sm_90) fits every architecture's 99 KiB
# (sm_86, sm_89); not timed there.
PORTABLE_CONFIGS = {64: BwdConfig(64, 128, 128, 64, 8, 2, 8, 2), 128: BwdConfig(32, 64, 64, 32, 4, 2, 4, 2),
                    256: BwdConfig(32, 32, 32, 32, 8, 1, 8, 1)}
# The interpreter runs one program at a time: few, mid-sized tiles; BLOCK_N1 > BLOCK_M1 and
# BLOCK_M2 > BLOCK_N2, so a causal diagonal spans several inner steps, as on the GPU.
INTERPRETER_CONFIG = BwdConfig(32, 64, 64, 32, 4, 1, 4, 1)


def get_bwd_config(head_dim: int, causal: bool, device_type: str, arch: int = HOPPER) -> BwdConfig:
    """The configuration `flash_attn_backward` takes when none is given (arch: compute
    capability as major·10 + minor)."""
    if device_type != "cuda":
        return INTERPRETER_CONFIG
    d = min(hd for hd in PORTABLE_CONFIGS if hd >= head_dim)  # head dims go up to 256
    return HOPPER_CONFIGS[(d, bool(causal))] if arch == HOPPER else PORTABLE_CONFIGS[d]
