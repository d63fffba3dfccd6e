"""What a manifest records about the machine, and demanding a usable GPU."""

import os
import socket
import types

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


def test_the_gpus_clocks_are_read_of_the_gpu_this_process_uses(monkeypatch, tmp_path):
    """nvidia-smi numbers the host's GPUs, CUDA those CUDA_VISIBLE_DEVICES leaves: a job handed
    GPU 1 of two asks nvidia-smi about that GPU by its UUID, not about nvidia-smi's GPU 0."""
    called = tmp_path / "called"
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$@" >> {called}\necho "580.1, 1980 MHz, 3201 MHz, 1980 MHz, '
                    '3201 MHz, 700.00 W"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    props = types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132,
                                  total_memory=1, L2_cache_size=2,
                                  uuid="5a1b2c3d-0000-1111-2222-333344445555")
    monkeypatch.setattr(machine.devices, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    info = machine.gpu()
    assert "--id=GPU-5a1b2c3d-0000-1111-2222-333344445555" in called.read_text().split()
    assert info["uuid"] == "GPU-5a1b2c3d-0000-1111-2222-333344445555"
    assert info["driver"] == "580.1" and info["clock_sm"] == "1980 MHz"
    # without a UUID: the device CUDA_VISIBLE_DEVICES names first, not nvidia-smi's 0
    assert machine.smi_device(None, {"CUDA_VISIBLE_DEVICES": "3,0"}) == "3"
    assert machine.smi_device(None, {}) == "0"
