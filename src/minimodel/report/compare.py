"""Compare a run of the workflow with a reference run: what should agree, within stated tolerances.

    python -m minimodel compare results/                       # against the committed H200 reference
    python -m minimodel compare results/h200-rerun results/reference/nvidia-h200 --out cmp/

Each part is judged by what should travel between machines (paths: `minimodel.contract`):
- symbolic (`symbolic/`): the closed forms and their tables are exact: identical.
- CPU bytes (`cpu/bytes.csv`): the instrumented counts and the model do not depend on the
  machine: identical. torch.profiler's allocated bytes within PROFILER_TOLERANCE.
- correctness (`gpu/correctness/`): every case's verdict equal, the errors side by side; a run
  under the interpreter and one on CUDA check different grids: not comparable.
- timing (`gpu/timing/`): on the same GPU model, the ratios that should travel (kernel against
  SDPA's cuDNN and FlashAttention-2 backends, and against naive PyTorch) within the band of
  their grid (`timing_band`); on another GPU, or without one, not comparable.
- inputs: per rule, which code, parameters and environment differ between the two manifests,
  so that a reader sees why numbers moved. Informational, never a failure.
The machine's own ceilings (the roofline) are not compared.

Both folders are first checked against their own manifests (`minimodel.report.runs`), and read
in today's names (a reference made before them has older ones: `contract.upgrade_table`).
Writes `comparison.csv` (one row per judged number), `verdict.json` and `comparison.png`. The
verdict is "agree" (exit 0: not comparable is not a failure), "disagree" when something that
should agree does not, or "nothing compared" when no number could be compared at all (exit 1
for both); a folder that cannot be compared, or an --out inside a committed reference, exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from minimodel import contract
from minimodel.provenance import io
from minimodel.report import runs
from minimodel.report.runs import REFERENCE, RunError

PROFILER_TOLERANCE = 0.05
# DRAM reads and the bytes stored into the L2, same GPU model: naive's reads follow the model within
# 0.1 %, flash's depend on which programs share the L2 at a time, which the scheduler decides.
GPU_BYTES_TOLERANCE = 0.05
GPU_BYTES_METRICS = ("dram_read_bytes", "l2_write_bytes")
# The kernel's speed against another implementation (their time over the kernel's), by metric name.
RATIOS = dict(zip(("kernel/cudnn", "kernel/fa2", "kernel/naive"),
                  (contract.SDPA_CUDNN, contract.SDPA_FLASH, contract.NAIVE), strict=True))
COLUMNS = ["part", "item", "metric", "run", "reference", "difference", "tolerance", "verdict", "reason"]
AGREE, DISAGREE, NOT_COMPARABLE, DIFFERS = "agree", "disagree", "not comparable", "differs"
NOTHING = "nothing compared"  # the verdict when every part was not comparable: no agreement shown
ENVIRONMENT_KEYS = ("python", "torch", "triton", "numpy", "snakemake", "packages_sha256", "device", "cpu")
GPU_KEYS = ("name", "capability", "driver", "cuda_runtime", "cudnn")


def timing_band(grid: str, n: int) -> float:
    """Largest relative change of a speed ratio between two runs on one GPU model that is noise.

    Graph timings repeat within ±2 % on FlashAttention's grid, and SDPA's cuDNN itself moves a
    few percent between runs: 5 % for a ratio of two such times. The lab grid's N < 1024
    kernels take 3–21 µs, where a launch's jitter is a large part: 25 %; its larger N, 10 %.
    """
    if grid == contract.FLASHATTENTION_GRID:
        return 0.05
    return 0.10 if n >= 1024 else 0.25


TIMING_BANDS = {f"timing {grid}{above}": timing_band(grid, n) for grid, above, n in
                ((contract.FLASHATTENTION_GRID, "", 4096), (contract.LAB_GRID, " N>=1024", 1024),
                 (contract.LAB_GRID, " N<1024", 64))}


def _row(part, item, metric, run, reference, difference=None, tolerance=None, verdict=AGREE, reason=""):
    return dict(zip(COLUMNS, (part, item, metric, run, reference, difference, tolerance, verdict, reason),
                    strict=True))


def _relative(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def _missing(part: str, name: str, run: pd.DataFrame | None) -> list[dict]:
    return [_row(part, name, "table", None, None, verdict=NOT_COMPARABLE,
                 reason=f"{name} missing in the {'run' if run is None else 'reference'}")]


def _only_in(part: str, run_keys: set, ref_keys: set, why: str = "the two configs have different grids"):
    return [_row(part, f"{len(keys)} points", "presence", None, None, verdict=NOT_COMPARABLE,
                 reason=f"only in the {side}: {why}")
            for side, keys in (("run", run_keys - ref_keys), ("reference", ref_keys - run_keys)) if keys]


def _exact(part: str, run: pd.DataFrame | None, ref: pd.DataFrame | None, keys: list[str],
           metrics: list[str], name: str) -> list[dict]:
    """One row per point of a table that must be identical in both runs."""
    if run is None or ref is None:
        return _missing(part, name, run)
    run_idx, ref_idx = run.set_index(keys), ref.set_index(keys)
    common = run_idx.index.intersection(ref_idx.index)
    rows = _only_in(part, set(run_idx.index), set(ref_idx.index))
    for key in common:
        a, b = run_idx.loc[key, metrics], ref_idx.loc[key, metrics]
        diffs = {m: _relative(float(a[m]), float(b[m])) for m in metrics
                 if not (pd.isna(a[m]) and pd.isna(b[m]))}
        worst = max(diffs, key=diffs.get) if diffs else metrics[0]
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,),
                                                     strict=True))
        same = all(d == 0 for d in diffs.values())
        rows.append(_row(part, label, "all of " + "/".join(metrics), a[worst], b[worst],
                         diffs.get(worst, 0.0), 0.0, AGREE if same else DISAGREE,
                         "" if same else f"{worst} differs"))
    return rows


def compare_symbolic(run: Path, ref: Path) -> list[dict]:
    keys = ["scheme", "convention", "N", "d", "B_r", "B_c", "dtype"]
    metrics = ["bytes", "flops", "flops_with_softmax", "intensity", "intensity_with_softmax"]
    a, b = (runs.table(folder, contract.SYMBOLIC_BYTES, keys + metrics) for folder in (run, ref))
    a, b = (None if t is None else contract.forward_rows(t) for t in (a, b))  # the forward's, so far
    rows = _exact("symbolic", a, b, keys, metrics, contract.SYMBOLIC_BYTES)
    for name in (contract.SYMBOLIC_FORMULAS, contract.SYMBOLIC_LAB_TABLE):
        a, b = (runs.text(folder, name) for folder in (run, ref))
        if a is None or b is None:
            rows.append(_row("symbolic", name, "text", None, None, verdict=NOT_COMPARABLE,
                             reason="missing in one run"))
        else:
            rows.append(_row("symbolic", name, "text", len(a), len(b), 0.0 if a == b else 1.0, 0.0,
                             AGREE if a == b else DISAGREE, "" if a == b else "text differs"))
    return rows


def compare_cpu_bytes(run: Path, ref: Path) -> list[dict]:
    keys = ["scheme", "N", "d", "dtype", "B_r", "B_c", "sram_bytes"]
    counted = ["bytes_model", "bytes_instrumented", "bytes_read", "bytes_written", "o_write_bytes"]
    a, b = (runs.table(f, contract.CPU_BYTES, keys + counted + ["bytes_profiler"]) for f in (run, ref))
    a, b = (None if t is None else contract.forward_rows(t) for t in (a, b))  # the forward's, so far
    rows = _exact("cpu bytes", a, b, keys, counted, contract.CPU_BYTES)
    if a is None or b is None:
        return rows
    joined = a.merge(b, on=keys, suffixes=("_run", "_ref"))
    for _, r in joined.dropna(subset=["bytes_profiler_run", "bytes_profiler_ref"]).iterrows():
        diff = _relative(r["bytes_profiler_run"], r["bytes_profiler_ref"])
        ok = diff <= PROFILER_TOLERANCE
        rows.append(_row("cpu profiler", f"scheme={r['scheme']}, N={r['N']}, d={r['d']}, dtype={r['dtype']}",
                         "bytes_profiler", r["bytes_profiler_run"], r["bytes_profiler_ref"], diff,
                         PROFILER_TOLERANCE, AGREE if ok else DISAGREE))
    return rows


def compare_correctness(run: Path, ref: Path) -> list[dict]:
    keys = ["impl", "B", "H", "N", "d", "causal", "dtype"]
    columns = keys + ["backend", "skipped", "reason", "passed", "err_kernel_vs_fp64"]
    a, b = (runs.table(folder, contract.CORRECTNESS, columns) for folder in (run, ref))
    if a is None or b is None:
        return [_row("correctness", contract.CORRECTNESS, "table", None, None,
                     verdict=NOT_COMPARABLE, reason="missing in one run")]
    backends = (sorted(set(a["backend"])), sorted(set(b["backend"])))
    if backends[0] != backends[1]:
        return [_row("correctness", "every case", "backend", ", ".join(backends[0]), ", ".join(backends[1]),
                     verdict=NOT_COMPARABLE, reason="one ran under Triton's interpreter, the other on "
                     "CUDA: different grids and arithmetic")]
    rows = _only_in("correctness", set(map(tuple, a[keys].values)), set(map(tuple, b[keys].values)))
    for _, r in a.merge(b, on=keys, suffixes=("_run", "_ref")).iterrows():
        label = ", ".join(f"{k}={r[k]}" for k in keys)
        if r["skipped_run"] or r["skipped_ref"]:
            same = bool(r["skipped_run"]) == bool(r["skipped_ref"])
            rows.append(_row("correctness", label, "skipped", r["reason_run"], r["reason_ref"],
                             verdict=AGREE if same else DISAGREE))
            continue
        same = bool(r["passed_run"]) == bool(r["passed_ref"])
        rows.append(_row("correctness", label, "passed (err_kernel_vs_fp64 beside)",
                         f"{bool(r['passed_run'])} ({r['err_kernel_vs_fp64_run']:.2e})",
                         f"{bool(r['passed_ref'])} ({r['err_kernel_vs_fp64_ref']:.2e})",
                         verdict=AGREE if same else DISAGREE, reason="" if same else "verdict differs"))
    return rows


def _ratios(timing: pd.DataFrame) -> pd.DataFrame:
    """Per point and ratio name: another implementation's time over the kernel's (kernel/<contender>)."""
    point = ["grid", "B", "H", "N", "d", "causal"]
    ok = timing[timing["status"] == contract.OK]
    ms = ok.pivot_table(index=point, columns="impl", values="ms", aggfunc="first")
    kernel = contract.TRITON
    ratios = RATIOS | {f"kernel/{i}": i for i in ms.columns if i not in contract.IMPLEMENTATIONS}
    out = pd.DataFrame({name: ms[impl] / ms[kernel] for name, impl in ratios.items()
                        if impl in ms and kernel in ms})
    out.columns.name = "metric"
    return out.stack().rename("ratio").reset_index()


def _device_mismatch(part: str, run: Path, ref: Path, summary: str, measured_key: str,
                     missing: str, different: str) -> list[dict]:
    """The one row saying why a GPU part is not comparable, or [] when both ran on one GPU model.

    A side counts as measured when its summary's `measured_key` is truthy; its GPU is "device".
    """
    devices = []
    for folder in (run, ref):
        data = runs.summary(folder, summary)
        devices.append(data.get("device") if data.get(measured_key) else None)
    if None in devices:
        side = "run" if devices[0] is None else "reference"
        reason = f"the {side} {missing}"
    elif devices[0] != devices[1]:
        reason = different
    else:
        return []
    return [_row(part, "every point", "device", devices[0], devices[1], verdict=NOT_COMPARABLE,
                 reason=reason)]


def compare_timing(run: Path, ref: Path) -> list[dict]:
    mismatch = _device_mismatch("timing", run, ref, contract.TIMING_SUMMARY, "device",
                                "had no GPU timing",
                                "different GPU models: speed ratios do not travel between them")
    if mismatch:
        return mismatch
    point = ["grid", "B", "H", "N", "d", "causal", "metric"]
    a, b = (runs.table(folder, contract.TIMING, point[:-1] + ["impl", "ms", "status"])
            for folder in (run, ref))
    if a is None or b is None:
        return _missing("timing", contract.TIMING, a)
    a, b = _ratios(a), _ratios(b)
    keys = [set(map(tuple, t[point].itertuples(index=False))) for t in (a, b)]
    rows = _only_in("timing", *keys, "a grid point or contender the other lacks, or a point not timed there")
    for _, r in a.merge(b, on=point, suffixes=("_run", "_ref")).iterrows():
        band = timing_band(r["grid"], int(r["N"]))
        diff = _relative(r["ratio_run"], r["ratio_ref"])
        label = f"{r['grid']} ({r['B']}, {r['H']}, {r['N']}, {r['d']}) {'causal' if r['causal'] else 'full'}"
        rows.append(_row("timing", label, r["metric"], r["ratio_run"], r["ratio_ref"], diff, band,
                         AGREE if diff <= band else DISAGREE))
    return rows


def compare_gpu_bytes(run: Path, ref: Path) -> list[dict]:
    """DRAM reads and bytes stored into the L2 per point, on the same GPU model (writes to DRAM
    depend on what the L2 still holds when a kernel ends: not compared)."""
    mismatch = _device_mismatch("gpu bytes", run, ref, contract.GPU_BYTES_SUMMARY, "measured",
                                "measured no GPU bytes", "different GPU models: caches and bytes differ")
    if mismatch:
        return mismatch
    point = ["regime", "B", "H", "N", "d", "causal", "impl"]
    a, b = (runs.table(folder, contract.GPU_BYTES, point + ["status", *GPU_BYTES_METRICS])
            for folder in (run, ref))
    if a is None or b is None:
        return _missing("gpu bytes", contract.GPU_BYTES, a)
    a, b = (t[t["status"] == contract.MEASURED].set_index(point) for t in (a, b))
    rows = _only_in("gpu bytes", set(a.index), set(b.index))
    for key in a.index.intersection(b.index):
        label = f"{key[0]} (1, {key[2]}, {key[3]}, {key[4]}) {'causal' if key[5] else 'full'} {key[6]}"
        for metric in GPU_BYTES_METRICS:
            x, y = float(a.loc[key, metric]), float(b.loc[key, metric])
            diff = _relative(x, y)
            rows.append(_row("gpu bytes", label, metric, x, y, diff, GPU_BYTES_TOLERANCE,
                             AGREE if diff <= GPU_BYTES_TOLERANCE else DISAGREE))
    return rows


def input_differences(run: Path, ref: Path) -> list[dict]:
    """Per rule: code, parameters and environment that differ between the two runs' manifests."""
    rows = []
    a, b = runs.manifests(run), runs.manifests(ref)
    for folder in sorted(set(a) & set(b)):
        ma, mb = a[folder], b[folder]
        rule = ma["rule"]
        code = [{e["path"]: e["sha256"] for e in m["inputs"] if e["kind"] in ("module", "script")}
                for m in (ma, mb)]
        for path in sorted(set(code[0]) | set(code[1])):
            if code[0].get(path) != code[1].get(path):
                state = ("changed" if path in code[0] and path in code[1]
                         else "only in the run" if path in code[0] else "only in the reference")
                rows.append(_row("inputs", rule, "code", path, state, verdict=DIFFERS))
        if ma.get("params") != mb.get("params"):
            rows.append(_row("inputs", rule, "params", json.dumps(ma.get("params"))[:300],
                             json.dumps(mb.get("params"))[:300], verdict=DIFFERS))
        ea, eb = ma.get("environment", {}), mb.get("environment", {})
        pairs = [(k, ea.get(k), eb.get(k)) for k in ENVIRONMENT_KEYS]
        ga, gb = ea.get("gpu") or {}, eb.get("gpu") or {}
        pairs += [(f"gpu.{k}", ga.get(k), gb.get(k)) for k in GPU_KEYS]
        rows += [_row("inputs", rule, f"environment: {k}", x, y, verdict=DIFFERS)
                 for k, x, y in pairs if x != y]
    return rows


