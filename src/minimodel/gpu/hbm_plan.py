"""The points of the DRAM-bytes stage (`minimodel.gpu.hbm`), and the byte model beside each row,
in each pass (`direction`).

The points (`plan`): N × d × causal × two head counts, batch 1, float16:
- "one head": Q, K, V, O, and up to N ≈ 4096 even S, fit in the L2 cache;
- "many heads": enough heads that each of Q, K, V and O alone is `many_heads_l2_multiple` L2s,
  so neither the inputs nor the output can stay in it.
The rows, in the order they are measured (row i's inputs are drawn from random_seed + i): the
forward's of the model's two schemes at each point (`contract.BYTES_SCHEMES`: naive, and the
kernel as `flash`), then each contender's at every point, then the backward's of the two schemes.

The model beside a row (`model_columns`), for all its heads, with the tile the kernel really ran:
- the forward: the closed forms of `minimodel.floor.byte_model.forward` in both conventions
  (`contract.CONVENTIONS`: the lab's formulas and the consistent one). A contender's tiles are
  not known: its rows carry the compulsory bytes (Q, K, V read once, O written once) and no model;
- the backward (naive: theory 02's naive backward from P as the naive forward stores it; flash:
  the kernel's preprocess, dK/dV kernel and dQ kernel, the model's separate dQ pass,
  `contract.DQ_SEPARATE_PASS`, or, where the kernel that ran adds dQ in its dK/dV kernel
  (`BwdConfig.dq` "in_kernel", by TMA reductions), `contract.DQ_IN_L2`): every
  read and write of `minimodel.floor.byte_model.backward`, the
  gradients' final writes included (`bytes_by_rw`), and, as `model_consistent_bytes`, the
  consistent total that leaves them out; the lab has no backward formulas (`model_lab_bytes`
  empty). The flash model's tile is the dK/dV kernel's (BLOCK_M1 query rows past BLOCK_N1 key rows).
Causal rows are set beside the non-causal model: a causal kernel skips the key tiles above the
diagonal (flash reads about half the K/V), a causal naive adds a pass over S for the mask.
"""

from __future__ import annotations

import math

from minimodel.floor import contract
from minimodel.floor.byte_model import backward as backward_model
from minimodel.floor.byte_model import forward as forward_model
from minimodel.gpu import ncu as ncu_tool
from minimodel.gpu.ncu import NCU_METRICS, NCU_OPTIONS

DTYPE = "float16"
# why a row was not measured, where the stage measured nothing
NO_CUDA = f"{contract.NOT_MEASURED}: no CUDA device on this machine"
NO_NCU = (f"{contract.NOT_MEASURED}: Nsight Compute (ncu) was not found on PATH, in $CUDA_HOME/bin or "
          "/usr/local/cuda/bin; set gpu.bytes.ncu to its path")
REGIMES = contract.BYTES_REGIMES
ELEMENT_BYTES = forward_model.DTYPE_BYTES[DTYPE]
MODEL_COLUMNS = ("model_B_r", "model_B_c", "model_read_bytes", "model_write_bytes",
                 *(f"model_{convention}_bytes" for convention in contract.CONVENTIONS))
# the flash backward's dQ accumulation as the kernel runs it, the model it is set beside
DQ = {contract.NAIVE_SCHEME: None, contract.FLASH_SCHEME: contract.DQ_SEPARATE_PASS}


def many_heads(n: int, d: int, l2_bytes: int, multiple: float) -> int:
    """Heads that make one (1, H, N, d) float16 tensor `multiple` times the L2."""
    return max(1, math.ceil(multiple * l2_bytes / (n * d * ELEMENT_BYTES)))


def device_bytes(impl: str, heads: int, n: int, d: int, direction: str = contract.FORWARD) -> int:
    """What one call holds on the device. The forward: Q, K, V, O, and naive's S and P (and a
    causal mask); the backward: Q, K, V, O, dO, dQ, dK, dV, the float32 LSE and D, and naive's S
    and P kept by autograd, its dP and dS (and a causal mask)."""
    naive = impl == contract.NAIVE_SCHEME
    if direction == contract.FORWARD:
        return 4 * heads * n * d * ELEMENT_BYTES + naive * (2 * heads * n * n * ELEMENT_BYTES + n * n)
    return (8 * heads * n * d * ELEMENT_BYTES + 2 * heads * n * 4
            + naive * (4 * heads * n * n * ELEMENT_BYTES + n * n))


def plan(cfg: dict, l2_bytes: int, contenders=()) -> list[dict]:
    """Every point of `gpu.bytes`, one row per implementation and pass, in the order they are
    measured (module docstring); contenders are `minimodel.contenders.Contender`s. A shard's
    config (`shard`: key -> value of a row, `minimodel.gpu.shards`) keeps the rows it selects."""
    return [row for _, row in plan_indexed(cfg, l2_bytes, contenders)]


def plan_indexed(cfg: dict, l2_bytes: int, contenders=()) -> list[tuple[int, dict]]:
    """`plan`'s rows, each with its index in the whole plan: row i's inputs are drawn from
    random_seed + i, in a shard as in the whole stage."""
    selection = cfg.get("shard") or {}
    return [(i, row) for i, row in enumerate(_whole_plan(cfg, l2_bytes, contenders))
            if all(row[key] == value for key, value in selection.items())]


