"""Whether torch can use a GPU here, asked without importing torch where no GPU can be; the
manifest's record of the machine the same either way."""

import pytest
import torch

from minimodel.floor.provenance import devices, machine


def test_linux_without_a_gpu_drivers_nodes_has_no_gpu_and_with_one_may(tmp_path):
    nodes = (str(tmp_path / "nvidiactl"), str(tmp_path / "nvidia[0-9]*"), str(tmp_path / "kfd"))
    assert not devices.may_have_gpu("linux", nodes)
    (tmp_path / "nvidia3").touch()
    assert devices.may_have_gpu("linux", nodes)


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_elsewhere_torch_is_asked(platform, tmp_path):
    assert devices.may_have_gpu(platform, (str(tmp_path / "none"),))


def test_the_answer_is_torchs():
    assert devices.cuda_available() == torch.cuda.is_available()


def test_the_manifest_records_the_same_machine_whether_torch_is_asked_or_not(monkeypatch):
    monkeypatch.setattr(devices, "may_have_gpu", lambda: True)
    asked = machine.environment()
    if asked["gpu"] is not None:
        pytest.skip("this machine has a GPU: torch is asked, and its answer is recorded")
    monkeypatch.setattr(devices, "may_have_gpu", lambda: False)
    assert machine.environment() == asked
