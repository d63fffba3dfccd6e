"""Two timing tables judged as `compare` judges them: does a run's timing agree with the reference's,
and where did it move?

    python tools/timing_stage.py judge RUN results/reference/nvidia-h200 [--out DIR]

Each folder holds the timing stage's tables where a run holds them (contract.TIMING, and
contract.TIMING_SAMPLES where there is one): a run, the reference, or an extract without manifests.
They go through compare's timing part (`minimodel.report.compare.timing.judge`); printed are the
verdict, the families, every ratio that is not agree, and how far the single times moved by
implementation. Exit 0 when every row agrees, 1 when one disagrees.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import minimodel.entry  # noqa: F401 (first: compiled or interpreted is decided on import)
from minimodel.floor import contract
from minimodel.floor.provenance.io import write_csv
from minimodel.report.compare import ratios, samples
from minimodel.report.compare import timing as judged
from minimodel.report.compare.rows import AGREE, DISAGREE


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
    compared = sub.add_parser("judge", help="judge RUN's timing against REF's, as compare does")
    compared.add_argument("run", type=Path)
    compared.add_argument("ref", type=Path)
    compared.add_argument("--out", type=Path, help="a folder for timing_verdict.csv, every judged row")
    args = parser.parse_args(argv)
    return judge(args.run, args.ref, args.out)


if __name__ == "__main__":
    sys.exit(main())
