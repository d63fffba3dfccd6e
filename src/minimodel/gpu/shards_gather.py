"""A GPU stage's shards (`minimodel.gpu.shards`) written, read back and gathered into the stage's
tables, exactly those the unsharded stage writes (`gpu/correctness`, `gpu/timing` with its
samples, `gpu/bytes`), so that what reads them reads them unchanged.

A shard writes one file (`write_shard`): its rows as the stage built them, and beside them where
each stands in the whole stage's table (`order`), so that the gather puts every row back in the
unsharded stage's order, builds its table from the same rows, and writes the same bytes. JSON
keeps every value as Python holds it (a CSV read back would not: 64 or 64.0, a float's last digit).

The gather refuses (`GatherError`, nothing written) to set shards that ran on different GPU
models, drivers or torch and Triton versions in one timing or DRAM-bytes table, naming the shards
and what differs; and shards that leave out or repeat part of the stage's work.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from minimodel.floor import contract
from minimodel.floor.provenance.io import atomic_write
from minimodel.floor.provenance.reading import load_manifest
from minimodel.gpu import grids

# What a shard's manifest says of its machine, compared across the shards of a timing or DRAM-bytes
# table: (what it is called in a refusal, how it is read from the manifest's environment)
MACHINE = (("GPU model", lambda env: (env.get("gpu") or {}).get("name")),
           ("GPU driver", lambda env: (env.get("gpu") or {}).get("driver")),
           ("CUDA runtime", lambda env: (env.get("gpu") or {}).get("cuda_runtime")),
           ("torch", lambda env: env.get("torch")),
           ("triton", lambda env: env.get("triton")))


class GatherError(ValueError):
    """The shards cannot make one table (the message names them and why)."""


def _plain(value):
    if hasattr(value, "item"):  # a numpy scalar: the Python value it holds
        return value.item()
    raise TypeError(f"a shard's rows hold {type(value).__name__} {value!r}, which JSON does not keep")


def write_shard(path: str | Path, shard: dict) -> None:
    """A shard's file, complete or not at all."""
    with atomic_write(path) as fh:
        json.dump(shard, fh, default=_plain)


def read_shards(paths) -> list[dict]:
    """Each shard's file, with its name (its folder) and its manifest's environment."""
    shards = []
    for path in paths:
        shard = json.loads(Path(path).read_text())
        shard["name"] = Path(path).parent.name
        shard["environment"] = load_manifest(Path(path).parent / "manifest.json")["environment"]
        shards.append(shard)
    return shards


def check_one_machine(shards: list[dict], table: str) -> None:
    """Refuse shards whose GPU model, driver, CUDA runtime, torch or Triton differ."""
    for what, read in MACHINE:
        seen: dict = {}
        for shard in shards:
            seen.setdefault(read(shard["environment"]), []).append(shard["name"])
        if len(seen) > 1:
            said = "; ".join(f"{value!r} (shard{'s' if len(names) > 1 else ''} {', '.join(names)})"
                             for value, names in seen.items())
            raise GatherError(f"refusing to gather {table} from shards run with different {what}s: {said}. "
                              "One table holds one machine's numbers: run the shards on one GPU model "
                              "(the SLURM profile's gpu_model or constraint), or re-run those that differ")


def ordered(shards: list[dict], rows: str = "rows", order: str = "order") -> list[tuple[int, dict]]:
    """Every shard's `rows`, each with its shard's position in `shards`, in the whole stage's order
    (each row's `order`; rows of one place keep their shard's order)."""
    keyed = []
    for s, shard in enumerate(shards):
        if len(shard[rows]) != len(shard[order]):
            raise GatherError(f"shard {shard['name']}: {len(shard[rows])} {rows}, "
                              f"but {len(shard[order])} places for them")
        keyed += [(key if isinstance(key, list) else [key], s, row)
                  for key, row in zip(shard[order], shard[rows], strict=True)]
    keyed.sort(key=lambda k: k[0])
    return [(s, row) for _, s, row in keyed]


def _check_cover(shards: list[dict], want: list, got: str, what: str) -> None:
    """Every unit of work in `want` done by exactly one shard (`got`: the list each shard did)."""
    by_unit: dict = {}
    for shard in shards:
        for unit in shard[got]:
            by_unit.setdefault(json.dumps(unit), []).append(shard["name"])
    doubled = {u: names for u, names in by_unit.items() if len(names) > 1}
    missing = [u for u in map(json.dumps, want) if u not in by_unit]
    extra = [u for u in by_unit if u not in set(map(json.dumps, want))]
    if doubled or missing or extra:
        raise GatherError(f"the shards do not cover the stage's {what} once each: "
                          + "; ".join([*(f"{u} in {', '.join(n)}" for u, n in list(doubled.items())[:3]),
                                       *(f"{u} in none" for u in missing[:3]),
                                       *(f"{u} not the config's" for u in extra[:3])]))