def _input_line(r: dict) -> str:
    if r["metric"] == "code":
        return f"{r['item']}: {r['run']} ({r['reference']})"
    if r["metric"] == "params":
        return f"{r['item']}: parameters"
    return f"{r['item']}: {r['metric']}: {r['run']} (reference: {r['reference']})"


def compare_runs(run: str | Path, reference: str | Path = REFERENCE) -> tuple[pd.DataFrame, dict]:
    """(the comparison table, the verdict) of `run` against `reference`; a RunError when either is
    not a run, or holds a file that its manifests do not vouch for."""
    shown = {"run": str(Path(run)), "reference": str(Path(reference))}  # as the caller named them
    run, reference = runs.check_run(run, "run"), runs.check_run(reference, "reference")
    rows = (compare_symbolic(run, reference) + compare_cpu_bytes(run, reference)
            + compare_correctness(run, reference) + compare_timing(run, reference)
            + compare_gpu_bytes(run, reference) + input_differences(run, reference))
    table = pd.DataFrame(rows, columns=COLUMNS)
    counts = {part: g["verdict"].value_counts().to_dict() for part, g in table.groupby("part", sort=False)}
    disagree = table[table["verdict"] == DISAGREE]
    compared = table["verdict"].isin([AGREE, DISAGREE]) & (table["part"] != "inputs")
    verdict = {
        **shown,
        "verdict": DISAGREE if len(disagree) else AGREE if compared.any() else NOTHING,
        "compared": int(compared.sum()),
        "parts": counts,
        "not_comparable": {part: sorted(set(g["reason"])) for part, g in
                           table[table["verdict"] == NOT_COMPARABLE].groupby("part")},
        "disagreements": disagree[["part", "item", "metric", "reason"]].to_dict("records")[:50],
        "inputs_that_differ": [_input_line(r) for r in table[table["part"] == "inputs"].to_dict("records")],
        "tolerances": {"exact parts": 0.0, "cpu profiler": PROFILER_TOLERANCE, **TIMING_BANDS,
                       "gpu bytes": GPU_BYTES_TOLERANCE},
    }
    return table, verdict


