"""The project README's table of headline numbers, written from a run (the committed H200 reference).

    python -m minimodel headline [RUN]            # print the table (RUN: results/reference/nvidia-h200)
    python -m minimodel headline [RUN] --check    # exit 1 when README.md's table is not this one
    python -m minimodel headline [RUN] --write    # put this table into README.md between its markers

The README holds the table between `START` and `END`; a test regenerates it from the committed
reference and checks that the README's copy is identical, so the README cannot go stale when the
reference is refreshed. Every number is read from the run's tables, after the run's manifests are
checked to vouch for them (a tampered or half-written reference is refused, naming the file).
The correctness counts and the DRAM ratios are the results README's (`results_readme`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from minimodel.floor import commands, contract
from minimodel.floor.provenance import io, project, reading
from minimodel.report import results_readme

START = "<!-- headline:start -->"
END = "<!-- headline:end -->"
REFERENCE = project.REFERENCE / "nvidia-h200"
README = "README.md"

# What the table reads of a run, relative to its folder: each must be vouched for by a manifest.
READ = (contract.CORRECTNESS_SUMMARY, contract.TIMING, contract.TIMING_SUMMARY, contract.GPU_BYTES,
        contract.GPU_BYTES_SUMMARY, contract.manifest("gpu_timing"))


class HeadlineError(ValueError):
    """A run the headline table cannot be written from, or a README it cannot go into: one line."""


def _span(values: pd.Series) -> str:
    return f"{values.min():.2f}–{values.max():.2f}×"


def _geomean(values: pd.Series) -> float:
    return float(np.exp(np.log(values).mean()))


def read_run(run: Path) -> dict:
    """The tables the headline reads, after the run's manifests are checked to vouch for them."""
    if not (run / contract.FOLDERS["symbolic"]).is_dir():
        raise HeadlineError(f"{run} is not a run of this workflow (no symbolic/ in it)")
    problems = reading.run_problems(run, READ, default_root=project.root())
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise HeadlineError(f"refusing {run}: {problems[0]}{more}")
    timing = json.loads((run / contract.TIMING_SUMMARY).read_text())
    if timing.get("device") is None:
        raise HeadlineError(f"{run} has no GPU timing ({contract.TIMING_SUMMARY} names no device): "
                            "the headline numbers come from a GPU run")
    return {"correctness": json.loads((run / contract.CORRECTNESS_SUMMARY).read_text()),
            "timing": timing, "every_timing_row": pd.read_csv(run / contract.TIMING),
            "gpu_bytes": contract.forward_rows(pd.read_csv(run / contract.GPU_BYTES)),
            "gpu_bytes_summary": json.loads((run / contract.GPU_BYTES_SUMMARY).read_text()),
            "manifest": reading.load_manifest(run / contract.manifest("gpu_timing"))}


def machine_line(run_name: str, manifest: dict, timing: dict) -> str:
    """The GPU, the commit and the versions the run's timing stage ran with."""
    env, gpu = manifest["environment"], manifest["environment"].get("gpu") or {}
    details = [f"torch {timing.get('torch', env['torch'])}", f"Triton {timing.get('triton', env['triton'])}"]
    details += [f"{name} {gpu[key]}" for name, key in (("CUDA", "cuda_runtime"), ("driver", "driver"))
                if gpu.get(key)]
    return (f"From `{run_name}`: {gpu.get('name', env['device'])}, commit {manifest['git']['commit']} "
            f"({', '.join(details)}).")


def _values(column: pd.Series) -> str:
    return ", ".join(str(v) for v in sorted(set(column)))


def _points(kernel: pd.DataFrame) -> str:
    """A grid's points: its (B, H), or its tokens B·N and model width H·d where B and H vary."""
    one = kernel[["B", "H"]].drop_duplicates().shape[0] == 1
    sizes = (f"(B, H) = ({_values(kernel['B'])}, {_values(kernel['H'])})" if one else
             f"B·N = {_values(kernel['B'] * kernel['N'])} tokens, H·d = {_values(kernel['H'] * kernel['d'])}")
    return f"{sizes}, N = {kernel['N'].min()}–{kernel['N'].max()}, d = {_values(kernel['d'])}"


def grids_line(rows: pd.DataFrame) -> str:
    """What "the kernel's speed over" means, and the two timing grids' points."""
    how = ", ".join(dict.fromkeys([*rows["timing"].dropna(), *rows["dtype"].dropna()]))
    kernel = rows[rows["impl"] == contract.TRITON]
    fa, lab = (kernel[kernel["grid"] == grid] for grid in (contract.FLASHATTENTION_GRID, contract.LAB_GRID))
    return (f"The kernel's speed over another is that one's GPU time per call over the kernel's ({how}). "
            f"FlashAttention's grid: {_points(fa)}; the lab grid (lab 02's): {_points(lab)}; "
            "each causal and not.")