def _whole_plan(cfg: dict, l2_bytes: int, contenders=()) -> list[dict]:
    points = []
    for regime in REGIMES:
        for d in cfg["head_dims"]:
            for n in cfg["n"]:
                heads = 1 if regime == "one head" else many_heads(
                    n, d, l2_bytes, cfg["many_heads_l2_multiple"])
                points += [{"regime": regime, "B": 1, "H": heads, "N": n, "d": d, "causal": causal}
                           for causal in (False, True)]
    forward = {"direction": contract.FORWARD}
    rows = [{**point, "impl": impl, **forward} for point in points for impl in contract.BYTES_SCHEMES]
    rows += [{**point, "impl": c.name, **forward} for c in contenders for point in points]
    # last: the forward's rows keep their index and seed
    rows += [{**point, "impl": impl, "direction": contract.BACKWARD, "dq_accumulation": DQ[impl] or ""}
             for point in points for impl in contract.BYTES_SCHEMES]
    return [{**row, "dtype": DTYPE, "device_bytes": device_bytes(row["impl"], row["H"], row["N"], row["d"],
                                                                 row["direction"])} for row in rows]


def compulsory_bytes(n: int, d: int, direction: str) -> float:
    """The least a call moves: the forward's Q, K, V read once and O written once; the backward's
    Q, K, V, O and dO read once, dQ, dK and dV written once."""
    if direction == contract.FORWARD:
        return forward_model.compulsory_bytes(n, d, ELEMENT_BYTES)
    return float(8 * n * d * ELEMENT_BYTES)


def model_columns(row: dict, block_m: int, block_n: int) -> dict:
    """The byte model at the row's point and pass, for all its heads, with the tile the kernel ran
    (module docstring); a contender's row gets the compulsory bytes only."""
    n, d, heads, direction = row["N"], row["d"], row["B"] * row["H"], row.get("direction", contract.FORWARD)
    compulsory = heads * compulsory_bytes(n, d, direction)
    if row["impl"] not in contract.BYTES_SCHEMES:
        return {**dict.fromkeys(MODEL_COLUMNS), "compulsory_bytes": compulsory}
    flash = row["impl"] == contract.FLASH_SCHEME
    tile = (block_m, block_n) if flash else (1, 1)  # naive has no tile
    if direction == contract.FORWARD:
        by_rw = forward_model.model_bytes_by_direction(row["impl"], n, d, *tile, ELEMENT_BYTES)
        conventions = {f"model_{convention}_bytes": heads * forward_model.model_bytes(
            row["impl"], n, d, *tile, ELEMENT_BYTES, convention) for convention in contract.CONVENTIONS}
    else:
        dq = row.get("dq_accumulation") or DQ[row["impl"]]  # the kernel's own where it ran (`hbm.measure`)
        by_rw = backward_model.bytes_by_rw(row["impl"], n, d, *tile, ELEMENT_BYTES, direction, dq)
        conventions = {f"model_{contract.LAB_CONVENTION}_bytes": None,
                       f"model_{contract.CONSISTENT_CONVENTION}_bytes": heads * backward_model.model_bytes(
                           row["impl"], n, d, *tile, ELEMENT_BYTES, direction, dq)}
    return {"model_B_r": tile[0] if flash else None, "model_B_c": tile[1] if flash else None,
            "model_read_bytes": heads * by_rw["R"], "model_write_bytes": heads * by_rw["W"],
            **conventions, "compulsory_bytes": compulsory}


def planned_rows(cfg: dict, l2_bytes: int, reason: str, contenders=()) -> list[dict]:
    """The plan with the model beside it and `reason` as every row's status: nothing measured."""
    return [{**row, "status": reason, "kernels": None, **dict.fromkeys(NCU_METRICS.values()),
             **model_columns(row, *contract.LAB_TILE)} for row in plan(cfg, l2_bytes, contenders)]


def summary(table, ncu: str | None, l2_bytes: int) -> dict:
    """What the stage did (`table`: its rows' frame): measured or why not, with ncu, its options,
    and the device's L2. Torch is imported only where rows were measured, on the device."""
    statuses = table["status"].value_counts().to_dict()
    measured = int(statuses.get(contract.MEASURED, 0))
    device, device_l2 = None, None
    if measured:
        import torch  # not at the top: a job that measured nothing imports no torch

        props = torch.cuda.get_device_properties(0)
        device, device_l2 = props.name, int(props.L2_cache_size)  # beside the plan's assumed l2_bytes
    status = contract.MEASURED if measured else next(iter(statuses), "no points")
    contenders = [i for i in dict.fromkeys(table["impl"]) if i not in contract.BYTES_SCHEMES]
    return {"status": status, "contenders": contenders, "measured": measured, "statuses": statuses,
            "device": device, "device_l2_bytes": device_l2, "plan_l2_bytes": l2_bytes, "ncu": ncu,
            "ncu_version": ncu_tool.ncu_version(ncu) if measured else None,
            "ncu_options": NCU_OPTIONS, "metrics": NCU_METRICS, "dtype": DTYPE}
