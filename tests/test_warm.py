"""The timing stage's first calls made ahead (rule gpu_warm): the stage's passes in its order, the
kernel and every contender, the smallest budgets; the workflow runs it before gpu_timing and
gpu_bytes without making them stale (GPU parts skip)."""

import contextlib
import dataclasses
import io
import json
import re

import pandas as pd
import pytest
import torch
from conftest import HAS_CUDA, copy_of_tiny_run, snakemake, snakemake_until

from minimodel.contenders import parse
from minimodel.contenders.timed import TimingCase
from minimodel.floor import contract
from minimodel.floor.provenance import configcheck
from minimodel.gpu import grids, timing, warm

CFG = configcheck.load_config()["gpu"]["timing"]


def test_the_passes_are_the_stages_in_its_order_with_its_seeds():
    passes = list(timing.passes(CFG, 7))
    points = grids.points(CFG)
    assert [(p, d) for p, d, _ in passes] == [(p, d) for p in points for d in contract.DIRECTIONS]
    for p, direction, case in passes:
        i = points.index(p)
        assert (case.B, case.H, case.N, case.d, case.causal) == (p.B, p.H, p.N, p.d, p.causal)
        assert case.seed == 7 + i
        assert (case.warmup_ms, case.rep_ms) == (CFG["warmup_ms"], CFG["rep_ms"])
        assert case.sample_ms == CFG["sample_ms"]
        assert case.host_cost == (p.grid == contract.LAB_GRID and direction == contract.FORWARD)
    forward_only = list(timing.passes({**CFG, "backward": False}, 0))
    assert {d for _, d, _ in forward_only} == {contract.FORWARD} and len(forward_only) == len(points)


def test_first_calls_keep_the_point_and_drop_every_budget_but_one_sample():
    case = TimingCase(2, 4, 256, 64, True, 11, 10, 40, 20, True, 40)
    cut = warm.first_calls(case)
    assert (cut.B, cut.H, cut.N, cut.d, cut.causal, cut.seed) == (2, 4, 256, 64, True, 11)
    assert cut.rep_ms is None and not cut.host_cost and cut.sample_warmup_ms == 0
    assert cut.sample_ms < 0.01  # a graph of one call


class _Child:
    def __init__(self, name):
        self.contender = parse(name, {"fn": "torch_blocked:forward", "backward": True})
        self.log = None


def test_every_pass_prepares_the_kernel_and_each_contender_with_the_first_calls_budgets(monkeypatch):
    children = [_Child("mine"), _Child("yours")]

    @contextlib.contextmanager
    def started(contenders, clock):
        assert [c.name for c in contenders] == ["mine", "yours"]
        yield children
    calls = []

    def time_pass(point, direction, impls, case, samples, ceilings, clock):
        calls.append((point, direction, [i.name for i in impls], case, samples, ceilings))
        for impl in impls:
            clock[f"prepare {impl.name}"] += 0.25
            clock[f"sample {impl.name}"] += 0.5
        rows = [{**dataclasses.asdict(point), "direction": direction, "impl": impl.name, "status": "ok",
                 "checked": True, "ms": 1.0, "dtype": "float16"} for impl in impls]
        return rows, [{"ms": 1.0}]
    monkeypatch.setattr(warm.timing, "started", started)
    monkeypatch.setattr(warm, "time_pass", time_pass)
    result = warm.run(CFG, 3, [c.contender for c in children])
    passes = list(timing.passes(CFG, 3))
    assert [(p, d) for p, d, *_ in calls] == [(p, d) for p, d, _ in passes]
    for (_, _, names, case, samples, ceilings), (_, _, planned) in zip(calls, passes, strict=True):
        assert names == [contract.TRITON, "mine", "yours"]
        assert case == warm.first_calls(planned) and samples == 1 and ceilings is None
    rows = pd.DataFrame(result["rows"])
    assert list(rows.columns) == list(grids.WARM_COLUMNS) and len(rows) == 3 * len(passes)
    assert rows["seconds"].eq(0.75).all()  # its preparation and its one sample; no ms column
    assert result["seconds"]["prepare mine"] == pytest.approx(0.25 * len(passes), abs=0.1)


def _ok_rows(point, direction, impls, case, samples, ceilings, clock):
    for impl in impls:
        clock[f"prepare {impl.name}"] += 0.25
    return [{**dataclasses.asdict(point), "direction": direction, "impl": impl.name, "status": "ok",
             "checked": True} for impl in impls], []


