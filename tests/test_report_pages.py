"""The HTML report's pages: the description states the run's headline numbers and links every
figure; every figure's caption says which contenders it draws."""

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pandas as pd
import pytest
import yaml
from docutils.core import publish_parts

from minimodel.floor import contract
from minimodel.report import results_readme

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "nvidia-h200"


@pytest.fixture
def reference() -> Path:
    """The committed H200 run (read only)."""
    return REFERENCE

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "workflow" / "report"
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
DRAWS_CONTENDERS = {"correctness": "correctness", "tflops_vs_n": "timing", "ratio_to_backends": "timing",
                    "gpu_bytes": "bytes", "backward_tflops_vs_n": "timing"}  # figure -> the stage whose
# contenders it draws


@dataclass(frozen=True, order=True)
class Category:
    name: str


def item(path: str) -> SimpleNamespace:
    """A report item as the description's Jinja sees one (Snakemake's FileRecord: target, path)."""
    return SimpleNamespace(target=Path(path).name, path=path)


def render_page(page: Path, config: dict, files=()) -> str:
    """A caption or the description as Snakemake's report renders it: Jinja (trim_blocks,
    lstrip_blocks) over snakemake.config, categories and files, with a link target per item and
    category, then reStructuredText; here any warning of docutils fails the test."""
    categories = {Category(c): {} for c in {*contract.FIGURES.values(), *contract.DECODE_FIGURES.values(),
                                            "Answers", "Tables"}}
    targets = "".join(f"\n.. _{c.name}: javascript:app.showCategory('{c.name}')\n" for c in categories)
    targets += "".join(f"\n.. _{f.target}: javascript:app.showResultInfo('{f.path}')\n" for f in files)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    text = env.from_string(page.read_text() + "\n" + targets).render(
        snakemake=SimpleNamespace(config=config), categories=categories, files=list(files))
    return publish_parts(text, writer="html", settings_overrides={"halt_level": 2})["html_body"]


def run_paths(run: Path) -> dict:
    return {"symbolic": run / contract.SYMBOLIC_BYTES, "cpu_bytes": run / contract.CPU_BYTES,
            "cpu_ceilings": run / contract.CPU_CEILINGS, "correctness": run / contract.CORRECTNESS_SUMMARY,
            "timing": run / contract.TIMING_SUMMARY, "timing_table": run / contract.TIMING,
            "gpu_bytes": run / contract.GPU_BYTES, "gpu_bytes_summary": run / contract.GPU_BYTES_SUMMARY,
            "benchmarks": sorted((run / contract.BENCHMARKS).glob("cpu_*.tsv"))}


def figure_items() -> list:
    return [*(item(f"results/{contract.PLOTS}/{name}.png") for name in contract.FIGURES),
            *(item(f"results/{contract.DECODE_PLOTS}/{name}.png") for name in contract.DECODE_FIGURES)]


@pytest.fixture
def headline(reference, tmp_path) -> Path:
    """The committed H200 run's headline page, as its readme rule writes it."""
    path = tmp_path / contract.REPORT_HEADLINE
    path.parent.mkdir(parents=True)
    numbers = results_readme.collect(run_paths(reference))
    path.write_text(results_readme.render(PAGES / "headline.rst.j2", numbers))
    return path


def test_the_description_states_the_headline_numbers_and_links_every_figure(reference, headline):
    files = [item(str(headline)), *figure_items(), item("results/README.md"),
             item("results/compare/comparison.png")]
    page = render_page(PAGES / "workflow.rst", CONFIG, files)
    corr = json.loads((reference / contract.CORRECTNESS_SUMMARY).read_text())
    assert f"the kernel passes <strong>{corr['ran'] - corr['failed']} of {corr['ran']}</strong> cases" in page
    assert f"{corr['max_err_kernel_vs_fp64']:.2e}" in page
    for name, counts in corr["contenders"].items():
        assert (f"Contender <tt class=\"docutils literal\">{name}</tt>: <strong>{counts['passed']} of "
                f"{counts['passed'] + counts['failed']}</strong> pass") in page
    rows = contract.forward_rows(pd.read_csv(reference / contract.TIMING))  # the headline's: the forward
    lab = rows[(rows["grid"] == contract.LAB_GRID) & (rows["impl"] == contract.NAIVE)]
    for value in lab[lab["N"] == lab["N"].max()]["triton_speedup_over_this"]:
        assert f"{value:,.2f}×" in page
    fa = rows[(rows["grid"] == contract.FLASHATTENTION_GRID) & (rows["impl"] == contract.TRITON)]
    assert f"{fa['tflops'].max():,.1f} TFLOP/s" in page
    ceilings = json.loads((reference / contract.CPU_CEILINGS).read_text())
    assert f"{ceilings['peak_flops_per_s'] / 1e9:,.1f} GFLOP/s" in page
    for f in files[1:]:  # one click from the first page to every figure, the README and the comparison
        assert f"javascript:app.showResultInfo('{f.path}')\">{f.target}</a>" in page
    for category in {*contract.FIGURES.values(), *contract.DECODE_FIGURES.values()}:
        assert f">{category}</a>" in page
    assert "Contenders: none." in page  # the default config names none


def test_the_description_of_a_run_without_its_headline_says_so():
    page = render_page(PAGES / "workflow.rst", CONFIG, [*figure_items(), item("results/README.md"),
                                                        item("results/compare/comparison.png")])
    assert "has not written its headline numbers yet" in page
    assert "Headline numbers of this run" not in page


def with_contenders(config: dict, **stages) -> dict:
    gpu = {stage: {**part, "contenders": stages.get(stage, part.get("contenders", []))}
           if isinstance(part, dict) else part for stage, part in config["gpu"].items()}
    return {**config, "gpu": gpu}


def test_every_figure_caption_says_which_contenders_it_draws():
    config = with_contenders(CONFIG, correctness=["mine", "flex"], timing=["flex_t"], bytes=["tl_b"])
    named = {"correctness": ["mine", "flex"], "timing": ["flex_t"], "bytes": ["tl_b"]}
    for name in contract.FIGURES:
        caption = render_page(PAGES / f"{name}.rst", config)
        default = render_page(PAGES / f"{name}.rst", CONFIG)
        if name in DRAWS_CONTENDERS:
            for contender in named[DRAWS_CONTENDERS[name]]:
                assert f"<tt class=\"docutils literal\">{contender}</tt>" in caption, name
            others = {c for cs in named.values() for c in cs} - set(named[DRAWS_CONTENDERS[name]])
            assert not any(f">{c}</tt>" in caption for c in others), name
            assert "contenders</tt>): none" in default or "contenders</tt>: none" in default, name
        else:
            assert "No contender is drawn" in caption and "No contender is drawn" in default, name
