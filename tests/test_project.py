"""Where results may go, and config sizes this machine cannot hold."""

import pytest

from minimodel.cpu import bytecount, roofline
from minimodel.floor.provenance import project


@pytest.fixture
def checkout(tmp_path):
    for name in ("src/minimodel", "workflow", "config", "results/reference/h200/symbolic"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "results/reference/h200/symbolic/manifest.json").write_text("{}")
    return tmp_path


@pytest.mark.parametrize("results_dir", ["results", "results/run2", "results/run2/../run3"])
def test_a_folder_of_its_own_is_accepted(checkout, results_dir):
    assert project.check_results_dir(results_dir, checkout) == (checkout / results_dir).resolve()


def test_a_folder_outside_the_project_is_accepted(checkout, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("scratch")
    assert project.check_results_dir(elsewhere, checkout) == elsewhere.resolve()


@pytest.mark.parametrize("results_dir, says", [
    (".", "holds the project itself"),
    ("results/..", "holds the project itself"),
    ("..", "holds the project itself"),
    ("src/minimodel", "is src/minimodel/ in the project, outside results/"),
    ("workflow", "is workflow/ in the project"),
    ("config/x", "is config/x/ in the project"),
    ("results/reference", "holds a committed reference run"),
    ("results/reference/h200", "holds a committed reference run"),
    # inside the project only results/ holds runs, wherever `..` leads
    ("notes", "is notes/ in the project"),
    ("results/../notes", "is notes/ in the project"),
    ("results/../notes/tuning", "is notes/tuning/ in the project"),
    ("tools", "is tools/ in the project"),
    # the references are read, never written, unless overwrite_reference names one
    ("results/reference/h200/extra", "holds a committed reference run"),
    ("results/reference/new-gpu", "holds a committed reference run"),
])
def test_a_folder_over_the_project_or_a_reference_is_refused(checkout, results_dir, says):
    with pytest.raises(project.UnsafeResultsDir, match=says) as err:
        project.check_results_dir(results_dir, checkout)
    message = str(err.value)
    assert message.startswith(f"results_dir {results_dir!r}") and "\n" not in message
    assert "accepted: results, " in message


@pytest.mark.parametrize("results_dir", ["results/reference/h200", "results/reference/new-gpu"])
def test_a_reference_is_a_target_when_asked(checkout, results_dir):
    assert project.check_results_dir(results_dir, checkout, overwrite_reference=True)


@pytest.mark.parametrize("results_dir", ["results/reference", "results/reference/h200/extra"])
def test_overwrite_reference_asks_for_one_reference_run_and_nothing_else(checkout, results_dir):
    with pytest.raises(project.UnsafeResultsDir, match="holds a committed reference run"):
        project.check_results_dir(results_dir, checkout, overwrite_reference=True)


def test_a_results_dir_whose_subfolder_links_into_the_project_is_refused(checkout, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("scratch")
    (elsewhere / "symbolic").symlink_to(checkout / "src" / "minimodel")
    (elsewhere / "cpu").mkdir()
    (elsewhere / "cpu" / "bytes").symlink_to(checkout / "results" / "reference" / "h200")
    folders = [elsewhere / "symbolic", elsewhere / "cpu" / "bytes", elsewhere / "plots"]
    with pytest.raises(project.UnsafeResultsDir) as err:
        project.check_written_folders(folders, elsewhere, checkout)
    message = str(err.value)
    assert message.startswith(f"results_dir {str(elsewhere)!r}: its folder symbolic/ resolves to "
                              "src/minimodel/ in the project") and "\n" not in message
    (elsewhere / "symbolic").unlink()
    with pytest.raises(project.UnsafeResultsDir, match="its folder cpu/bytes/ resolves to "
                       "results/reference/h200/, which holds a committed reference"):
        project.check_written_folders(folders, elsewhere, checkout)
    # what the link points at is the reference asked for: it may be written
    project.check_written_folders(folders, "results/reference/h200", checkout,
                                  overwrite_reference=True)
    (elsewhere / "cpu" / "bytes").unlink()
    project.check_written_folders(folders, elsewhere, checkout)


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
