"""The timing stage outside Snakemake, and two of its tables judged as `compare` judges them.

On a GPU machine without Snakemake, `run` times every point of a config's grids exactly as the
rule `gpu_timing` does (`minimodel.gpu.timing.run`) and writes the stage's three files under OUT,
at their places in a run folder (contract.TIMING, contract.TIMING_SAMPLES, contract.TIMING_SUMMARY),
with no manifest. `judge` sets two such folders
(or run folders, the committed reference among them) side by side through compare's timing part
(`minimodel.report.compare.timing.judge`), reading the tables directly, and prints the verdict, the
families, every ratio that is not agree, and how far the single times moved by implementation:

    python tools/timing_stage.py run --configfile examples/contenders.yaml --out /tmp/run_a
    python tools/timing_stage.py judge /tmp/run_a results/reference/nvidia-h200
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.contenders import registry
from minimodel.floor import contract
from minimodel.floor.provenance import configcheck
from minimodel.floor.provenance.io import write_csv, write_json
from minimodel.gpu import timing
from minimodel.report.compare import ratios, samples
from minimodel.report.compare import timing as judged
from minimodel.report.compare.rows import AGREE, DISAGREE


def run(configfiles: list[str], out: Path) -> None:
    """The stage's three files under `out`, from the config the workflow would get."""
    config = configcheck.load_config(*configfiles)
    start = time.monotonic()
    result = timing.run(config["gpu"]["timing"], config["random_seed"], progress=sys.stderr,
                        contenders=registry.selected(config, "timing"))
    result["wall_s"] = round(time.monotonic() - start, 1)
    rows, taken = result.pop("rows"), result.pop("samples")
    for path in (contract.TIMING, contract.TIMING_SAMPLES, contract.TIMING_SUMMARY):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
    write_csv(out / contract.TIMING, pd.DataFrame(rows))
    write_csv(out / contract.TIMING_SAMPLES, pd.DataFrame(taken, columns=contract.TIMING_SAMPLES_COLUMNS))
    write_json(out / contract.TIMING_SUMMARY, result)
    print(f"timing: {len(rows)} rows, {len(taken)} samples in {result['wall_s']} s -> {out}")


def tables(folder: Path) -> tuple[pd.DataFrame, samples.Samples]:
    """A folder's timing table and its samples (none where it has no samples.csv)."""
    table = pd.read_csv(folder / contract.TIMING)
    held = folder / contract.TIMING_SAMPLES
    frame = pd.read_csv(held) if held.exists() else None
    return table, samples.of(table, frame, str(folder))


def shifts(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Median and largest |change| of the single times, run over reference, by pass, grid and impl."""
    key = ratios.KEY
    both = ratios.keyed(a)[[*key, "ms", "status"]].merge(ratios.keyed(b)[[*key, "ms", "status"]], on=key,
                                                         suffixes=("_run", "_ref"))
    both = both[(both["status_run"] == contract.OK) & (both["status_ref"] == contract.OK)]
    both["change_pct"] = 100 * (both["ms_run"] / both["ms_ref"] - 1)
    return (both.groupby(["direction", "grid", "impl"])["change_pct"]
            .agg(["median", lambda c: c.abs().max(), "size"]).round(2)
            .rename(columns={"<lambda_0>": "max_abs"}))


def judge(run_folder: Path, ref_folder: Path, out: Path | None) -> int:
    """Print the timing verdict of `run_folder` against `ref_folder`; 0 when every row agrees."""
    (a, sa), (b, sb) = tables(run_folder), tables(ref_folder)
    rows = pd.DataFrame(judged.judge(a, b, sa, sb))
    if out:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "timing_verdict.csv", rows)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    print("verdicts by rule:")
    print(rows.groupby(["rule", "verdict"], dropna=False).size().to_string())
    families = rows[rows["part"] == "timing families"]
    print("\nfamilies:")
    print(families[["item", "metric", "run", "reference", "difference", "verdict"]].to_string(index=False))
    flagged = rows[(rows["verdict"] != AGREE) | rows["reason"].astype(str).str.contains("within noise")]
    print(f"\nrows not agree, or beyond the band and within noise ({len(flagged)}):")
    shown = flagged[["item", "metric", "run", "reference", "difference", "tolerance", "verdict", "reason"]]
    print(shown.astype(str).apply(lambda c: c.str.slice(0, 90)).to_string(index=False))
    points = rows[(rows["part"] == judged.NAME) & rows["difference"].notna()]
    change = np.abs(np.log1p(points["difference"].astype(float)))
    print(f"\n{len(points)} ratios: mean |log change| {change.mean():.4f}, p95 {change.quantile(0.95):.4f}, "
          f"max {change.max():.4f}")
    print("\nsingle times, run over reference, % (median, max |change|, n):")
    print(shifts(a, b).to_string())
    disagree = int((rows["verdict"] == DISAGREE).sum())
    print(f"\ntiming verdict: {'agree' if not disagree else f'disagree ({disagree} rows)'}")
    return 1 if disagree else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    timed = sub.add_parser("run", help="time a config's grids as the rule gpu_timing does")
    timed.add_argument("--configfile", nargs="*", default=[])
    timed.add_argument("--out", type=Path, required=True)
    compared = sub.add_parser("judge", help="judge RUN's timing against REF's, as compare does")
    compared.add_argument("run", type=Path)
    compared.add_argument("ref", type=Path)
    compared.add_argument("--out", type=Path, help="a folder for timing_verdict.csv, every judged row")
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.configfile, args.out)
        return 0
    return judge(args.run, args.ref, args.out)


if __name__ == "__main__":
    sys.exit(main())
