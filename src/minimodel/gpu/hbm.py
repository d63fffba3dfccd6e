"""The GPU's own DRAM bytes (notes/labs.md, lab 01, asked on the device the byte model is about).

Nsight Compute (ncu) reads the DRAM counters of every kernel the naive reference and the Triton
kernel launch; their sums per call are set beside the closed-form model of `minimodel.symbolic`,
in both conventions (`contract.CONVENTIONS`: the lab's formulas and the consistent one), with
the tile the kernel really ran.

The points (`plan`): N × d × causal × two head counts × {naive, flash}, batch 1, float16.
- "one head": Q, K, V, O, and up to N ≈ 4096 even S, fit in the L2 cache;
- "many heads": enough heads that each of Q, K, V and O alone is `many_heads_l2_multiple` L2s,
  so neither the inputs nor the output can stay in it.

How a measurement is made (`measure`): the plan is written to a file and
`ncu --nvtx --nvtx-include minimodel_bytes/ ... python -m minimodel.gpu.hbm PLAN` runs `probe`:
for each point, fresh inputs are drawn and the implementation runs once unprofiled (compilation,
library set-up), then a marker kernel and the implementation run inside the NVTX range
`minimodel_bytes`, which is all ncu profiles. `parse_ncu_csv` reads ncu's table; `assign` cuts its
kernels at the markers, in plan order, and refuses a count that does not match. ncu replays
kernels, so nothing here is a timing.

What the counters mean (`NCU_OPTIONS`): ncu flushes the caches before every kernel
(`--cache-control all`) and leaves the clocks as they are (`--clock-control none`). A kernel's
DRAM reads are therefore what it fetched itself, from a cold L2. A write reaches DRAM when a
dirty line leaves the L2: what is still in the L2 when a kernel ends (up to one L2) is written
back after it, uncounted. So the bytes the SMs stored into the L2 (`l2_write_bytes`) are measured
beside them: every stored byte reaches DRAM in the end, whether during the kernel or after it.

Without CUDA, without ncu, or without permission to read the counters, `planned_rows` gives
the same points with a status that says why nothing was measured.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from minimodel import contract, symbolic
from minimodel.provenance import project

DTYPE = "float16"
REGIMES = ("one head", "many heads")
# the schemes of minimodel.symbolic they are compared with
IMPLEMENTATIONS = (contract.NAIVE_SCHEME, contract.FLASH_SCHEME)
NVTX_RANGE = "minimodel_bytes"
MARKER = "minimodel_bytes_marker"  # the name of the marker kernel (a Triton function's name)
# metric -> column, in bytes (sectors are 32 bytes). l2_write_bytes: what the SMs stored into the
# L2, which reaches DRAM sooner or later (on the H200 it equals the model's writes: S, P and O).
NCU_METRICS = {
    "dram__bytes_read.sum": "dram_read_bytes",
    "dram__bytes_write.sum": "dram_write_bytes",
    "lts__t_sectors_srcunit_tex_op_write.sum": "l2_write_bytes",
}
SECTOR_BYTES = 32
KERNEL_COLUMNS = ["row", "id", "kernel", *NCU_METRICS.values()]  # kernels.csv: row = the plan's row
NCU_OPTIONS = ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--cache-control", "all",
               "--clock-control", "none", "--replay-mode", "kernel"]
MEASURED = contract.MEASURED
LAB_TILE = contract.LAB_TILE  # the model's tile where no kernel ran
# DRAM writes cannot exceed what the kernels stored (ncu flushes the L2 before each kernel): rows
# where they do saw traffic from outside the call, and are not used.
FOREIGN_WRITES = ("suspect: DRAM took {ratio:.1f}x the bytes the kernels stored; the excess came "
                  "from outside the profiled call")
FOREIGN_WRITE_SLACK = (1.05, 2**20)  # (ratio, bytes) of DRAM writes over stores still accepted
NO_CUDA = f"{contract.NOT_MEASURED}: no CUDA device on this machine"
NO_NCU = (f"{contract.NOT_MEASURED}: Nsight Compute (ncu) was not found on PATH, in $CUDA_HOME/bin or "
          "/usr/local/cuda/bin; set gpu.bytes.ncu to its path")
NO_PERMISSION = (f"{contract.NOT_MEASURED}: ncu may not read the GPU's performance counters here "
                 "(ERR_NVGPUCTRPERM; an administrator can allow it for all users)")
ELEMENT_BYTES = symbolic.DTYPE_BYTES[DTYPE]


class ProbeMismatch(RuntimeError):
    """ncu's kernels do not line up with the plan: no number is assigned to a wrong point."""


