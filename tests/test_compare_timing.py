"""The timing verdict on runs with samples: synthetic reruns of the committed reference's grid agree,
a real slowdown is named, statuses are compared as words, bad samples are said and judged by the
wider band. Table-level (`timing.judge`), so that a hundred reruns take seconds."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REFERENCE
from test_compare import vouch, without_samples

from minimodel.floor import contract
from minimodel.report import compare
from minimodel.report.compare import bands, families, ratios, samples, timing
from minimodel.report.compare.rows import AGREE, DISAGREE, NOT_COMPARABLE

DATA = Path(__file__).resolve().parent / "data"
K = 10  # samples a side
BETWEEN = 0.025 / 1.96 / np.sqrt(2)  # a run's shift of one time: single times +-2.5 % at p95 between runs
WITHIN = 0.01  # one sample's noise within a run
DRIFT = 0.005  # a round's drift, common to every implementation at the point


@pytest.fixture(scope="module")
def base():
    """The reference's timing rows (key, status, ms): the grid and the times the reruns start from."""
    return pd.read_csv(REFERENCE / contract.TIMING)[[*ratios.KEY, "status", "ms"]]


def draws(base: pd.DataFrame, rng, slower=None) -> np.ndarray:
    """A synthetic run's samples of every ok row (rows x K): each row shifted by the run's own draw
    (per implementation and point), then K samples with noise of their own and a drift per round
    shared by the point's implementations; `slower`: rows (a mask of `base`) 10 % slower."""
    ok = (base["status"] == contract.OK).to_numpy()
    rows = base[ok]
    point = rows.groupby(ratios.POINT, sort=False).ngroup().to_numpy()
    shift = rng.normal(0, BETWEEN, len(rows))[:, None]
    drift = rng.normal(0, DRIFT, (point.max() + 1, K))[point]
    noise = rng.normal(0, WITHIN, (len(rows), K))
    logs = np.log(rows["ms"].to_numpy())[:, None] + shift + drift + noise
    if slower is not None:
        logs += np.log(1.10) * slower[ok][:, None]
    return np.exp(logs)


