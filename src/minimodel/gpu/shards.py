"""The GPU stages split into shards that run side by side (on a cluster's GPUs or a host's), then
gathered into the stage's one table (`minimodel.gpu.shards_gather`).

A shard is a selection of a stage's work by the values of some keys (the config's `gpu.shards`):
- timing (`gpu_timing_shard`): a pass's `grid`, head dim `d`, `causal` and `direction`. Every
  implementation at a point, and all its interleaved samples, stay in one shard, so that every
  ratio is measured side by side in one process, as in the whole stage;
- correctness (`gpu_correctness_shard`): a case's `group` (lab grid, awkward N, head dim,
  grouped heads), `direction` and `dtype`;
- DRAM bytes (`gpu_bytes_shard`): a row's `regime` (one head, many heads), `d` and `direction`.
The shards of a stage are the distinct values those keys take over its work, in the order the
whole stage meets them (`plan`); no key at all makes one shard, the whole stage. Each shard's
inputs are those of the whole stage (a timing point's seed is its index in the whole grid, a
correctness case's inputs come after those of the cases before it), so the gathered tables equal
the unsharded stage's in every column but the measured times.

This module imports no torch: the workflow's own process reads it to name the shards.
"""

from __future__ import annotations

import re

from minimodel.floor import contract
from minimodel.gpu import grids
from minimodel.gpu.correctness_plan import backward_cases, sweep_cases

STAGES = ("correctness", "timing", "bytes")
KEYS = {"correctness": ("group", "direction", "dtype"),
        "timing": ("grid", "d", "causal", "direction"),
        "bytes": ("regime", "d", "direction")}
# the keys of gpu.timing that give its points: a timing shard's config lists its passes instead
POINT_KEYS = ("lab_batch", "lab_heads", "lab_n", "lab_head_dim", "fa_tokens", "fa_model_dim", "fa_n",
              "fa_head_dims")
WHOLE = "all"  # the one shard of a stage split by no key


def items(stage: str, cfg: dict) -> list[dict]:
    """Each unit of `stage`'s work (a timing pass, a correctness case in a pass, a DRAM-bytes point
    in a pass) as its shard keys' values, in the whole stage's order; `cfg` is the stage's section
    of the config (gpu.timing, ...)."""
    if stage == "timing":
        return [{"grid": p.point.grid, "d": p.point.d, "causal": p.point.causal, "direction": p.direction}
                for p in grids.passes(cfg)]
    if stage == "correctness":
        # the sweep on a GPU: under the interpreter it runs a part of the same cases
        return ([{**c, "direction": contract.FORWARD} for c in sweep_cases(cfg, "cuda")]
                + [{**c, "direction": contract.BACKWARD} for c in backward_cases(cfg, "cuda")])
    if stage == "bytes":
        return [{"regime": regime, "d": d, "direction": direction}
                for direction in (contract.FORWARD, contract.BACKWARD)
                for regime in contract.BYTES_REGIMES for d in cfg["head_dims"]]
    raise ValueError(f"no GPU stage {stage!r}; accepted: {', '.join(STAGES)}")


def _part(key: str, value) -> str:
    if key == "d":
        return f"d{value}"
    if key == "causal":
        return "causal" if value else "noncausal"
    return re.sub(r"[^a-z0-9]+", "_", str(value).lower()).strip("_")


def name(selection: dict) -> str:
    """A shard's name, its folder's: its keys' values ("flashattention-d128-fwd_bwd"), or `WHOLE`."""
    return "-".join(_part(k, v) for k, v in selection.items()) or WHOLE


def plan(stage: str, cfg: dict, keys) -> dict[str, dict]:
    """name -> selection (key -> value) of each shard of `stage`, split by `keys`, in the order the
    whole stage meets them."""
    unknown = [k for k in keys if k not in KEYS[stage]]
    if unknown:
        raise ValueError(f"gpu.shards.{stage}: {', '.join(map(repr, unknown))} is no key of the stage's "
                         f"work; accepted: {', '.join(KEYS[stage])}")
    shards: dict[str, dict] = {}
    for item in items(stage, cfg):
        selection = {k: item[k] for k in keys}
        shards.setdefault(name(selection), selection)
    return shards or {WHOLE: {}}


def selects(selection: dict, item: dict) -> bool:
    return all(item[k] == v for k, v in selection.items())


def shard_config(stage: str, cfg: dict, selection: dict) -> dict:
    """The config a shard runs: the stage's, with the shard's `selection` (`shard`). A timing
    shard's lists its passes (`passes`, each with its point's index in the whole grid) in place
    of the grids, so that a change of the grids re-runs only the shards whose passes it changes."""
    if stage != "timing":
        return {**cfg, "shard": selection}
    mine = [p.as_list() for p, item in zip(grids.passes(cfg), items(stage, cfg), strict=True)
            if selects(selection, item)]
    return {**{k: v for k, v in cfg.items() if k not in POINT_KEYS}, "shard": selection, "passes": mine}