def figure(table: pd.DataFrame, verdict: dict):
    """Verdicts per part, and each timing ratio's change against its band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    judged = table[table["part"] != "inputs"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.6]})
    counts = judged.groupby(["part", "verdict"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=[c for c in (AGREE, DISAGREE, NOT_COMPARABLE) if c in counts])
    counts.plot.barh(stacked=True, ax=left, color={AGREE: "#4c9a2a", DISAGREE: "#c0392b",
                                                   NOT_COMPARABLE: "#b0b0b0"})
    left.set_xlabel("numbers compared")
    left.set_ylabel("")
    left.set_title(f"verdict: {verdict['verdict']}")
    timing = judged[(judged["part"] == "timing") & judged["difference"].notna()].copy()
    if len(timing):
        timing["change"] = (timing["run"].astype(float) / timing["reference"].astype(float) - 1) * 100
        sns.stripplot(data=timing, x="change", y="metric", hue="verdict", ax=right,
                      palette={AGREE: "#4c9a2a", DISAGREE: "#c0392b"}, size=6, jitter=0.15)
        for band in sorted(set(timing["tolerance"])):
            right.axvspan(-band * 100, band * 100, color="#4c9a2a", alpha=0.06)
        right.axvline(0, color="black", lw=0.8)
        right.set_xlabel("speed ratio, run against reference (% change; shaded: the grids' bands)")
        right.set_ylabel("")
    else:
        reasons = verdict["not_comparable"].get("timing", ["no timing rows"])
        right.text(0.5, 0.5, "timing not comparable:\n" + "\n".join(reasons), ha="center", va="center",
                   wrap=True, transform=right.transAxes)
        right.set_axis_off()
    fig.suptitle(f"{verdict['run']} against {verdict['reference']}")
    fig.tight_layout()
    return fig


def write(table: pd.DataFrame, verdict: dict, out: str | Path) -> None:
    out = Path(out)
    io.write_csv(out / "comparison.csv", table)
    io.write_json(out / "verdict.json", verdict)
    io.save_figure(out / "comparison.png", figure(table, verdict), dpi=110, bbox_inches="tight")


def summary_text(verdict: dict) -> str:
    lines = [f"{verdict['run']} against {verdict['reference']}: {verdict['verdict']}"]
    if verdict["verdict"] == NOTHING:
        lines.append("  no number could be compared, so nothing says the runs agree: every part below "
                     "is not comparable")
    for part, counts in verdict["parts"].items():
        lines.append(f"  {part}: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    for part, reasons in verdict["not_comparable"].items():
        lines += [f"  {part} not comparable: {r}" for r in reasons]
    lines += [f"  DISAGREE {d['part']}: {d['item']} {d['metric']} {d['reason']}"
              for d in verdict["disagreements"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minimodel compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the results folder of a run")
    parser.add_argument("reference", nargs="?", default=str(REFERENCE),
                        help=f"the run to compare against (default {REFERENCE})")
    parser.add_argument("--out", help="where to write comparison.csv, verdict.json, comparison.png "
                                      "(default: RUN/compare)")
    args = parser.parse_args(argv)
    try:
        # resolved before anything is read: a relative --out, `..` or a symlink cannot slip in
        out = runs.check_writable(args.out or Path(args.run) / "compare")
        table, verdict = compare_runs(args.run, args.reference)
    except RunError as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2
    write(table, verdict, out)
    print(summary_text(verdict))
    return 0 if verdict["verdict"] == AGREE else 1


if __name__ == "__main__":
    sys.exit(main())
