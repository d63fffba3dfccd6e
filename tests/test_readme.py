"""The project README: its headline numbers are the committed reference's, and it stays short."""

import re
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

from minimodel.__main__ import main as cli
from minimodel.floor import contract
from minimodel.floor.provenance import reading
from minimodel.report import headline

README = ROOT / "README.md"
REFERENCE = ROOT / headline.REFERENCE


def test_readme_headline_block_is_the_reference_s():
    """Regenerated from results/reference/nvidia-h200: after a refresh of the reference,
    `python -m minimodel headline --write` updates README.md."""
    text = README.read_text()
    assert headline.current_block(text) == headline.block(REFERENCE, headline.REFERENCE.as_posix())
    assert cli(["headline", "--check"]) == 0


def test_headline_numbers_are_the_timing_table_s():
    rows = pd.read_csv(REFERENCE / contract.TIMING)
    fa = rows[(rows["grid"] == contract.FLASHATTENTION_GRID) & (rows["impl"] == contract.SDPA_CUDNN)
              & (rows["direction"] == contract.FORWARD)]  # the headline is the forward's
    ratio = fa["triton_speedup_over_this"]
    geomean = np.exp(np.log(ratio).mean())
    line = next(x for x in headline.table(REFERENCE).splitlines() if f"`{contract.SDPA_CUDNN}`" in x
                and "FlashAttention" in x)
    expected = f"{geomean:.2f}× geometric mean, {ratio.min():.2f}–{ratio.max():.2f}× over {len(ratio)} points"
    assert expected in line


def test_write_replaces_only_the_block_and_check_says_when_stale(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n\n{headline.START}\n| stale | 1.00× |\n{headline.END}\n\nafter\n")
    args = [str(REFERENCE), "--readme", str(readme)]
    assert headline.main([*args, "--check"]) == 1
    assert "not the one" in capsys.readouterr().err
    assert headline.main([*args, "--write"]) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert headline.current_block(text) == headline.block(REFERENCE, str(REFERENCE))
    assert headline.main([*args, "--check"]) == 0


def test_readme_without_markers_is_refused(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n{headline.START}\nno end\n")
    assert headline.main([str(REFERENCE), "--readme", str(readme), "--write"]) == 2
    assert "must hold one" in capsys.readouterr().err
    assert readme.read_text() == f"# title\n{headline.START}\nno end\n"


def test_a_tampered_reference_is_refused(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(REFERENCE, run)
    timing = run / contract.TIMING
    timing.write_text(timing.read_text().replace("sdpa_cudnn", "sdpa_cuDNN", 1))
    with pytest.raises(headline.HeadlineError, match="gpu/timing/timing.csv"):
        headline.table(run)


def _paragraphs(text: str) -> list[list[str]]:
    """Runs of prose lines: blank lines, headings, tables, code blocks and the headline block end
    one; a list item starts one."""
    found, current, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or line.startswith(("```", "#", "|", "<!--")) or not line.strip():
            found, current = found + [current], []
        elif re.match(r"\s*(- |\d+\. )", line):
            found, current = found + [current], [line]
        else:
            current.append(line)
    return [p for p in found + [current] if p]


def test_readme_reads_in_minutes():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    long = [p[0] for p in _paragraphs(text) if len(p) > 12]
    assert not long, f"paragraphs over 12 lines, starting: {long}"


def test_readme_links_point_to_files():
    """Every relative link of README.md names a file of the project."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing


def test_the_headline_counts_the_forward_and_the_gradients_apart():
    cases = pd.read_csv(REFERENCE / contract.CORRECTNESS)
    lines = headline.table(REFERENCE).splitlines()

    def count(rows):
        ran = rows[~rows["skipped"].astype(bool)]
        skipped = f" ({len(rows) - len(ran)} skipped)" if len(rows) > len(ran) else ""
        return f"{int(ran['passed'].astype(bool).sum())} of {len(ran)}{skipped}"

    for direction, label in ((contract.FORWARD, "contenders, the same rule"),
                             (contract.BACKWARD, "contenders' gradients, the same rule")):
        line = next(x for x in lines if label in x)
        rows = cases[cases["direction"] == direction]
        for impl in set(rows["impl"]) - {contract.TRITON}:
            mine = rows[rows["impl"] == impl]
            if mine["skipped"].astype(bool).all():  # no case ran: not listed
                assert f"`{impl}`" not in line, line
            else:
                assert f"`{impl}` {count(mine)}" in line, (impl, line)
    timing = pd.read_csv(REFERENCE / contract.TIMING)
    fa2 = timing[(timing["grid"] == contract.FLASHATTENTION_GRID) & (timing["impl"] == contract.SDPA_FLASH)
                 & (timing["direction"] == contract.BACKWARD) & (timing["status"] == contract.OK)]
    ratio = fa2["triton_speedup_over_this"]
    line = next(x for x in lines if f"backward: the kernel's speed over `{contract.SDPA_FLASH}`" in x)
    assert f"{np.exp(np.log(ratio).mean()):.2f}× geometric mean, {ratio.min():.2f}–{ratio.max():.2f}×" in line


@pytest.mark.parametrize("doc, said", [
    ("README.md", r"The reference was made by the code of ([0-9a-f]{7,40})"),
    ("docs/reproducing.md", r"The committed reference was made at commit ([0-9a-f]{7,40})"),
    ("docs/reproducing.md", r"manifests included, made at commit ([0-9a-f]{7,40})"),
    ("docs/verify.md", r"`results/reference/nvidia-h200` was made on an H200 at commit ([0-9a-f]{7,40})")])
def test_the_docs_name_the_commit_the_reference_was_made_at(doc, said):
    """After a refresh, the prose that says which code made the reference follows it: the commit
    it names is the one the reference's manifests record."""
    named = re.search(said, (ROOT / doc).read_text())
    assert named, f"{doc} no longer says {said!r}"
    commit = reading.load_manifest(REFERENCE / contract.manifest("gpu_timing"))["git"]["commit"]
    assert commit.startswith(named.group(1)), (doc, named.group(1), commit)
