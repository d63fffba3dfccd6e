"""Nsight Compute (ncu) for the DRAM-bytes stage: finding it, profiling a plan, reading its table.

A plan is a list of rows; the profiled process (`python -m minimodel.gpu.hbm_probe PLAN`) runs each
measured row once unprofiled, then a marker kernel and the row's call inside the NVTX range
`NVTX_RANGE`, which is all ncu profiles. `parse_ncu_csv` reads ncu's table; `assign` cuts its
kernels at the markers, in plan order, and refuses a count that does not match. ncu replays
kernels, so nothing here is a timing.

What the counters mean (`NCU_OPTIONS`): ncu flushes the caches before every kernel
(`--cache-control all`) and leaves the clocks as they are (`--clock-control none`). A kernel's
DRAM reads are therefore what it fetched itself, from a cold L2. A write reaches DRAM when a
dirty line leaves the L2: what is still in the L2 when a kernel ends (up to one L2) is written
back after it, uncounted. So the bytes the SMs stored into the L2 (`l2_write_bytes`) are measured
beside them: every stored byte reaches DRAM in the end, whether during the kernel or after it.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from minimodel.floor import contract
from minimodel.floor.provenance import project
from minimodel.floor.subprocesses import STAGE_PID_ENV, die_with_parent

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
# kernels.csv: row = the plan's row; profile = the ncu run (ids restart in each)
KERNEL_COLUMNS = ["row", "profile", "id", "kernel", *NCU_METRICS.values()]
# what is profiled: the kernels inside the stage's NVTX range, launched from the thread that opened it
NVTX_FILTER = ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/"]
# how: caches flushed before each kernel, clocks as they are, each kernel replayed alone
CAPTURE_OPTIONS = ["--cache-control", "all", "--clock-control", "none", "--replay-mode", "kernel"]
NCU_OPTIONS = [*NVTX_FILTER, *CAPTURE_OPTIONS]
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
# DRAM writes cannot exceed what the kernels stored (ncu flushes the L2 before each kernel): rows
# where they do saw traffic from outside the call, and are not used.
FOREIGN_WRITES = ("suspect: DRAM took {ratio:.1f}x the bytes the kernels stored; the excess came "
                  "from outside the profiled call")
FOREIGN_WRITE_SLACK = (1.05, 2**20)  # (ratio, bytes) of DRAM writes over stores still accepted


class ProbeMismatch(RuntimeError):
    """ncu's kernels do not line up with the plan: no number is assigned to a wrong point."""


class NoCounterPermission(RuntimeError):
    """ncu may not read the GPU's performance counters on this machine (ERR_NVGPUCTRPERM)."""


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


def ncu_version(ncu: str | None) -> str | None:
    if ncu is None:
        return None
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[-1] if out.strip() else None


# ---- running a plan under ncu ---------------------------------------------------------------

@dataclass
class Profile:
    """What one ncu run of a plan gave: its log, and ncu's table (None where it gave none)."""

    returncode: int | None  # None: stopped at its time limit
    log: str
    table: str | None
    # the probe's record, row index -> "marked" or the error that row raised (`record_row`)
    outcome: dict[int, str]

    @property
    def no_permission(self) -> bool:
        return PERMISSION_ERROR in self.log

    def last_words(self) -> str:
        """The log's last line that is not ncu's own (`==PROF==`, `==ERROR==`, ...)."""
        lines = [line for line in self.log.splitlines() if line.strip() and not line.startswith("==")]
        return lines[-1][:200] if lines else "no output"


def record_path(plan_path: Path) -> Path:
    return plan_path.with_suffix(".rows.jsonl")


def record_row(plan_path: Path, index: int, outcome: str) -> None:
    """The probe's note that a row was marked and profiled, or why not: a line, flushed at once,
    so a process that dies later still leaves what it did."""
    with open(record_path(plan_path), "a") as f:
        f.write(json.dumps({"row": index, "outcome": outcome}) + "\n")