def many_heads(n: int, d: int, l2_bytes: int, multiple: float) -> int:
    """Heads that make one (1, H, N, d) float16 tensor `multiple` times the L2."""
    return max(1, math.ceil(multiple * l2_bytes / (n * d * ELEMENT_BYTES)))


def device_bytes(impl: str, heads: int, n: int, d: int) -> int:
    """What one call holds on the device: Q, K, V, O, and naive's S and P (and a causal mask)."""
    tensors = 4 * heads * n * d * ELEMENT_BYTES
    if impl == contract.NAIVE_SCHEME:
        tensors += 2 * heads * n * n * ELEMENT_BYTES + n * n  # S, P, and a bool mask
    return tensors


def plan(cfg: dict, l2_bytes: int) -> list[dict]:
    """Every point of `gpu.bytes`, one row per implementation, in the order they are measured."""
    rows = []
    for regime in REGIMES:
        for d in cfg["head_dims"]:
            for n in cfg["n"]:
                heads = 1 if regime == "one head" else many_heads(
                    n, d, l2_bytes, cfg["many_heads_l2_multiple"])
                for causal in (False, True):
                    for impl in IMPLEMENTATIONS:
                        rows.append({"regime": regime, "B": 1, "H": heads, "N": n, "d": d,
                                     "causal": causal, "impl": impl, "dtype": DTYPE,
                                     "device_bytes": device_bytes(impl, heads, n, d)})
    return rows


def model_columns(row: dict, block_m: int, block_n: int) -> dict:
    """The byte model at the row's point, for all its heads, with the tile the kernel ran.

    The model counts non-causal attention: a causal kernel skips the key tiles above the
    diagonal (flash reads about half the K/V), a causal naive adds a pass over S for the mask.
    """
    n, d, heads = row["N"], row["d"], row["B"] * row["H"]
    flash = row["impl"] == contract.FLASH_SCHEME
    tile = (block_m, block_n) if flash else (1, 1)  # naive has no tile
    by_direction = symbolic.model_bytes_by_direction(row["impl"], n, d, *tile, ELEMENT_BYTES)
    return {
        "model_B_r": tile[0] if flash else None,
        "model_B_c": tile[1] if flash else None,
        "model_read_bytes": heads * by_direction["R"],
        "model_write_bytes": heads * by_direction["W"],
        **{f"model_{convention}_bytes": heads * symbolic.model_bytes(row["impl"], n, d, *tile,
                                                                      ELEMENT_BYTES, convention)
           for convention in contract.CONVENTIONS},
        "compulsory_bytes": heads * symbolic.compulsory_bytes(n, d, ELEMENT_BYTES),
    }


def planned_rows(cfg: dict, l2_bytes: int, reason: str) -> list[dict]:
    """The plan with the model beside it and `reason` as every row's status: nothing measured."""
    rows = []
    for row in plan(cfg, l2_bytes):
        rows.append({**row, "status": reason, "kernels": None, **dict.fromkeys(NCU_METRICS.values()),
                     **model_columns(row, *LAB_TILE)})
    return rows