def test_an_error_outside_a_row_stops_the_warm_up_keeps_its_rows_and_says_so(monkeypatch, capsys):
    calls = []

    def time_pass(point, direction, impls, *args):
        calls.append((point, direction))
        if len(calls) == 3:
            raise MemoryError("no room for the inputs\nsecond line")
        return _ok_rows(point, direction, impls, *args)
    monkeypatch.setattr(warm, "time_pass", time_pass)
    progress = io.StringIO()
    result = warm.run(CFG, 3, progress=progress)
    passes = [(p, d) for p, d, _ in timing.passes(CFG, 3)]
    rows = pd.DataFrame(result["rows"], columns=grids.WARM_COLUMNS)
    assert len(rows) == len(passes) and rows["status"].iloc[:2].eq("ok").all()
    stopped = rows.iloc[2:]
    assert stopped["impl"].isna().all() and stopped["status"].eq(result["stopped"]).all()
    assert [(r.grid, r.N, r.d, r.causal, r.direction) for r in stopped.itertuples()] == \
        [(p.grid, p.N, p.d, p.causal, d) for p, d in passes[2:]]
    assert result["stopped"] == ("failed: the warm-up stopped at this pass "
                                 "(MemoryError: no room for the inputs)")
    assert f"gpu_warm stopped after 2 of {len(passes)} passes (MemoryError" in progress.getvalue()
    assert "Traceback" in capsys.readouterr().err  # the rule's log
    assert result["seconds"]["prepare triton"] == 0.5


def test_a_contender_that_does_not_start_stops_the_warm_up_before_any_pass(monkeypatch):
    @contextlib.contextmanager
    def started(contenders, clock):
        raise RuntimeError("mine could not be imported")
        yield
    monkeypatch.setattr(warm.timing, "started", started)
    monkeypatch.setattr(warm, "time_pass", _ok_rows)
    result = warm.run(CFG, 0, [_Child("mine").contender])
    rows = pd.DataFrame(result["rows"])
    assert len(rows) == len(list(timing.passes(CFG, 0))) and rows["impl"].isna().all()
    assert rows["status"].eq("failed: the warm-up stopped at this pass "
                             "(RuntimeError: mine could not be imported)").all()


def test_without_an_error_the_result_says_nothing_stopped(monkeypatch):
    monkeypatch.setattr(warm, "time_pass", _ok_rows)
    result = warm.run({**CFG, "lab_n": CFG["lab_n"][:1], "fa_n": []}, 0)
    assert "stopped" not in result and pd.DataFrame(result["rows"])["status"].eq("ok").all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_first_calls_run_and_check_at_a_small_grid():
    from minimodel.contenders.catalog import BUILTINS

    cfg = {**CFG, "lab_n": [64, 256], "fa_n": [], "fa_head_dims": []}
    result = warm.run(cfg, 0, [BUILTINS["flex"]])
    rows = pd.DataFrame(result["rows"])
    assert len(rows) == 2 * len(list(timing.passes(cfg, 0)))
    assert rows["status"].eq(contract.OK).all() and rows["checked"].all(), rows
    assert (rows["seconds"] > 0).all()


@pytest.mark.workflow
@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device makes the first calls")
def test_without_cuda_gpu_warm_says_so_and_the_timing_does_not_record_it(tmp_path):
    root, _ = snakemake_until(tmp_path, "gpu_warm")
    cfg = configcheck.load_config(root / "config" / "tiny.yaml")["gpu"]["timing"]
    table = pd.read_csv(root / "results" / contract.WARM)
    assert list(table.columns) == list(grids.WARM_COLUMNS) and len(table) == len(list(timing.passes(cfg, 0)))
    assert table["status"].eq(contract.NO_GPU_WARM).all()
    made = json.loads((root / "results" / contract.manifest("gpu_timing")).read_text())
    assert not [e for e in made["inputs"] if "gpu/warm" in e["path"]]  # run after it, not made from it


@pytest.mark.workflow
def test_gpu_warm_runs_before_the_timing_and_never_beside_the_measurements(tiny_run, tmp_path):
    """No GPU stage's shard depends on gpu_warm (a warm-up forced again re-runs none), yet none
    that measures runs beside it (`gpu_measure`): it starts first (`priority`)."""
    def planned(*args):
        stats = snakemake(tiny_run.root, "-n", *args).stdout.split("Job stats:")[1].split("\n\n")[0]
        return {line.split()[0] for line in stats.splitlines()[3:]} - {"total", "all"}  # past its header
    # none depends on it
    gpu = {"gpu_timing", "gpu_bytes", "gpu_correctness", "gpu_timing_shard", "gpu_bytes_shard",
           "gpu_correctness_shard"}
    assert planned("--forcerun", "gpu_warm") & gpu == set()
    # two cores, both ready: one after the other all the same
    own = copy_of_tiny_run(tiny_run, tmp_path / "project")
    said = snakemake(own, "--forcerun", "gpu_warm", "gpu_bytes_shard", "--until", "gpu_warm",
                     "gpu_bytes").stderr
    events = re.findall(r"^Job \d+: (?:local)?rule (gpu_warm|gpu_bytes_shard)\b"
                        r"|^Finished jobid: \d+ \(Rule: (gpu_warm|gpu_bytes_shard)\)", said, flags=re.M)
    order = [("start", a) if a else ("end", b) for a, b in events]
    assert order[:2] == [("start", "gpu_warm"), ("end", "gpu_warm")] and len(order) > 2, said


@pytest.mark.workflow
def test_a_resources_list_without_gpu_measure_is_refused_before_any_job(tiny_run):
    proc = snakemake(tiny_run.root, "-n", "--resources", "gpu=1", check=False)
    assert proc.returncode == 1 and "Job stats" not in proc.stdout
    assert proc.stderr.strip().splitlines()[-1].startswith("--resources limits gpu but not gpu_measure")