def profile(ncu: str, module: str, plan: dict, workdir: Path, name: str,
            row_limit_s: float | None = None, setup_s: float = 120) -> Profile:
    """Run `python -m module PLAN` under ncu (the plan written to workdir/name.json) and import
    its report as a raw-page table. The command and ncu's output go to workdir/name.log.

    With `row_limit_s`, the run is stopped (its whole process group) when the probe records no
    row for that long (`setup_s` more before the first: ncu, Python and CUDA start): a call that
    hangs cannot hold the stage. A stopped run gives no table; `returncode` is then None.
    """
    plan_path = workdir / f"{name}.json"
    plan_path.write_text(json.dumps(plan))
    record = record_path(plan_path)
    record.unlink(missing_ok=True)
    report = workdir / name
    log_path = workdir / f"{name}.log"
    env = {**os.environ, STAGE_PID_ENV: str(os.getpid()), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(project.SRC), os.environ.get("PYTHONPATH")]))}
    # -P: the working directory is not put on sys.path (a contender's module is the file hashed)
    command = [ncu, *NCU_OPTIONS, "--metrics", ",".join(NCU_METRICS), "--force-overwrite",
               "--export", str(report), sys.executable, "-P", "-m", module, str(plan_path)]
    with open(log_path, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        # its own process group, so that a hang can be stopped whole; killed with the stage
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True, preexec_fn=die_with_parent)
        returncode = _wait(process, record, row_limit_s, setup_s)
    table = None
    if returncode == 0 and Path(f"{report}.ncu-rep").exists():  # no report: no kernel was profiled
        table = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
                                "--print-units", "base"], capture_output=True, text=True,
                               check=True).stdout
        (workdir / f"{name}.csv").write_text(table)
    outcomes = {}
    if record.exists():
        for line in record.read_text().splitlines():
            entry = json.loads(line)
            outcomes[entry["row"]] = entry["outcome"]
    return Profile(returncode, log_path.read_text().split("\n", 1)[-1], table, outcomes)


def _wait(process: subprocess.Popen, record: Path, row_limit_s: float | None, setup_s: float):
    """The process's exit code, or None when it recorded no row within the limit (then killed)."""
    if row_limit_s is None:
        return process.wait()
    last_size, deadline = -1, time.monotonic() + setup_s + row_limit_s
    while process.poll() is None:
        size = record.stat().st_size if record.exists() else 0
        if size != last_size:
            last_size, deadline = size, time.monotonic() + row_limit_s + (0 if size else setup_s)
        elif time.monotonic() > deadline:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:  # stuck in a driver call: left behind, not waited on
                pass
            return None
        time.sleep(0.2)
    return process.returncode


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


def assign(kernels: pd.DataFrame, rows: list[dict], measured_status: str,
           may_be_empty: frozenset[int] = frozenset()) -> list[dict]:
    """Sum each measured row's kernels: the kernels after each marker, markers in plan order.

    Fills the rows in place and gives `kernels` a column `row`, the index in `rows` of each
    kernel's row (empty for the markers). A row without a kernel after its marker is a mismatch,
    unless its index is in `may_be_empty` (a call that raised after its marker).
    """
    measured = [r for r in rows if r["status"] == measured_status]
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
        if not group and position[id(row)] not in may_be_empty:
            raise ProbeMismatch(f"no kernel was profiled for {row}")
        row_of.update({k["id"]: position[id(row)] for k in group})
        row["kernels"] = len(group)
        row["kernel_names"] = "; ".join(k["kernel"].split("(")[0][:80] for k in group)
        for column in NCU_METRICS.values():
            row[column] = float(sum(k[column] for k in group))
        missing = [c for c in NCU_METRICS.values() if not math.isfinite(row[c])]
        ratio, extra = FOREIGN_WRITE_SLACK
        if missing:  # ncu gave "n/a" for a kernel: no number is better than a wrong one
            row["status"] = (f"{contract.FAILED}: ncu gave no value of {', '.join(missing)} for a kernel "
                             "of this call")
        elif row["dram_write_bytes"] > ratio * row["l2_write_bytes"] + extra:
            over = row["dram_write_bytes"] / row["l2_write_bytes"] if row["l2_write_bytes"] else math.inf
            row["status"] = FOREIGN_WRITES.format(ratio=over)
    kernels.insert(0, "row", kernels["id"].map(row_of))
    return rows