def frames(base: pd.DataFrame, ms: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(timing.csv, samples.csv) of a run whose ok rows took the samples `ms`."""
    ok = (base["status"] == contract.OK).to_numpy()
    table = base.copy()
    table["samples"] = np.where(ok, K, np.nan)
    table.loc[ok, "ms"] = np.median(ms, axis=1)
    rows = base[ok]
    long = rows[ratios.KEY].loc[rows.index.repeat(K)].reset_index(drop=True)
    long["sample"] = np.tile(np.arange(K), len(rows))
    long["ms"] = ms.ravel()
    return table, long


def rerun(base, rng, slower=None):
    return frames(base, draws(base, rng, slower))


def judged(run, ref) -> pd.DataFrame:
    return pd.DataFrame(timing.judge(run[0], ref[0], samples.of(*run, "run"), samples.of(*ref, "reference")))


class Grid:
    """The reference's ratios as `timing.decide` and `families.decide` take them, their numbers set
    from two runs' sample matrices (`draws`) directly: a hundred reruns in a second."""

    def __init__(self, base: pd.DataFrame):
        ok = base[base["status"] == contract.OK].reset_index(drop=True)
        at = {key: i for i, key in enumerate(ok[ratios.KEY].itertuples(index=False, name=None))}
        side = ratios.side(base)
        pairs = side[side["status"] == contract.OK].reset_index(drop=True)
        points = pairs[ratios.POINT].itertuples(index=False, name=None)
        keys = list(zip(points, pairs["impl"], strict=True))
        self.other = np.array([at[(*p, impl)] for p, impl in keys])
        self.kernel = np.array([at[(*p, contract.TRITON)] for p, _ in keys])
        pairs["band"] = bands.point_band(pairs["grid"], pairs["N"], pairs["direction"], pairs["metric"])
        self.pairs = pairs.assign(rule=bands.BY_SAMPLES, tolerance=pairs["band"])

    def disagree(self, run: np.ndarray, ref: np.ndarray) -> int:
        pairs = self.pairs.copy()
        for side, ms in (("run", run), ("ref", ref)):
            median = np.median(ms, axis=1)
            pairs[f"ratio_{side}"] = median[self.other] / median[self.kernel]
            pairs[f"logs_{side}"] = list(np.log(ms[self.other] / ms[self.kernel]))
        decided = (timing.decide(pairs), families.decide(pairs))
        return sum(int((d["verdict"] == DISAGREE).sum()) for d in decided)


def test_a_hundred_reruns_agree(base):
    """Over the reference's 447 ratios: a shift per run, implementation and point (single times
    +-2.5 % at p95 between runs), noise between samples and a drift per round. At least 99 of 100
    reruns agree, points and families."""
    grid = Grid(base)
    assert len(grid.pairs) >= 440
    rng = np.random.default_rng(2026)
    alarms = [grid.disagree(draws(base, rng), draws(base, rng)) for _ in range(100)]
    assert sum(a == 0 for a in alarms) >= 99, alarms


def test_the_whole_comparison_decides_as_the_hundred_reruns_do(base):
    """The tables' path (samples.csv read and checked, ratios paired by round) gives the verdicts the
    shortcut above gives, on one rerun and on one with the kernel slower everywhere."""
    grid = Grid(base)
    rng = np.random.default_rng(3)
    kernel = (base["impl"] == contract.TRITON).to_numpy()
    for slower in (None, kernel):
        run, ref = draws(base, rng, slower), draws(base, rng)
        table = judged(frames(base, run), frames(base, ref))
        assert (table["verdict"] == DISAGREE).sum() == grid.disagree(run, ref)
    assert (table["verdict"] == DISAGREE).sum() > 0


def test_a_real_h200_rerun_agrees_with_the_reference_it_reran():
    """h200-rerun-8, the whole workflow run again on an H200 in the committed reference's code, its
    timing table and samples kept in tests/data (the whole run is in git history: docs/reproducing.md's
    Reruns table), against the reference: no ratio or family disagrees; 445 ratios are judged by their
    samples and 59 by their status, as its own compare judged them."""
    run = (pd.read_csv(DATA / "timing_h200-rerun-8.csv"), pd.read_csv(DATA / "samples_h200-rerun-8.csv.gz"))
    ref = (pd.read_csv(REFERENCE / contract.TIMING), pd.read_csv(REFERENCE / contract.TIMING_SAMPLES))
    table = judged(run, ref)
    assert not (table["verdict"] == NOT_COMPARABLE).any()
    assert (table["verdict"] == DISAGREE).sum() == 0
    assert table.loc[table["part"] == timing.NAME, "rule"].value_counts().to_dict() == {
        bands.BY_SAMPLES: 445, bands.BY_STATUS: 59}
    # and it is its data that agrees: the same run with the kernel 10 % slower at every point does not
    slower = run[0].assign(ms=np.where(run[0]["impl"] == contract.TRITON, 1.1, 1.0) * run[0]["ms"])
    kernel = run[1]["impl"] == contract.TRITON
    samples_slower = run[1].assign(ms=np.where(kernel, 1.1, 1.0) * run[1]["ms"])
    assert (judged((slower, samples_slower), ref)["verdict"] == DISAGREE).sum() > 0


def test_a_slowdown_at_three_points_is_named_and_nothing_else(base):
    """The kernel 10 % slower at three points of the lab grid's N >= 1024, the one band below 10 %
    (`bands.POINT_BANDS`): those three points disagree, significant on their 10 samples a side, and
    no other point does."""
    lab = base[(base["grid"] == contract.LAB_GRID) & (base["N"] >= bands.LAB_LARGE_N)
               & (base["direction"] == contract.FORWARD)]
    slowed = lab[ratios.POINT].drop_duplicates().head(3)
    assert (bands.point_band(slowed["grid"], slowed["N"], slowed["direction"]) < 0.10).all()
    hit = base.merge(slowed.assign(hit=1), on=ratios.POINT, how="left")["hit"].eq(1).to_numpy()
    mask = hit & (base["impl"] == contract.TRITON).to_numpy()
    rng = np.random.default_rng(7)
    table = judged(rerun(base, rng, slower=mask), rerun(base, rng))
    bad = table[(table["verdict"] == DISAGREE) & (table["part"] == timing.NAME)]
    named = {timing.label(r) for r in slowed.to_dict("records")}
    assert set(bad["item"]) == named
    assert bad["reason"].str.startswith("beyond its band and significant").all()
    assert (bad["rule"] == bands.BY_SAMPLES).all()
    others = table[(table["part"] == families.NAME) & (table["verdict"] == DISAGREE)]
    assert set(others["item"]) <= {f"{contract.FORWARD}, the lab grid, d = 64"}


def test_the_same_status_on_both_sides_agrees_and_a_changed_one_is_said(base):
    """naive out of memory in both runs agrees, by its status, whatever pandas does with the NaN
    ratio; a status that changes disagrees, naming both."""
    run = base.copy()
    table = pd.DataFrame(timing.judge(run, base, samples.Samples(held=False), samples.Samples(held=False)))
    oom = table[table["run"].astype(str).str.contains(contract.OUT_OF_MEMORY)]
    assert len(oom) == (base["status"] == contract.OUT_OF_MEMORY).sum() >= 1  # naive's, one ratio each
    assert (oom["verdict"] == AGREE).all() and (oom["rule"] == bands.BY_STATUS).all()
    assert not (table["verdict"] == DISAGREE).any()
    changed = base.index[(base["impl"] == contract.SDPA_CUDNN) & (base["status"] == contract.OK)][0]
    run.loc[changed, ["status", "ms"]] = [contract.OUT_OF_MEMORY, np.nan]
    table = pd.DataFrame(timing.judge(run, base, samples.Samples(held=False), samples.Samples(held=False)))
    bad = table[table["verdict"] == DISAGREE]
    assert len(bad) == 1 and bad.iloc[0]["metric"].startswith("kernel/cudnn")
    assert bad.iloc[0]["reason"] == (f"status differs: sdpa_cudnn: {contract.OUT_OF_MEMORY} (run) against "
                                     f"{contract.OK} (reference)")


def test_an_ok_row_without_a_time_is_not_judged_as_a_number(base):
    run = base.copy()
    row = base.index[(base["impl"] == contract.NAIVE) & (base["status"] == contract.OK)][0]
    run.loc[row, "ms"] = np.nan
    table = pd.DataFrame(timing.judge(run, base, samples.Samples(held=False), samples.Samples(held=False)))
    said = table[table["reason"].str.contains(ratios.NO_TIME, regex=False)]
    assert len(said) == 1 and said.iloc[0]["verdict"] == NOT_COMPARABLE
    assert not (table["verdict"] == DISAGREE).any()


def test_an_older_run_is_judged_by_the_wider_band_and_each_row_says_so(base):
    rng = np.random.default_rng(1)
    new = rerun(base, rng)
    table = pd.DataFrame(timing.judge(new[0], base, samples.of(*new, "run"), samples.of(base, None, "ref")))
    numbers = table[(table["part"] == timing.NAME) & table["difference"].notna()]
    assert len(numbers) >= 440
    assert (numbers["rule"] == bands.WIDER + samples.NONE + " in the reference").all()
    point = numbers["item"].str.extract(r"^(?:(?P<direction>\S+): )?(?P<grid>\w+) \(\d+, \d+, (?P<N>\d+)")
    point["direction"] = point["direction"].fillna(contract.FORWARD)
    metric = numbers["metric"].str.replace(r" \(.*\)$", "", regex=True)
    band = bands.point_band(point["grid"], point["N"].astype(int), point["direction"], metric)
    assert (numbers["tolerance"].to_numpy() == np.maximum(band, 0.10)).all()
    assert set(numbers["tolerance"]) > {0.10}  # a band below 10 % is widened, one above is kept


def test_damaged_samples_are_one_line_and_their_rows_take_the_wider_band(base):
    rng = np.random.default_rng(2)
    run, ref = rerun(base, rng), rerun(base, rng)
    long = run[1].copy()
    first = long.index[(long["impl"] == contract.TRITON) & (long["grid"] == contract.FLASHATTENTION_GRID)]
    long.loc[first[0], "ms"] = np.nan  # a NaN
    fa2 = long.index[long["impl"] == contract.SDPA_FLASH]
    long.loc[fa2[0], "ms"] = -1.0  # a non-positive time
    long = long.drop(index=long.index[long["impl"] == contract.SDPA_CUDNN][:1])  # a count short
    unknown = long.iloc[:1].assign(impl="nobody")
    long = pd.concat([long, unknown], ignore_index=True)
    table = pd.DataFrame(timing.judge(run[0], ref[0], samples.of(run[0], long, "run"),
                                      samples.of(*ref, "reference")))
    lines = table[table["metric"] == "samples"]
    assert len(lines) == 1
    line = lines.iloc[0]["reason"]
    assert line.startswith(f"{contract.TIMING_SAMPLES} of the run: 3 rows' samples missing or damaged (")
    assert "a NaN or non-positive ms" in line and "9 samples where timing.csv says 10" in line
    assert "1 sample rows of no timed row (unknown keys)" in line
    damaged = table[table["rule"] == bands.WIDER + samples.DAMAGED + " in the run"]
    ratios_at = ratios.side(base)
    at_kernel = ratios_at.merge(long.loc[[first[0]], ratios.POINT].drop_duplicates(), on=ratios.POINT)
    # the kernel's point: every ratio there that is a number; fa2's and cudnn's: their own
    assert len(damaged) == at_kernel["ratio"].notna().sum() + 2
    assert not (table["verdict"] == DISAGREE).any()


def test_a_timing_ms_that_is_not_the_median_of_its_samples_is_damaged(base):
    """A timing.csv beside samples.csv of another run (the point's change is read from one, its test
    from the other): that row is named, and its ratio judged by the wider band on its ms."""
    rng = np.random.default_rng(3)
    run, ref = rerun(base, rng), rerun(base, rng)
    table = run[0].copy()
    row = table.index[(table["impl"] == contract.SDPA_CUDNN) & (table["status"] == contract.OK)
                      & (table["grid"] == contract.FLASHATTENTION_GRID)][0]
    table.loc[row, "ms"] *= 1.2
    judged_rows = pd.DataFrame(timing.judge(table, ref[0], samples.of(table, run[1], "run"),
                                            samples.of(*ref, "reference")))
    line = judged_rows.loc[judged_rows["metric"] == "samples", "reason"]
    assert len(line) == 1 and "1 rows' samples missing or damaged" in line.iloc[0]
    assert "is not the median of its samples" in line.iloc[0]
    damaged = judged_rows[judged_rows["rule"] == bands.WIDER + samples.DAMAGED + " in the run"]
    assert len(damaged) == 1 and damaged.iloc[0]["verdict"] == DISAGREE  # 20 % against max(band, 10 %)
    # the same table with its own medians: nothing damaged, nothing judged by the wider band
    held = samples.of(run[0], run[1], "run")
    assert not held.damaged and held.line is None


def with_samples(folder, ms: np.ndarray, base: pd.DataFrame) -> None:
    """`folder` (a copy of the reference) as a run with samples: timing.csv's `samples` and ms their
    median, samples.csv beside it, both vouched for by the stage's manifest."""
    table, long = frames(base, ms)
    timing_csv = pd.read_csv(folder / contract.TIMING)
    timing_csv["ms"], timing_csv["samples"] = table["ms"].to_numpy(), table["samples"].to_numpy()
    timing_csv.to_csv(folder / contract.TIMING, index=False)
    long.to_csv(folder / contract.TIMING_SAMPLES, index=False)
    owner = folder / contract.manifest("gpu_timing")
    m = json.loads(owner.read_text())
    listed = str(Path(m["outputs"][0]["path"]).parent / "samples.csv")
    if all(entry["path"] != listed for entry in m["outputs"]):  # a run made before the samples
        m["outputs"].append({"path": listed, "kind": "output", "sha256": "", "size": 0})
    owner.write_text(json.dumps(m))
    vouch(folder / contract.TIMING)
    vouch(folder / contract.TIMING_SAMPLES)


def test_two_runs_with_samples_are_judged_by_them_and_an_older_one_by_the_wider_band(run, tmp_path, base):
    """Folders, as `python -m minimodel compare` reads them: samples.csv checked against the
    manifests like every table; a reference without one judges every ratio by the wider band."""
    rng = np.random.default_rng(5)
    other = tmp_path / "other"
    shutil.copytree(run, other)
    with_samples(run, draws(base, rng), base)
    with_samples(other, draws(base, rng), base)
    table, verdict = compare.compare_runs(run, other)
    assert verdict["verdict"] == AGREE, verdict["disagreements"]
    numbers = table[(table["part"] == timing.NAME) & table["difference"].notna()]
    assert len(numbers) >= 440 and (numbers["rule"] == bands.BY_SAMPLES).all()
    assert verdict["families"][0].count("[") == 2  # an interval a side
    assert verdict["timing_rules"][bands.BY_SAMPLES] == len(numbers)
    older = shutil.copytree(REFERENCE, tmp_path / "older")
    without_samples(older)
    table, verdict = compare.compare_runs(run, older)
    numbers = table[(table["part"] == timing.NAME) & table["difference"].notna()]
    assert (numbers["rule"] == bands.WIDER + samples.NONE + " in the reference").all()
    long = pd.read_csv(run / contract.TIMING_SAMPLES)
    long.loc[0, "ms"] *= 2  # edited since the stage wrote it
    long.to_csv(run / contract.TIMING_SAMPLES, index=False)
    with pytest.raises(compare.RunError, match="gpu/timing/samples.csv: bytes changed since rule gpu_timing"):
        compare.compare_runs(run, other)


def test_each_family_takes_its_own_points_samples():
    """A family's samples are the mean over its own points, whatever order the families come in: two
    families whose first appearance is not the order of their keys (backward before forward, d = 128
    before d = 64) each keep theirs."""
    rows, rng = [], np.random.default_rng(7)
    for direction, d, level in [(contract.BACKWARD, 128, 0.5), (contract.FORWARD, 64, -0.5),
                                (contract.BACKWARD, 64, 1.0), (contract.FORWARD, 128, -1.0)]:
        for _ in range(2):  # two points a family
            run, ref = level + 0.01 * rng.standard_normal(K), level + 0.01 * rng.standard_normal(K)
            rows.append({"direction": direction, "grid": contract.FLASHATTENTION_GRID, "d": d,
                         "metric": "kernel/fa4", "ratio_run": np.exp(run.mean()),
                         "ratio_ref": np.exp(ref.mean()), "logs_run": run, "logs_ref": ref})
    table = families.decide(pd.DataFrame(rows))
    assert len(table) == 4
    for family in table.to_dict("records"):
        assert np.mean(family["logs_run"]) == pytest.approx(np.log(family["run"]), abs=1e-9)
        assert np.mean(family["logs_ref"]) == pytest.approx(np.log(family["ref"]), abs=1e-9)
    assert (table["verdict"] == AGREE).all()


def test_the_committed_reference_holds_its_samples_for_every_ok_row():
    """At least MIN_SAMPLES of every `ok` timing row, each in samples.csv as timing.csv counts
    them, in round order: nothing of the reference is judged by the wider band for want of them."""
    table = pd.read_csv(REFERENCE / contract.TIMING)
    ok = table[table["status"] == contract.OK]
    assert len(ok) and (ok["samples"] >= samples.MIN_SAMPLES).all()
    held = samples.of(table, pd.read_csv(REFERENCE / contract.TIMING_SAMPLES), "reference")
    assert held.held and not held.damaged and held.line is None
    assert len(held.by_key) == len(ok)


def test_a_point_whose_implementations_hold_unequal_sample_counts_is_judged_by_the_wider_band():
    """A round times every implementation of a point once: a kernel with 10 samples beside another
    implementation's 20 are not one set of rounds, and pairing the first 10 would leave the other 10
    out of the test while the change is read from the median of all 20."""
    point = (contract.FORWARD, contract.LAB_GRID, 2, 4, 1024, 64, False)
    rng = np.random.default_rng(11)
    held = samples.Samples(held=True, by_key={(*point, contract.TRITON): 1 + 0.01 * rng.random(10),
                                               (*point, contract.NAIVE): 2 + 0.01 * rng.random(20)})
    assert held.rule(point, contract.NAIVE) == (samples.UNEQUAL, None)
    held.by_key[(*point, contract.NAIVE)] = held.by_key[(*point, contract.NAIVE)][:10]
    why, logs = held.rule(point, contract.NAIVE)
    assert why == "" and len(logs) == 10


@pytest.mark.parametrize("band", sorted({*bands.POINT_BANDS.values(), *bands.RATIO_BANDS.values(),
                                          bands.FAMILY_BAND, bands.OLDER_FLOOR}))
def test_a_change_equal_to_its_band_is_within_it(band):
    """log1p(expm1(x)) is x within a few ulps: a change of exactly the band, computed from two
    ratios as `ratios.change` computes it, is not beyond it; one a hundredth of a percent more is."""
    for ref in (0.37, 1.0, 2.9):
        at = ratios.change(ref * (1 + band), ref)
        assert not bands.beyond(at, band) and not bands.beyond(ratios.change(ref, ref * (1 + band)), band)
        assert bands.beyond(ratios.change(ref * (1 + band + 1e-4), ref), band)


def test_a_grid_no_committed_run_has_gets_the_widest_band_and_says_so(base):
    """A point of a grid the bands were not derived on is judged by `bands.WIDEST`, and its row's
    reason names the grid and the pass, where it agreed without a word."""
    renamed = base.assign(grid=base["grid"].where(base["grid"] != contract.LAB_GRID, "lab-xl"))
    none = samples.Samples(held=False)
    rows = pd.DataFrame(timing.judge(renamed, renamed, none, none))
    numbers = rows[(rows["part"] == timing.NAME) & rows["difference"].notna()]
    unknown = numbers[numbers["item"].str.contains("lab-xl")]
    assert len(unknown) and unknown["reason"].str.contains(
        f"no band derived for lab-xl, [a-z+]+: the widest, {bands.WIDEST:.1%}", regex=True).all()
    assert (unknown["tolerance"] == bands.wider(bands.WIDEST)).all()
    assert not numbers[~numbers["item"].str.contains("lab-xl")]["reason"].str.contains("no band").any()
