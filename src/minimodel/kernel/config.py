"""The kernel's two configuration types: `FwdConfig`, the forward's kernel and tiles, and
`BwdConfig`, the backward's dK/dV kernel, its dQ, tiles and warps. Each names its kernels with
flags (`FwdConfig.path`; `BwdConfig.dkdv` and `.dq`), and is checked when made. `policy` picks
them; `launch` says what a call really runs; every timing and correctness row records one: its
fields as `cfg_*` columns (`as_dict`), and in `path` its kernel's language (`language`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The forward's kernels: "tl" (pointer loads: every device, and the interpreter), "tl_tma" (the tl
# kernel with tiles moved by Hopper's TMA), "gluon" (the Gluon kernel for Hopper, `hopper`).
FWD_PATHS = ("tl", "tl_tma", "gluon")
GLUON_FWD_CONSUMERS, GLUON_FWD_ROWS = 2, 64  # the Gluon forward's consumer warpgroups, query rows each
# The backward's dK/dV kernels: "tl" (every device), "gluon_ws" (Hopper: warp-specialized, `gluon_bwd_ws`).
DKDV = ("tl", "gluon_ws")
# How dQ is made: by the tl dQ pass after the dK/dV kernel, by the Gluon one (`gluon_bwd_dqpass`), or
# added in the gluon_ws kernel by TMA reductions into a float32 accumulator (not deterministic).
DQ = ("tl_pass", "gluon_pass", "in_kernel")
WS_WARPS, WS_KEYS = 12, 128  # gluon_ws: a producer warpgroup and two MMA warpgroups of 64 keys
DQ_ROWS, DQ_KEYS = 64, 64  # the Gluon dQ pass: query rows per consumer warpgroup, keys per step
# (BLOCK_M2, BLOCK_N2, num_warps_q) of the Gluon dQ pass by its consumer warpgroups (2 or 3): DQ_ROWS
# query rows each, DQ_KEYS keys per step, the producer's warpgroup and the consumers' warps
GLUON_DQ_TILES = {c: (c * DQ_ROWS, DQ_KEYS, 4 * (c + 1)) for c in (2, 3)}


@dataclass(frozen=True)
class FwdConfig:
    """The forward's kernel (`path`, one of FWD_PATHS) and its tiles and launch options.

    BLOCK_M query rows per program, BLOCK_N keys per step, num_warps, num_stages (with "gluon":
    K/V buffers). MAXNREG: cap on registers per thread (None: the compiler's), so that more programs
    share a multiprocessor. "gluon": two consumer warpgroups of 64 rows (BLOCK_M 128, num_warps 4).
    """

    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    path: str = "tl"
    MAXNREG: int | None = None

    def __post_init__(self):
        if self.path not in FWD_PATHS:
            raise ValueError(f"path {self.path!r}; accepted: {', '.join(FWD_PATHS)}")
        rows = GLUON_FWD_CONSUMERS * GLUON_FWD_ROWS
        if self.path == "gluon" and (self.BLOCK_M, self.num_warps) != (rows, 4):
            raise ValueError(f"gluon: BLOCK_M {rows} (two consumer warpgroups of {GLUON_FWD_ROWS} rows) and "
                             f"num_warps 4, got {self.BLOCK_M}, {self.num_warps}")

    @property
    def TMA(self) -> bool:
        """Whether tiles move by TMA (both Hopper paths): the inputs must be TMA-readable."""
        return self.path != "tl"

    @property
    def language(self) -> str:
        """A row's `path` column, as in every table: "gluon" or "tl" (either; `cfg_path` says which)."""
        return "gluon" if self.path == "gluon" else "tl"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class BwdConfig:
    """The backward's kernels (`dkdv` of DKDV, `dq` of DQ), tiles and launch options.

    dK/dV: BLOCK_N1 key rows per program (a multiple of BLOCK_M1), BLOCK_M1 query rows per step,
    num_warps_kv, num_stages_kv; "gluon_ws": BLOCK_N1 128, 12 warps, num_stages_kv >= 2 ring stages,
    Hopper only, compiled, on inputs TMA can read (`launch.gluon_ok`). dQ: "tl_pass" BLOCK_M2 query
    rows per program (a multiple of BLOCK_N2), BLOCK_N2 keys per step; "gluon_pass" (with gluon_ws)
    `GLUON_DQ_TILES`, num_stages_q K/V buffers (2 to 4); "in_kernel" (gluon_ws, BLOCK_M1 64 or 128)
    no dQ launch: the dK/dV kernel adds into a float32 dQ by TMA reductions, in varying order.
    """

    BLOCK_M1: int
    BLOCK_N1: int
    BLOCK_M2: int
    BLOCK_N2: int
    num_warps_kv: int = 4
    num_stages_kv: int = 2
    num_warps_q: int = 4
    num_stages_q: int = 2
    dkdv: str = "tl"
    dq: str = "tl_pass"

    def __post_init__(self):
        if self.dkdv not in DKDV or self.dq not in DQ:
            raise ValueError(f"dkdv {self.dkdv!r}, dq {self.dq!r}; accepted: dkdv one of {', '.join(DKDV)}, "
                             f"dq one of {', '.join(DQ)}")
        blocks = (self.BLOCK_M1, self.BLOCK_N1, self.BLOCK_N2) + (() if self.dq == "gluon_pass" else
                                                                   (self.BLOCK_M2,))
        if any(b < 16 or b & (b - 1) for b in blocks):
            raise ValueError(f"tile sizes must be powers of two >= 16 (tl.dot's minimum), got {blocks}")
        if self.BLOCK_N1 % self.BLOCK_M1 or self.BLOCK_M2 % self.BLOCK_N2:
            raise ValueError(f"BLOCK_N1 ({self.BLOCK_N1}) must be a multiple of BLOCK_M1 ({self.BLOCK_M1}) "
                             f"and BLOCK_M2 ({self.BLOCK_M2}) of BLOCK_N2 ({self.BLOCK_N2})")
        if self.dq != "tl_pass" and self.dkdv != "gluon_ws":
            raise ValueError(f"dq {self.dq!r} runs beside the gluon_ws dK/dV kernel, got dkdv {self.dkdv!r}")
        if self.dkdv == "gluon_ws":
            if (self.BLOCK_N1, self.num_warps_kv) != (WS_KEYS, WS_WARPS):
                raise ValueError(f"gluon_ws: BLOCK_N1 {WS_KEYS} and num_warps_kv {WS_WARPS}, got "
                                 f"{self.BLOCK_N1} and {self.num_warps_kv}")
            if self.BLOCK_M1 > 256 or self.num_stages_kv < 2:
                raise ValueError(f"gluon_ws: BLOCK_M1 at most 256 (one MMA's N) and num_stages_kv >= 2, got "
                                 f"{self.BLOCK_M1} and {self.num_stages_kv}")
        if self.dq == "in_kernel" and self.BLOCK_M1 not in (64, 128):
            raise ValueError(f"in_kernel dQ: BLOCK_M1 is 64 or 128 (dQ's MMAs), got {self.BLOCK_M1}")
        tiles = (self.BLOCK_M2, self.BLOCK_N2, self.num_warps_q)
        stages_ok = 2 <= self.num_stages_q <= 4
        if self.dq == "gluon_pass" and (tiles not in GLUON_DQ_TILES.values() or not stages_ok):
            raise ValueError(f"gluon_pass: (BLOCK_M2, BLOCK_N2, num_warps_q) is one of "
                             f"{sorted(GLUON_DQ_TILES.values())} (2 or 3 consumer warpgroups) and "
                             f"num_stages_q 2 to 4, got {tiles} and {self.num_stages_q}")

    @property
    def language(self) -> str:
        """A row's `path` column, as in every table: "gluon" (gluon_ws) or "tl" (`cfg_dkdv`, `cfg_dq`)."""
        return "gluon" if self.dkdv == "gluon_ws" else "tl"

    @property
    def preprocess_rows(self) -> int:
        """Query rows per program of the preprocess (D = rowsum(dO ∘ O), a tl kernel): BLOCK_M2, or
        the power of two below it where the Gluon dQ pass has three consumers (192 rows)."""
        return 1 << (self.BLOCK_M2.bit_length() - 1)

    @property
    def dq_consumers(self) -> int | None:
        """The Gluon dQ pass's consumer warpgroups (None for the other dQ choices)."""
        return self.BLOCK_M2 // DQ_ROWS if self.dq == "gluon_pass" else None

    @property
    def deterministic(self) -> bool:
        """Whether two calls on one input give the same bits: dQ added in the kernel is not."""
        return self.dq != "in_kernel"

    def as_dict(self) -> dict:
        return asdict(self)