def _count(passed: int, ran: int, skipped: int) -> str:
    """`passed of ran` cases, and how many were skipped (a case an implementation does not take)."""
    return f"{passed} of {ran}" + (f" ({skipped} skipped)" if skipped else "")


def correctness_rows(cases: pd.DataFrame, timing_rows: pd.DataFrame) -> list[tuple[str, str]]:
    """The kernel's cases passed, and each contender's (the results README's counts): the forward's,
    then the gradients' where the run checked them."""
    cases = contract.with_direction(cases)
    rows = []
    for direction, kernel_is, contenders_are in ((contract.FORWARD, "the kernel", "contenders"),
                                                 (contract.BACKWARD, "the kernel's gradients",
                                                  "contenders' gradients")):
        this = cases[cases["direction"] == direction]
        if this.empty:
            continue
        kernel = this[this["impl"] == contract.TRITON] if "impl" in this else this
        ran = kernel[~kernel["skipped"].astype(bool)]
        kinds = [*dict.fromkeys(ran["dtype"]), *("causal" if c else "not causal"
                                                 for c in sorted(set(ran["causal"].astype(bool))))]
        count = _count(int(ran["passed"].astype(bool).sum()), len(ran), len(kernel) - len(ran))
        rows.append((f"correctness: {kernel_is} against float64", f"{count} cases pass ({', '.join(kinds)})"))
        others = [c for c in results_readme.contenders(this, timing_rows)
                  if c["passed"] + c["failed"]]  # timed, not in the correctness sweep, or all skipped: none
        if others:
            rows.append((f"correctness: {contenders_are}, the same rule", ", ".join(
                f"`{c['name']}` {_count(c['passed'], c['passed'] + c['failed'], c['skipped'])}"
                for c in others)))
    return rows


