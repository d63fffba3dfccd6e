"""The backward kernels' tile configurations (`minimodel.kernel.backward`), the tables that pick
one per head dim, causality, architecture and sequence length, and what a call really runs
(`launch_bwd_config`: the Gluon dK/dV kernels only compiled, on Hopper, on inputs TMA can read)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import torch

from minimodel.kernel import gluon_backward, gluon_bwd_dqpass, gluon_bwd_ws, hopper
from minimodel.kernel.config import HOPPER, device_arch, device_sms
from minimodel.kernel.inputs import INTERPRETED


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
    GLUON: the dK/dV kernel is the Gluon one for Hopper (`minimodel.kernel.gluon_backward`):
    BLOCK_N1 keys per program, 64 per warpgroup (num_warps_kv = BLOCK_N1 / 16), BLOCK_M1 query
    rows per step, num_stages_kv Q/dO buffers (at least 2); the preprocess and the dQ kernel stay
    the tl ones. Hopper only, compiled, on inputs TMA can read (`backward.launch_bwd_config`).
    GLUON with num_warps_kv = 12: the warp-specialized Gluon kernel (`gluon_bwd_ws`): a producer
    warpgroup and two MMA warpgroups of 64 keys (BLOCK_N1 = 128). With ATOMIC_DQ it also computes
    dQ and adds it to a float32 accumulator atomically (no dQ kernel; not deterministic;
    BLOCK_M1 = 64 or 128, the M of one or two warpgroup MMAs).
    TMA_DQ (with ATOMIC_DQ, warp-specialized only): dQ's shares reach the accumulator by TMA
    reductions from shared memory (FlashAttention-3's way) instead of atomics from registers; not
    deterministic either.
    ORDERED_DQ (with TMA_DQ): those reductions in a fixed order of the key blocks
    (`gluon_bwd_order`, FlashAttention-3's deterministic mode): deterministic. It runs only where
    every key block of one head fits on the GPU at once (`ordered_dq_fits`); elsewhere the call
    runs the warp-specialized kernel with the tl dQ pass (`launch_bwd_config`).
    GLUON_DQ (with GLUON, without ATOMIC_DQ): the dQ pass is the Gluon one (`gluon_bwd_dqpass`),
    warp-specialized: BLOCK_M2 = 128 or 192 query rows per program (two or three MMA warpgroups of
    64), BLOCK_N2 = 64 keys per step, num_stages_q K/V buffers (2 to 4), num_warps_q its 12 or 16
    warps (`GLUON_DQ_TILES`); deterministic, as the tl pass. Hopper only, where the Gluon dK/dV
    kernel runs.
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
    GLUON: bool = False
    TMA_DQ: bool = False
    ORDERED_DQ: bool = False
    GLUON_DQ: bool = False

    def __post_init__(self):
        blocks = (self.BLOCK_M1, self.BLOCK_N1, self.BLOCK_N2) + (() if self.GLUON_DQ else (self.BLOCK_M2,))
        if any(b < 16 or b & (b - 1) for b in blocks):  # the Gluon dQ pass's BLOCK_M2: `_check_gluon_dq`
            raise ValueError(f"tile sizes must be powers of two >= 16 (tl.dot's minimum), got {blocks}")
        if self.BLOCK_N1 % self.BLOCK_M1 or self.BLOCK_M2 % self.BLOCK_N2:
            raise ValueError(f"BLOCK_N1 ({self.BLOCK_N1}) must be a multiple of BLOCK_M1 ({self.BLOCK_M1}) "
                             f"and BLOCK_M2 ({self.BLOCK_M2}) of BLOCK_N2 ({self.BLOCK_N2})")
        if self.TMA_DQ and not (self.ATOMIC_DQ and self.warp_specialized):
            raise ValueError("TMA_DQ is a way of ATOMIC_DQ in the warp-specialized Gluon kernel (GLUON, "
                             f"num_warps_kv = {gluon_bwd_ws.WARPS}); got ATOMIC_DQ = {self.ATOMIC_DQ}, "
                             f"GLUON = {self.GLUON}, num_warps_kv = {self.num_warps_kv}")
        if self.ORDERED_DQ and not self.TMA_DQ:
            raise ValueError("ORDERED_DQ orders TMA_DQ's reductions: TMA_DQ must be True")
        if self.GLUON_DQ and (self.ATOMIC_DQ or not self.GLUON):
            raise ValueError("GLUON_DQ is the Gluon dQ pass beside a Gluon dK/dV kernel: GLUON must be True "
                             f"and ATOMIC_DQ (no dQ pass) False, got GLUON = {self.GLUON}, ATOMIC_DQ = "
                             f"{self.ATOMIC_DQ}")
        if self.GLUON:
            self._check_gluon()
        if self.GLUON_DQ:
            self._check_gluon_dq()

    def _check_gluon_dq(self):
        tiles = (self.BLOCK_M2, self.BLOCK_N2, self.num_warps_q)
        if tiles not in GLUON_DQ_TILES.values() or not 2 <= self.num_stages_q <= 4:
            raise ValueError(f"GLUON_DQ: (BLOCK_M2, BLOCK_N2, num_warps_q) is one of "
                             f"{sorted(GLUON_DQ_TILES.values())} (2 or 3 consumer warpgroups) and "
                             f"num_stages_q 2 to 4, got {tiles} and {self.num_stages_q}")

    def _check_gluon(self):
        if self.warp_specialized:
            if self.BLOCK_N1 != 128:
                raise ValueError(f"GLUON with num_warps_kv = {gluon_bwd_ws.WARPS} (warp-specialized): "
                                 f"BLOCK_N1 is 128, got {self.BLOCK_N1}")
            if self.ATOMIC_DQ and self.BLOCK_M1 not in (64, 128):
                raise ValueError(f"GLUON with ATOMIC_DQ: BLOCK_M1 is 64 or 128 (dQ's warpgroup MMAs), "
                                 f"got {self.BLOCK_M1}")
        else:
            if self.ATOMIC_DQ:
                raise ValueError("GLUON in one partition keeps the separate dQ pass: ATOMIC_DQ must be "
                                 f"False (the warp-specialized kernel, num_warps_kv = "
                                 f"{gluon_bwd_ws.WARPS}, has it)")
            if self.BLOCK_N1 not in (64, 128, 192, 256) or self.num_warps_kv != self.BLOCK_N1 // 16:
                raise ValueError(f"GLUON: BLOCK_N1 is 64 keys per warpgroup (64 ... 256) and num_warps_kv "
                                 f"BLOCK_N1 / 16, got BLOCK_N1 = {self.BLOCK_N1}, num_warps_kv = "
                                 f"{self.num_warps_kv}")
        if self.BLOCK_M1 > 256 or self.num_stages_kv < 2:
            raise ValueError(f"GLUON: BLOCK_M1 at most 256 (one MMA's N) and num_stages_kv >= 2, got "
                             f"{self.BLOCK_M1} and {self.num_stages_kv}")

    @property
    def preprocess_rows(self) -> int:
        """Query rows per program of the preprocess (D = rowsum(dO ∘ O), a tl kernel): BLOCK_M2, or
        the power of two below it where the Gluon dQ pass has three consumers (192 rows)."""
        return 1 << (self.BLOCK_M2.bit_length() - 1)

    @property
    def dq_consumers(self) -> int:
        """With GLUON_DQ, the Gluon dQ pass's MMA warpgroups (`GLUON_DQ_TILES`'s key)."""
        return self.BLOCK_M2 // gluon_bwd_dqpass.ROWS

    @property
    def warp_specialized(self) -> bool:
        """The warp-specialized Gluon kernel (`gluon_bwd_ws`): GLUON with its 12 warps."""
        return self.GLUON and self.num_warps_kv == gluon_bwd_ws.WARPS

    @property
    def kernel(self) -> str:
        """The gradient kernels in words: tl, gluon (one partition), gluon-ws, gluon-ws-atomic-dq,
        gluon-ws-tma-dq or gluon-ws-ordered-dq; "-gluon-dq" added where the dQ pass is the
        Gluon one (`GLUON_DQ`)."""
        if not self.warp_specialized:
            return self.path + ("-gluon-dq" if self.GLUON_DQ else "")
        if self.ATOMIC_DQ:
            if self.ORDERED_DQ:
                return "gluon-ws-ordered-dq"
            return "gluon-ws-tma-dq" if self.TMA_DQ else "gluon-ws-atomic-dq"
        return "gluon-ws-gluon-dq" if self.GLUON_DQ else "gluon-ws"

    @property
    def deterministic(self) -> bool:
        """Whether two calls on one input give the same bits: dQ added in the kernel is not, unless
        in a fixed order."""
        return not self.ATOMIC_DQ or self.ORDERED_DQ

    @property
    def path(self) -> str:
        """Which dK/dV kernel runs: "gluon" (Hopper only) or "tl" (every device, and the interpreter)."""
        return "gluon" if self.GLUON else "tl"

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


# The Gluon dK/dV kernel (`gluon_backward`) on Hopper, per (head dim, causal): (BLOCK_M1 query rows
# per step, num_stages_kv Q/dO buffers), 128 keys per program (two warpgroups); the dQ pass keeps
# the tl table's tiles. None spills when compiled for sm_90 (`tools/bwd_bench.py --report --gluon`;
# 64 query rows at d = 128 causal would). Each passed every sweep case it was checked on on the H200;
# timed there, the d = 128 one ran at 0.88-0.92x the tl dK/dV kernel's speed (notes/backward.md), so
# the policy does not pick it: `gluon_bwd_config` asks for it.
GLUON_TILES = {(64, False): (64, 2), (64, True): (64, 2), (128, False): (64, 2), (128, True): (32, 2)}


def gluon_bwd_config(head_dim: int, causal: bool) -> BwdConfig:
    """The Gluon dK/dV kernel's configuration at a head dim it is built for (64, 128), with the
    tl dQ pass of the Hopper table: what `config=` asks for to run it."""
    if head_dim not in gluon_backward.HEAD_DIMS:
        raise ValueError(f"the Gluon backward is built for head dims {gluon_backward.HEAD_DIMS}, "
                         f"got {head_dim}")
    rows, stages = GLUON_TILES[(head_dim, bool(causal))]
    return replace(HOPPER_CONFIGS[(head_dim, bool(causal))], BLOCK_M1=rows, BLOCK_N1=128, num_warps_kv=8,
                   num_stages_kv=stages, GLUON=True)


# The warp-specialized Gluon kernel (`gluon_bwd_ws`) on Hopper, per (head dim, causal): (BLOCK_M1,
# num_stages_kv), 128 keys per program, FlashAttention-3's tiles where BwdConfig's powers of two
# allow (its 80 query rows at d = 128 not causal are 64 here). Compiled for sm_90 without a spill
# (tools/bwd_ws_report.py); on the H200 every path passed all 40 cases of tools/bwd_gluon_gpu.py,
# and with the tl dQ pass it ran the backward 1.13-1.30x faster than the tl kernels at
# FlashAttention's grid's N = 4096 (notes/backward.md): the policy picks it there (`WS_MIN_N`).
# With dQ added by atomics, d = 64 takes 64 query rows: at 128 the atomics' addresses spill 16-24
# bytes. With TMA reductions, 128 rows compile without a spill (Pᵀ and dSᵀ reach their GEMMs through
# shared memory, `gluon_bwd_ring.Config.SMEM_OPERANDS`) and, on the H200, passed all 40 checks and
# ran the backward 1.14-1.17x faster than 64 rows at N = 4096 (notes/backward.md); d = 128 keeps 64
# (128 rows ask for 330 KB of shared memory).
GLUON_WS_TILES = {(64, False): (128, 2), (64, True): (128, 2), (128, False): (64, 2), (128, True): (64, 2)}
GLUON_WS_ATOMIC_TILES = {**GLUON_WS_TILES, (64, False): (64, 2), (64, True): (64, 2)}


# The shortest sequence the warp-specialized kernel is picked for: FlashAttention's grid starts
# here. It was timed faster than the tl kernels at N = 4096 only (d = 64 and 128, causal and not);
# shorter sequences, the lab grid's N = 64 and 256, keep the tl kernels, untimed against it.
WS_MIN_N = 1024


class DqPass(NamedTuple):
    """Where the policy runs the Gluon dQ pass (`gluon_bwd_dqpass`) beside the warp-specialized
    dK/dV kernel: its K/V stages, its consumer warpgroups (64 query rows each), and the shortest N
    it is picked for (the tl pass below; with three consumers, see `dq_consumers`)."""

    stages: int
    consumers: int = gluon_bwd_dqpass.CONSUMERS
    min_n: int = WS_MIN_N


# Three consumers take 192 query rows a program: they need many waves of programs over the SMs,
# or the last, partial wave costs more than the third warpgroup saves. On the H200
# (notes/backward.md, tools/dq_pass_probe.py, the dQ pass alone): at FlashAttention's
# (4, 32, 4096, 64) 2,816 programs (21 waves on 132 SMs) ran 1.04x the tl pass's speed; at the lab
# grid's (2, 4, 4096, 64) 176 programs (1.3 waves) ran 0.73x. Between the two, untimed, the policy
# asks for 8 waves, where a partial last wave is at most an eighth of the pass.
THREE_CONSUMERS_MIN_WAVES = 8


def dq_programs(n: int, heads: int, consumers: int) -> int:
    """Programs of the Gluon dQ pass: query tiles of 64 rows per consumer, times B·H (`heads`)."""
    return heads * -(-n // (gluon_bwd_dqpass.ROWS * consumers))


def dq_consumers(head_dim: int, causal: bool, n: int, heads: int | None = None,
                 sms: int | None = None) -> int | None:
    """The Gluon dQ pass's consumer warpgroups at (B·H = `heads`, N = n) on a device of `sms` SMs;
    None where the tl pass runs. Two consumers from the pass's `min_n`; where the policy's pass has
    three (d = 64 not causal), three from `min_n` where their programs fill
    `THREE_CONSUMERS_MIN_WAVES` waves, two where two's programs fit in one wave (at the lab
    grid's (2, 4, 1024, 64), 64 programs: 1.30x the tl pass), else the tl pass (at (2, 4, 4096,
    64), 256 programs: two consumers 0.99x). Without `heads` or `sms`, by N alone."""
    dq_pass = GLUON_DQ_PASS[(head_dim, bool(causal))]
    if dq_pass.consumers != 3:
        return dq_pass.consumers if n >= dq_pass.min_n else None
    if heads is None or sms is None:
        return 3 if n >= dq_pass.min_n else None
    if n >= dq_pass.min_n and dq_programs(n, heads, 3) >= THREE_CONSUMERS_MIN_WAVES * sms:
        return 3
    if n >= WS_MIN_N and dq_programs(n, heads, 2) <= sms:
        return 2
    return None


# (BLOCK_M2, BLOCK_N2, num_warps_q) of the Gluon dQ pass with 2 or 3 consumers: 64 query rows each,
# 64 keys per step; compiled for sm_90 without a spill (3 consumers at d = 64 only: 96 bytes spill
# at d = 128). Per (head dim, causal) the policy's pass. On the H200 (tools/dq_pass_probe.py,
# FlashAttention's grid, the dQ launch alone, CUDA-graph medians of samples that alternate the
# passes; every check against float64 passed, the same bits on every call; notes/backward.md): 2
# consumers and 4 stages ran 1.46-1.62x the tl pass's speed at d = 128 and 1.33-1.49x at d = 64
# causal. At d = 64 not causal 2 consumers ran 0.88-1.02x, and 3 ran 0.87x at N = 1024, 1.01x at
# 2048 and 1.03-1.09x at N = 4096-16384, so the pass takes 3 consumers there from N = 4096 and
# the tl pass below.
GLUON_DQ_TILES = {c: gluon_bwd_dqpass.tiles(c) for c in (2, 3)}
GLUON_DQ_PASS = {(64, False): DqPass(4, consumers=3, min_n=4096), (64, True): DqPass(4),
                 (128, False): DqPass(4), (128, True): DqPass(4)}


def gluon_ws_config(head_dim: int, causal: bool, atomic_dq: bool = False, tma_dq: bool = False,
                    ordered_dq: bool = False, gluon_dq: bool = False,
                    consumers: int | None = None) -> BwdConfig:
    """The warp-specialized Gluon kernel's configuration at a head dim it is built for (64, 128):
    with atomic_dq its dQ is added in the kernel by fp32 atomics, with tma_dq by TMA reductions
    (either: not deterministic), with ordered_dq by TMA reductions in a fixed order
    (deterministic), else a dQ pass runs after it: the Gluon one with gluon_dq (its stages from
    `GLUON_DQ_PASS`, its consumers `consumers` or that table's, whatever N), else the tl one of the
    Hopper table."""
    if head_dim not in gluon_backward.HEAD_DIMS:
        raise ValueError(f"the Gluon backward is built for head dims {gluon_backward.HEAD_DIMS}, "
                         f"got {head_dim}")
    tma_dq = bool(tma_dq or ordered_dq)
    in_kernel = bool(atomic_dq or tma_dq)
    tiles = GLUON_WS_ATOMIC_TILES if atomic_dq and not tma_dq else GLUON_WS_TILES  # TMA: ws's tiles
    rows, stages = tiles[(head_dim, bool(causal))]
    cfg = replace(HOPPER_CONFIGS[(head_dim, bool(causal))], BLOCK_M1=rows, BLOCK_N1=128,
                  num_warps_kv=gluon_bwd_ws.WARPS, num_stages_kv=stages, ATOMIC_DQ=in_kernel,
                  TMA_DQ=tma_dq, ORDERED_DQ=bool(ordered_dq), GLUON=True)
    if not gluon_dq:
        return cfg
    dq_pass = GLUON_DQ_PASS[(head_dim, bool(causal))]
    m2, n2, warps = GLUON_DQ_TILES[consumers or dq_pass.consumers]
    return replace(cfg, BLOCK_M2=m2, BLOCK_N2=n2, num_warps_q=warps, num_stages_q=dq_pass.stages,
                   GLUON_DQ=True)


def tl_bwd_config(head_dim: int, causal: bool, device_type: str, arch: int = HOPPER) -> BwdConfig:
    """The tl kernels' configuration: the Hopper table on Hopper, the portable one elsewhere, the
    interpreter's on the CPU."""
    if device_type != "cuda":
        return INTERPRETER_CONFIG
    d = min(hd for hd in PORTABLE_CONFIGS if hd >= head_dim)  # head dims go up to 256
    return HOPPER_CONFIGS[(d, bool(causal))] if arch == HOPPER else PORTABLE_CONFIGS[d]


def get_bwd_config(head_dim: int, causal: bool, device_type: str, arch: int = HOPPER,
                   n: int | None = None, deterministic: bool = True, heads: int | None = None,
                   sms: int | None = None) -> BwdConfig:
    """The configuration `flash_attn_backward` takes when none is given (arch: compute
    capability as major·10 + minor; n: the sequence length, None for the tl table; heads: B·H and
    sms: the device's SMs, for the dQ pass's programs): on Hopper, compiled, at the head dims it
    is built for and N >= WS_MIN_N, the warp-specialized Gluon kernel, its dQ by a dQ pass
    (deterministic: the Gluon one where `dq_consumers` picks it, else the tl one) or, with
    deterministic False, by TMA reductions in the kernel (faster; dQ's last bits vary between
    calls); the tl kernels' table everywhere else, deterministic either way (the one-partition
    Gluon kernel is `gluon_bwd_config`, asked for explicitly)."""
    if (device_type == "cuda" and arch == HOPPER and not INTERPRETED and head_dim in gluon_backward.HEAD_DIMS
            and n is not None and n >= WS_MIN_N):
        consumers = dq_consumers(head_dim, causal, n, heads, sms) if deterministic else None
        return gluon_ws_config(head_dim, causal, tma_dq=not deterministic, gluon_dq=consumers is not None,
                               consumers=consumers)
    return tl_bwd_config(head_dim, causal, device_type, arch)


def default_bwd_config(q: torch.Tensor, causal: bool, deterministic: bool = True) -> BwdConfig:
    """The configuration `flash_attn_backward` runs for q of shape (B, H, N, d) when none is given.
    deterministic False is not honoured while `torch.use_deterministic_algorithms` is on."""
    arch = device_arch(q.device) if q.device.type == "cuda" else HOPPER
    sms = device_sms(q.device) if q.device.type == "cuda" else None
    deterministic = deterministic or torch.are_deterministic_algorithms_enabled()
    return get_bwd_config(q.shape[-1], causal, q.device.type, arch, n=q.shape[-2],
                          deterministic=deterministic, heads=q.shape[0] * q.shape[1], sms=sms)


def gluon_ok(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor | None = None) -> bool:
    """Whether the Gluon dK/dV kernel can run on these inputs: compiled (it has no interpreter), on
    Hopper, at a head dim it is built for, every input readable by TMA (`hopper.supports`: unit
    stride on d, 16-byte strides and base). do None: a fresh contiguous dO, as `backward_fn` draws."""
    if INTERPRETED or q.device.type != "cuda" or device_arch(q.device) != HOPPER:
        return False
    if q.shape[-1] not in gluon_backward.HEAD_DIMS:
        return False
    return hopper.supports(q, k, v) and (do is None or hopper.supports(do, k, v))


def launch_bwd_config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                      config: BwdConfig | None = None, do: torch.Tensor | None = None,
                      deterministic: bool = True) -> BwdConfig:
    """The configuration a call of `flash_attn_backward` on these inputs really runs: `config` or
    the default (`default_bwd_config(q, causal, deterministic)`); a Gluon one where the Gluon kernel
    cannot run becomes the tl table's choice. Its `path` says which dK/dV kernel runs ("gluon" or
    "tl"), `kernel` which one, `deterministic` whether its bits repeat: what a timing or
    correctness row records."""
    cfg = config or default_bwd_config(q, causal, deterministic)
    if cfg.GLUON and not gluon_ok(q, k, v, do):
        arch = device_arch(q.device) if q.device.type == "cuda" else HOPPER
        return tl_bwd_config(q.shape[-1], causal, q.device.type, arch)
    if cfg.ORDERED_DQ and not ordered_dq_fits(cfg, q.shape[-2], q.device):
        return gluon_ws_config(q.shape[-1], causal)  # with the tl dQ pass: deterministic too
    return cfg


def ordered_dq_fits(cfg: BwdConfig, n: int, device: torch.device) -> bool:
    """Whether ORDERED_DQ may run at sequence length n: its key blocks wait on each other while
    holding their SMs, so every key block of one head (cdiv(n, BLOCK_N1), one per SM) must fit on
    the device at once (`gluon_bwd_order`)."""
    return -(-n // cfg.BLOCK_N1) <= torch.cuda.get_device_properties(device).multi_processor_count