# ---- timing ---------------------------------------------------------------------------------
def timing_order(cfg: dict, rows: list[dict], measured: bool) -> list[tuple[int, int]]:
    """Where each of a timing shard's rows (or samples) stands in the whole stage's table: by its
    point's index, then its pass (`measured`), or by its pass, then its point (the no-GPU table:
    `grids.no_gpu_timing_rows`)."""
    rank = {(p.point.grid, p.point.N, p.point.d, p.point.causal, p.direction):
            (p.index, contract.DIRECTIONS.index(p.direction)) for p in grids.passes(cfg)}
    keys = [rank[r["grid"], r["N"], r["d"], r["causal"], r.get("direction", contract.FORWARD)] for r in rows]
    return keys if measured else [(direction, index) for index, direction in keys]


def timing(shards: list[dict], cfg: dict, cpu_prediction, random_seed: int) -> tuple[list, list, dict]:
    """(rows, samples, summary) of the timing stage from its shards; `cfg` the whole gpu.timing."""
    _check_cover(shards, [p.as_list() for p in grids.passes(cfg)], "passes", "passes")
    measured = [s for s in shards if s["result"]["device"] is not None]
    if measured:
        check_one_machine(shards, contract.TIMING)
    rows = [row for _, row in ordered(shards)]
    if not measured:
        return rows, [], {"device": None, "status": contract.NO_GPU_TIMING,
                          "lab01_prediction_from_cpu_ceilings": cpu_prediction}
    samples = [row for _, row in ordered(shards, "samples", "sample_order")]
    first = min(shards, key=lambda s: min(map(list, s["order"]), default=[math.inf]))
    seconds: dict[str, float] = {}
    for shard in shards:
        for what, s in shard["result"]["seconds"].items():
            seconds[what] = seconds.get(what, 0.0) + s
    by_place = sorted(shards, key=lambda s: min(map(list, s["order"]), default=[math.inf]))
    summary = {key: first["result"][key] for key in ("device", "torch", "triton")}
    summary.update({
        "directions": list(grids.directions(cfg)),
        "device_l2_bytes": first["result"]["device_l2_bytes"],
        # the shard of the stage's first passes: its ceilings, as the unsharded stage measures them
        # before its first point; each shard's own, against which its rows are rated, under `shards`
        "ceilings": first["result"]["ceilings"],
        "lab_grid_predictions_from_gpu_ceilings": [
            p for s in by_place for p in s["result"]["lab_grid_predictions_from_gpu_ceilings"]],
        "lab01_prediction_from_cpu_ceilings": cpu_prediction,
        "seconds": {what: round(s, 1) for what, s in sorted(seconds.items(), key=lambda kv: -kv[1])},
        "random_seed": random_seed,
        "shards": {s["name"]: {"wall_s": s["wall_s"], "gpu_slot": s.get("gpu_slot"),
                               "ceilings": s["result"]["ceilings"]} for s in by_place},
    })
    return rows, samples, summary


# ---- correctness ------------------------------------------------------------------------------
def correctness(shards: list[dict]) -> tuple[list[dict], str, int | None]:
    """(rows, backend, the device's L2) of the correctness sweep from its shards."""
    backends = {s["backend"] for s in shards}
    if len(backends) > 1:
        raise GatherError("refusing to gather the correctness sweep from shards that ran on different "
                          "backends: " + "; ".join(f"{s['name']}: {s['backend']}" for s in shards))
    l2 = next((s["device_l2_bytes"] for s in shards if s["device_l2_bytes"] is not None), None)
    return [row for _, row in ordered(shards)], backends.pop(), l2


# ---- DRAM bytes -------------------------------------------------------------------------------
def dram_bytes(shards: list[dict]) -> tuple[list[dict], list[dict], dict]:
    """(rows, kernels, a shard's summary: the first that measured, else the first) of the DRAM-bytes
    stage from its shards: each kernel's `row` (its shard's row) made its row's place in the
    gathered table, the kernels in the unsharded stage's order (the project's rows, then each
    contender's)."""
    if any(s["summary"]["measured"] for s in shards):
        check_one_machine(shards, contract.GPU_BYTES)
    placed = ordered(shards)
    rows = [row for _, row in placed]
    where: dict[tuple[int, int], int] = {}
    seen = [0] * len(shards)
    for position, (s, _) in enumerate(placed):
        where[s, seen[s]] = position
        seen[s] += 1
    contenders = list(dict.fromkeys(r["impl"] for r in rows if r["impl"] not in contract.BYTES_SCHEMES))
    kernels = []
    for s, shard in enumerate(shards):
        for kernel in shard["kernels"]:
            row = kernel.get("row")
            if row is not None and not (isinstance(row, float) and math.isnan(row)):
                kernel = {**kernel, "row": where[s, int(row)]}
            kernels.append(kernel)

    def group(kernel):
        row = kernel.get("row")
        if not isinstance(row, int):
            return (len(contenders) + 1, 0)
        impl = rows[row]["impl"]
        return (0 if impl in contract.BYTES_SCHEMES else 1 + contenders.index(impl), row)

    kernels.sort(key=group)
    summary = next((s["summary"] for s in shards if s["summary"]["measured"]), shards[0]["summary"])
    return rows, kernels, summary
