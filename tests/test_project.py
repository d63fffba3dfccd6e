"""Where results may go, and config sizes this machine cannot hold."""

import pytest

from minimodel.cpu import bytecount, roofline
from minimodel.provenance import project


@pytest.fixture
def checkout(tmp_path):
    for name in ("src/minimodel", "workflow", "config", "results/reference/h200/symbolic"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "results/reference/h200/symbolic/manifest.json").write_text("{}")
    return tmp_path


@pytest.mark.parametrize("results_dir", ["results", "results/run2", "results/reference/new-gpu"])
def test_a_folder_of_its_own_is_accepted(checkout, results_dir):
    assert project.check_results_dir(results_dir, checkout) == (checkout / results_dir).resolve()


def test_a_folder_outside_the_project_is_accepted(checkout, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("scratch")
    assert project.check_results_dir(elsewhere, checkout) == elsewhere.resolve()


@pytest.mark.parametrize("results_dir, says", [
    (".", "holds the project itself"),
    ("results/..", "holds the project itself"),
    ("..", "holds the project itself"),
    ("src/minimodel", "inside the project's src/"),
    ("workflow", "inside the project's workflow/"),
    ("config/x", "inside the project's config/"),
    ("results/reference", "holds a committed reference run"),
    ("results/reference/h200", "holds a committed reference run"),
])
def test_a_folder_over_the_project_or_a_reference_is_refused(checkout, results_dir, says):
    with pytest.raises(project.UnsafeResultsDir, match=says):
        project.check_results_dir(results_dir, checkout)


def test_a_reference_is_a_target_when_asked(checkout):
    assert project.check_results_dir("results/reference/h200", checkout, overwrite_reference=True)


@pytest.mark.parametrize("needs, key", [
    (roofline.memory_needed(10_000_000, 256, 2048), "roofline.matmul_n"),
    (bytecount.memory_needed([256, 1_000_000]), "cpu.n"),
])
def test_a_size_this_machine_cannot_hold_names_its_key(needs, key):
    with pytest.raises(project.ConfigTooLarge, match=f"^{key} needs about .* GiB.*lower {key}$"):
        project.check_memory(needs)


def test_the_default_sizes_fit():
    project.check_memory(roofline.memory_needed(2048, 256, 2048))
    project.check_memory(bytecount.memory_needed([16384]))