def find_ncu(configured: str | None = None) -> str | None:
    """gpu.bytes.ncu if set, else ncu on PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin."""
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise FileNotFoundError(f"gpu.bytes.ncu: {configured} is not an executable file; "
                                    "set it to Nsight Compute's ncu, or to null to search for it")
        return str(path)
    candidates = [shutil.which("ncu")]
    candidates += [str(Path(root) / "bin" / "ncu") for root in
                   (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if root]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


# ---- the profiled process -------------------------------------------------------------------

def _implementation(impl: str, causal: bool):
    from minimodel.cpu.references import attn_naive
    from minimodel.kernel import flash_attn_forward

    if impl == contract.NAIVE_SCHEME:  # theory 02's three steps, the softmax in fp16 storage
        return lambda q, k, v: attn_naive(q, k, v, causal=causal, fp32_softmax=False)
    return lambda q, k, v: flash_attn_forward(q, k, v, causal=causal)


def probe(rows: list[dict], random_seed: int) -> None:
    """Run every row whose status is `MEASURED`: once unprofiled, then marked in the NVTX range."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def minimodel_bytes_marker(X):
        tl.store(X, 1)

    marker_buffer = torch.zeros(1, device="cuda", dtype=torch.int32)
    for i, row in enumerate(rows):
        if row["status"] != MEASURED:
            continue
        gen = torch.Generator(device="cuda").manual_seed(random_seed + i)
        q, k, v = (torch.randn(row["B"], row["H"], row["N"], row["d"], device="cuda",
                               dtype=getattr(torch, row["dtype"]), generator=gen) for _ in range(3))
        fn = _implementation(row["impl"], row["causal"])
        with torch.no_grad():
            fn(q, k, v)  # compiles, sets up libraries: nothing of it in the profiled range
            torch.cuda.synchronize()
            with torch.cuda.nvtx.range(NVTX_RANGE):
                minimodel_bytes_marker[(1,)](marker_buffer)
                out = fn(q, k, v)
                torch.cuda.synchronize()
        # kept in PyTorch's cache, not handed back to the driver: on the H200 a profiled kernel
        # that ran after 50 GB had been freed saw 17-32x its own stores written to DRAM (the
        # freed memory being cleared beside it, counted by the device-wide DRAM counters)
        del q, k, v, out


# ---- reading ncu's table --------------------------------------------------------------------

def _number(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).replace(",", "").strip()
    return float(text) if text not in ("", "n/a") else math.nan


def parse_ncu_csv(text: str) -> pd.DataFrame:
    """ncu's CSV (`--page raw`, one row per kernel, or `--page details`, one row per metric) as
    one row per profiled kernel: id, name, and a column per metric of `NCU_METRICS`, in bytes."""
    start = text.find('"ID"')
    if start < 0:
        raise ProbeMismatch("ncu wrote no table of kernels (no profiled kernel, or an error): "
                            + text.strip()[-500:])
    table = pd.read_csv(io.StringIO(text[start:]), dtype=str, keep_default_na=False)
    if "Metric Name" in table.columns:  # details page: long form
        table = table[table["Metric Name"].isin(NCU_METRICS)]
        wide = table.pivot_table(index=["ID", "Kernel Name"], columns="Metric Name",
                                 values="Metric Value", aggfunc="first").reset_index()
        units = table.groupby("Metric Name")["Metric Unit"].first().to_dict()
    else:  # raw page: the first row holds the units
        units = table.iloc[0].to_dict()
        wide = table.iloc[1:]
    missing = [m for m in NCU_METRICS if m not in wide.columns]
    if missing:
        raise ProbeMismatch(f"ncu's table lacks the metrics {missing}; it has {list(wide.columns)}")
    kernels = pd.DataFrame({"id": wide["ID"].map(_number).astype(int),
                            "kernel": wide["Kernel Name"].astype(str)})
    for metric, column in NCU_METRICS.items():
        values = wide[metric].map(_number).to_numpy()
        unit = str(units.get(metric, "")).strip().lower()
        if unit == "sector":
            values = values * SECTOR_BYTES
        elif unit not in ("byte", "bytes", ""):
            raise ProbeMismatch(f"{metric} came in {unit!r}; run ncu with --print-units base")
        kernels[column] = values
    return kernels.sort_values("id").reset_index(drop=True)


def assign(kernels: pd.DataFrame, rows: list[dict]) -> list[dict]:
    """Sum each measured row's kernels: the kernels after each marker, markers in plan order.

    Fills the rows in place and gives `kernels` a column `row`, the plan row of each kernel
    (empty for the markers).
    """
    measured = [r for r in rows if r["status"] == MEASURED]
    groups: list[list[dict]] = []
    for kernel in kernels.to_dict("records"):
        if kernel["kernel"].split("(")[0].strip() == MARKER:
            groups.append([])
        elif not groups:
            raise ProbeMismatch(f"kernel {kernel['kernel']!r} was profiled before the first marker")
        else:
            groups[-1].append(kernel)
    if len(groups) != len(measured):
        raise ProbeMismatch(f"ncu profiled {len(groups)} marked calls, the plan measured "
                            f"{len(measured)}: the kernels cannot be assigned to points")
    position = {id(r): i for i, r in enumerate(rows)}
    row_of = {}
    for row, group in zip(measured, groups, strict=True):
        if not group:
            raise ProbeMismatch(f"no kernel was profiled for {row}")
        row_of.update({k["id"]: position[id(row)] for k in group})
        row["kernels"] = len(group)
        row["kernel_names"] = "; ".join(k["kernel"].split("(")[0][:80] for k in group)
        for column in NCU_METRICS.values():
            row[column] = float(sum(k[column] for k in group))
        ratio, extra = FOREIGN_WRITE_SLACK
        if row["dram_write_bytes"] > ratio * row["l2_write_bytes"] + extra:
            row["status"] = FOREIGN_WRITES.format(ratio=row["dram_write_bytes"] / row["l2_write_bytes"])
    kernels.insert(0, "row", kernels["id"].map(row_of))
    return rows


# ---- the stage ------------------------------------------------------------------------------

def _check_memory(row: dict, free_bytes: int) -> str:
    short = project.memory_shortfall(row["device_bytes"], free_bytes, 0.9, "free on the device")
    if short:
        return f"{contract.SKIPPED}: {short}; lower gpu.bytes.n or gpu.bytes.many_heads_l2_multiple"
    return MEASURED


def measure(cfg: dict, l2_bytes: int, random_seed: int, ncu: str, workdir: str | Path,
            timeout_s: float | None = None) -> tuple[list[dict], pd.DataFrame]:
    """Run the plan under ncu; the rows with their measured bytes and model, and every kernel.

    The rows' order is the plan's. Raises ProbeMismatch or RuntimeError when ncu or the probe
    fails (the log's tail in the message); a missing counter permission gives `NO_PERMISSION`
    rows instead.
    """
    import torch

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    free_bytes, _ = torch.cuda.mem_get_info()
    rows = [{**row, "status": _check_memory(row, free_bytes), "kernels": None, "kernel_names": None,
             **dict.fromkeys(NCU_METRICS.values())} for row in plan(cfg, l2_bytes)]
    if not any(row["status"] == MEASURED for row in rows):  # every point too large for the device
        rows = [{**row, **model_columns(row, *LAB_TILE)} for row in rows]
        return rows, pd.DataFrame(columns=KERNEL_COLUMNS)
    plan_path = workdir / "plan.json"
    plan_path.write_text(json.dumps({"random_seed": random_seed, "rows": rows}))
    report = workdir / "profile"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(project.SRC), os.environ.get("PYTHONPATH")]))}
    command = [ncu, *NCU_OPTIONS, "--metrics", ",".join(NCU_METRICS), "--force-overwrite",
               "--export", str(report), sys.executable, "-m", "minimodel.gpu.hbm", str(plan_path)]
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    log = run.stdout + run.stderr
    (workdir / "ncu.log").write_text(" ".join(command) + "\n" + log)
    if "ERR_NVGPUCTRPERM" in log:
        return planned_rows(cfg, l2_bytes, NO_PERMISSION), pd.DataFrame(columns=KERNEL_COLUMNS)
    if run.returncode != 0:
        raise RuntimeError(f"ncu exited with {run.returncode}:\n{log[-3000:]}")
    table = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
                            "--print-units", "base"], capture_output=True, text=True, check=True,
                           timeout=timeout_s).stdout
    (workdir / "ncu.csv").write_text(table)
    kernels = parse_ncu_csv(table)
    assign(kernels, rows)
    for row in rows:
        ran_flash = row["impl"] == contract.FLASH_SCHEME and row["status"] == MEASURED
        block_m, block_n, tma = _flash_config(row) if ran_flash else (*LAB_TILE, None)
        row.update(model_columns(row, block_m, block_n))
        if ran_flash:
            row.update(cfg_BLOCK_M=block_m, cfg_BLOCK_N=block_n, cfg_TMA=tma)
    return rows, kernels


def _flash_config(row) -> tuple[int, int, bool]:
    """The tile `flash_attn_forward` chose for the row's shape (as the probe's inputs: contiguous)."""
    import torch

    from minimodel.kernel import launch_config

    q = torch.empty(row["B"], row["H"], row["N"], row["d"], device="cuda", dtype=torch.float16)
    cfg = launch_config(q, q, q, row["causal"])
    return cfg.BLOCK_M, cfg.BLOCK_N, cfg.TMA


def ncu_version(ncu: str | None) -> str | None:
    if ncu is None:
        return None
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[-1] if out.strip() else None


def summary(table: pd.DataFrame, ncu: str | None, l2_bytes: int) -> dict:
    """What the stage did: measured or why not, with ncu, its options, and the device's L2."""
    statuses = table["status"].value_counts().to_dict()
    measured = int(statuses.get(MEASURED, 0))
    device, device_l2 = None, None
    if measured:
        import torch

        props = torch.cuda.get_device_properties(0)
        device, device_l2 = props.name, int(props.L2_cache_size)  # beside the plan's assumed l2_bytes
    status = MEASURED if measured else next(iter(statuses), "no points")
    return {"status": status, "measured": measured, "statuses": statuses, "device": device,
            "device_l2_bytes": device_l2, "plan_l2_bytes": l2_bytes, "ncu": ncu,
            "ncu_version": ncu_version(ncu) if measured else None,
            "ncu_options": NCU_OPTIONS, "metrics": NCU_METRICS, "dtype": DTYPE}


def main(argv: list[str] | None = None) -> int:
    """The profiled process: `python -m minimodel.gpu.hbm PLAN.json` (run by `measure` under ncu)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m minimodel.gpu.hbm PLAN.json  (run under ncu by the gpu_bytes rule)",
              file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    probe(spec["rows"], spec["random_seed"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
