"""Decode's points, from the config's `decode` section (and its `cpu` and `gpu` subsections): every
stage that tabulates, measures or times decode expands its grid here, so they agree on a point's
cache lengths and on which points the KV-cache cap leaves out.

A point is (batch, L_q, H_q, H_kv, d, kv_len, ragged, dtype). Its `cache_seqlens`: kv_len for
every sequence, or, ragged, from kv_len down to half of it evenly across the batch (sequence b of
B holds kv_len − ⌊b · (kv_len / 2) / (B − 1)⌋ keys; a batch of one is never ragged, and a length
never falls below L_q). The caches are allocated kv_len long.
"""

from __future__ import annotations

import dataclasses
import itertools

from minimodel.floor.byte_model.decode import kv_cache_bytes
from minimodel.floor.byte_model.forward import DTYPE_BYTES

# the point's columns in every decode table, in this order
KEY = ("B", "L_q", "H_q", "H_kv", "d", "kv_len", "ragged", "dtype")
MAX_SPLITS = 64
MIN_KEYS_PER_SPLIT = 512  # shorter splits spend more on their partials and the combine than they save


def split_policy(batch: int, heads_kv: int, max_seqlen: int, sm_count: int) -> int:
    """How many splits the split-KV decode cuts the KV length into (the kernel's policy, which
    stage 1's tables follow): enough (sequence, KV head, split) programs to give every SM one, never
    a split shorter than MIN_KEYS_PER_SPLIT keys, one split where B × H_kv already fills 80 % of
    the SMs (then the combine would only cost)."""
    programs = batch * heads_kv
    if programs >= 0.8 * sm_count:
        return 1
    return max(1, min(sm_count // programs, MAX_SPLITS, max_seqlen // MIN_KEYS_PER_SPLIT))


def ragged_lengths(batch: int, kv_len: int, len_q: int) -> tuple[int, ...]:
    """kv_len down to kv_len / 2, evenly across the batch (module docstring)."""
    if batch == 1:
        return (kv_len,)
    return tuple(max(len_q, kv_len - (b * (kv_len // 2)) // (batch - 1)) for b in range(batch))


@dataclasses.dataclass(frozen=True)
class DecodePoint:
    batch: int
    len_q: int
    heads_q: int
    heads_kv: int
    head_dim: int
    kv_len: int
    ragged: bool
    dtype: str

    @property
    def cache_seqlens(self) -> tuple[int, ...]:
        if self.ragged:
            return ragged_lengths(self.batch, self.kv_len, self.len_q)
        return (self.kv_len,) * self.batch

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def cache_bytes(self) -> int:
        """The K and V caches as allocated (kv_len positions a sequence)."""
        return kv_cache_bytes(self.batch, self.heads_kv, self.kv_len, self.head_dim, self.dtype_bytes)

    def row(self) -> dict:
        """The point's key columns (`KEY`), and its cache lengths' sum (`total_kv`)."""
        return {"B": self.batch, "L_q": self.len_q, "H_q": self.heads_q, "H_kv": self.heads_kv,
                "d": self.head_dim, "kv_len": self.kv_len, "ragged": self.ragged, "dtype": self.dtype,
                "total_kv": sum(self.cache_seqlens)}


def points(grid: dict, max_cache_bytes: int) -> list[DecodePoint]:
    """Every point of a grid (the keys len_q, kv_len, batch, heads, head_dims, dtypes, ragged) whose
    caches fit `max_cache_bytes`, in that order; a batch of one once (never ragged), and no point
    whose cache is shorter than its query."""
    found = []
    for len_q, kv_len, batch, (heads_q, heads_kv), d, dtype, ragged in itertools.product(
            grid["len_q"], grid["kv_len"], grid["batch"], grid["heads"], grid["head_dims"], grid["dtypes"],
            grid["ragged"]):
        if heads_q % heads_kv:
            raise ValueError(f"decode heads {[heads_q, heads_kv]}: the query heads must be a multiple of "
                             "the KV heads")
        if (ragged and batch == 1) or kv_len < len_q:
            continue
        point = DecodePoint(batch, len_q, heads_q, heads_kv, d, kv_len, bool(ragged), dtype)
        if point.cache_bytes <= max_cache_bytes:
            found.append(point)
    return found