def speed_rows(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """The kernel's speed over each implementation on FlashAttention's grid, closest first; for the
    closest, by the kernel's path; then the lab grid's speedups over naive PyTorch and cuDNN."""
    rows = rows[rows["status"] == contract.OK]
    fa = rows[rows["grid"] == contract.FLASHATTENTION_GRID]
    kernel = fa[fa["impl"] == contract.TRITON][["d", "N", "causal", "path"]]
    others = fa[fa["impl"] != contract.TRITON].dropna(subset=["triton_speedup_over_this"])
    order = others.groupby("impl")["triton_speedup_over_this"].agg(_geomean).sort_values().index
    out = []
    for i, impl in enumerate(order):
        r = others[others["impl"] == impl]["triton_speedup_over_this"]
        text = f"{_geomean(r):.2f}× geometric mean, {_span(r)} over {len(r)} points"
        if i == 0:
            by_path = others[others["impl"] == impl].merge(kernel, on=["d", "N", "causal"],
                                                            suffixes=("", "_kernel"))
            text += "".join(f"; {path} path (d = {_values(g['d'])}): {_span(g['triton_speedup_over_this'])}"
                            for path, g in by_path.groupby("path_kernel"))
        out.append((f"FlashAttention's grid: the kernel's speed over `{impl}`", text))
    lab = rows[rows["grid"] == contract.LAB_GRID]
    naive = lab[lab["impl"] == contract.NAIVE]
    largest = naive[naive["N"] == naive["N"].max()].sort_values("causal")
    shape = "(B, H, N, d) = ({B}, {H}, {N}, {d})".format(**largest.iloc[0][["B", "H", "N", "d"]].astype(int))
    at = ", ".join(f"{r.triton_speedup_over_this:.2f}× {'causal' if r.causal else 'not causal'}"
                   for r in largest.itertuples())
    out.append((f"lab grid: the kernel's speed over `{contract.NAIVE}`",
                f"{_span(naive['triton_speedup_over_this'])}; at {shape}: {at}"))
    cudnn = lab[lab["impl"] == contract.SDPA_CUDNN].sort_values("N")
    if len(cudnn):
        ratio = cudnn["triton_speedup_over_this"]
        text = _span(ratio)
        slower = cudnn[ratio < 1]["N"]
        below = cudnn[cudnn["N"] < slower.min()] if len(slower) else cudnn.iloc[:0]
        if len(below):  # the smaller N, where the kernel is at least as fast
            text += f"; at N ≤ {below['N'].max()}: {_span(below['triton_speedup_over_this'])}"
        out.append((f"lab grid: the kernel's speed over `{contract.SDPA_CUDNN}`", text))
    return out


def backward_speed_rows(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """The backward's (the gradient pass alone) speed over each implementation that ran it, on
    FlashAttention's grid, closest first."""
    if "direction" not in rows:
        return []
    fa = rows[(rows["direction"] == contract.BACKWARD) & (rows["status"] == contract.OK)
              & (rows["grid"] == contract.FLASHATTENTION_GRID) & (rows["impl"] != contract.TRITON)]
    ratios = fa.dropna(subset=["triton_speedup_over_this"]).groupby("impl")["triton_speedup_over_this"]
    return [(f"FlashAttention's grid, backward: the kernel's speed over `{impl}`",
             f"{_geomean(r):.2f}× geometric mean, {_span(r)} over {len(r)} points")
            for impl, r in sorted(ratios, key=lambda item: _geomean(item[1]))]


def dram_rows(table: pd.DataFrame, summary: dict) -> list[tuple[str, str]]:
    """DRAM reads against the model and against Q, K and V read once (the results README's)."""
    found = results_readme.gpu_bytes_answers(table, summary)
    if not found["measured"]:
        why = results_readme.why_not_measured(found["status"])
        return [("GPU DRAM bytes", f"{contract.NOT_MEASURED}: {why}")]
    lo, hi = found["naive_many_read_over_model"]
    where = f"N = {found['n_min']}–{found['n_max']}, d = {found['d']}, not causal"
    rows = [("DRAM reads: naive, many heads, over the byte model", f"{lo:.2f}–{hi:.2f}× ({where})"),
            ("DRAM reads: the kernel over Q, K, V read once",
             f"at most {found['flash_read_over_inputs_max']:.2f}× (one head or many)")]
    if found["contenders"]:
        rows.append(("DRAM reads: contenders over Q, K, V read once",
                     ", ".join(f"`{c['name']}` {c['read_over_inputs'][0]:.2f}–{c['read_over_inputs'][1]:.2f}×"
                               for c in found["contenders"])))
    return rows


def table(run: str | Path, name: str | None = None) -> str:
    """The markdown block (without the markers) of the headline numbers of `run`."""
    run = Path(run)
    data = read_run(run)
    cases = pd.DataFrame(data["correctness"]["cases_detail"])
    every = data["every_timing_row"]
    forward = contract.forward_rows(every)
    rows = (correctness_rows(cases, forward) + speed_rows(forward) + backward_speed_rows(every)
            + dram_rows(data["gpu_bytes"], data["gpu_bytes_summary"]))
    lines = [machine_line(name or run.as_posix(), data["manifest"], data["timing"]),
             grids_line(forward), "", "| measure | result |", "|---|---|"]
    lines += [f"| {what} | {value} |" for what, value in rows]
    return "\n".join(lines) + "\n"


def block(run: str | Path, name: str | None = None) -> str:
    return f"{START}\n{table(run, name)}{END}"


def replace_block(text: str, new_block: str, where: str = README) -> str:
    """`text` with its one block between the markers replaced by `new_block`."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise HeadlineError(f"{where} must hold one {START} followed by one {END}; it holds "
                            f"{text.count(START)} and {text.count(END)}")
    head, rest = text.split(START)
    return head + new_block + rest.split(END, 1)[1]


def current_block(text: str, where: str = README) -> str:
    """The block between the markers of `text`, the markers included."""
    replace_block(text, "", where)  # the markers' check
    return START + text.split(START)[1].split(END)[0] + END


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", default=None,
                        help=f"the run folder (default: the project's {REFERENCE.as_posix()})")
    parser.add_argument("--readme", default=None, help=f"the README (default: the project's {README})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when the README's table differs")
    mode.add_argument("--write", action="store_true", help="replace the README's table in place")


def run(args: argparse.Namespace) -> int:
    root = project.root()
    run = Path(args.run) if args.run else root / REFERENCE
    readme = Path(args.readme) if args.readme else root / README
    name = REFERENCE.as_posix() if args.run is None else args.run
    try:
        new = block(run, name)
        if not (args.check or args.write):
            print(table(run, name), end="")
            return 0
        text = readme.read_text()
        updated = replace_block(text, new, str(readme))
    except (HeadlineError, OSError) as err:
        print(f"headline: {err}", file=sys.stderr)
        return 2
    if args.check:
        if updated != text:
            print(f"{readme}'s headline table is not the one {name} gives; "
                  f"`python -m minimodel headline --write` updates it", file=sys.stderr)
            return 1
        return 0
    if updated != text:
        io.write_text(readme, updated)
    print(f"{readme}: headline table {'updated' if updated != text else 'already current'}",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m minimodel headline`."""
    return commands.main("headline", sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
