"""What a manifest records about the machine, and demanding a usable GPU."""

import socket

import pytest
import torch

from minimodel.floor.provenance import machine


def test_environment_records_software_machine_and_cluster_job(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_PARTITION", "gpu")
    env = machine.environment()
    assert env["host"] == socket.gethostname()
    assert env["slurm"]["job_id"] == "42" and env["slurm"]["partition"] == "gpu"
    assert len(env["packages_sha256"]) == 64 and env["packages"] > 10
    assert (env["gpu"] is None) == (not torch.cuda.is_available())
    monkeypatch.delenv("SLURM_JOB_ID")
    assert machine.environment()["slurm"] is None


@pytest.mark.parametrize("value, interpreted", [("1", True), ("true", True), ("on", True), ("0", False)])
def test_environment_records_whether_triton_interprets_as_triton_reads_the_switch(monkeypatch, value,
                                                                                  interpreted):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert machine.environment()["triton_interpret"] is interpreted


@pytest.mark.parametrize("setting, slurm_gpus, required", [
    (True, None, True), (False, "0", False), (None, None, False), (None, "0", True),
])
def test_gpu_required_follows_the_setting_or_the_slurm_job(monkeypatch, setting, slurm_gpus, required):
    for var in machine.SLURM_GPU_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    if slurm_gpus is not None:
        monkeypatch.setenv("SLURM_JOB_GPUS", slurm_gpus)
    assert machine.gpu_required(setting) is required


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_require_cuda_names_the_node_and_what_is_missing(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    with pytest.raises(machine.NoUsableGPU) as err:
        machine.require_cuda()
    message = str(err.value)
    assert f"node {socket.gethostname()} (SLURM job 7) has no usable GPU" in message
    assert ("a build without CUDA" in message) == (torch.version.cuda is None)
