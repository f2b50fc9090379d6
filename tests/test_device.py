"""Device resolution without a GPU, machine slugs, and a description that leaks nothing."""

from __future__ import annotations

import json
import os

import pytest
import torch

from labkit import device as dev
from labkit.errors import UsageError


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("LABKIT_DEVICE", raising=False)
    dev.describe_machine.cache_clear()
    yield
    dev.describe_machine.cache_clear()


def test_resolution_without_gpu(no_gpu):
    assert dev.has_cuda() is False
    assert dev.resolve_device() == "cpu"
    assert dev.resolve_device("auto") == "cpu"
    assert dev.resolve_device("CPU") == "cpu"
    with pytest.raises(UsageError, match="no CUDA GPU"):
        dev.resolve_device("cuda")
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        dev.resolve_device("tpu")


def test_env_var_forces_cpu_even_with_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LABKIT_DEVICE", "cpu")
    assert dev.has_cuda() is False
    assert dev.resolve_device() == "cpu"
    monkeypatch.delenv("LABKIT_DEVICE")
    assert dev.resolve_device() == "cuda"


def test_broken_driver_means_no_gpu(monkeypatch):
    def boom():
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    monkeypatch.delenv("LABKIT_DEVICE", raising=False)
    assert dev.has_cuda() is False


def test_kernel_mode_and_configure_triton(no_gpu, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert dev.kernel_mode() == "unavailable"
    assert dev.configure_triton() == "interpret"
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_measured_source():
    assert dev.measured_source("cuda") == "measured-gpu"
    assert dev.measured_source("cuda:1") == "measured-gpu"
    assert dev.measured_source("cpu") == "measured-cpu"


@pytest.mark.parametrize(
    "desc, slug",
    [
        ({"gpu_name": "NVIDIA H200"}, "h200"),
        ({"gpu_name": "NVIDIA A100-SXM4-80GB"}, "a100"),
        ({"gpu_name": "NVIDIA H100 80GB HBM3"}, "h100"),
        ({"gpu_name": "NVIDIA GeForce RTX 4090"}, "rtx-4090"),
        ({"gpu_name": "NVIDIA L40S"}, "l40s"),
        ({"gpu_name": "Tesla T4"}, "t4"),
        ({"gpu_name": None, "cpu_model": "AMD EPYC 7B13", "cpu_cores": 2}, "cpu-epyc-2c"),
        ({"gpu_name": None, "cpu_model": "Intel(R) Xeon(R) CPU @ 2.20GHz", "cpu_cores": 8}, "cpu-xeon-8c"),
        ({"gpu_name": None, "cpu_model": "Apple M2", "cpu_cores": 10}, "cpu-apple-10c"),
        ({"gpu_name": None, "cpu_model": "Weird-Chip 9000", "cpu_cores": 4}, "cpu-weirdchip-4c"),
    ],
)
def test_machine_slug_rules(desc, slug):
    assert dev.machine_slug(desc) == slug


def test_description_without_gpu_is_safe(no_gpu, monkeypatch):
    secret = "s3cr3t-value-do-not-leak"
    monkeypatch.setenv("LABKIT_TEST_SECRET", secret)
    desc = dev.describe_machine()
    assert desc["device"] == "cpu" and desc["gpu_name"] is None
    assert desc["slug"].startswith("cpu-")
    assert desc["torch"] == torch.__version__
    text = json.dumps(desc)
    import getpass
    import socket

    assert secret not in text
    assert f'"{socket.gethostname()}"' not in text  # no value is the host name
    assert f'"{getpass.getuser()}"' not in text     # nor the user name
    # every value is a plain scalar: nothing nested that could carry an environment
    assert all(v is None or isinstance(v, (str, int, float)) for v in desc.values())


def _cache_dir(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return str(root)


def test_last_level_cache_is_the_highest_data_or_unified_level(tmp_path):
    from labkit.device import last_level_cache_bytes

    root = _cache_dir(tmp_path / "a", [(1, "Data", "48K"), (1, "Instruction", "64K"), (2, "Unified", "2048K"),
                                       (3, "Unified", "491520K")])
    assert last_level_cache_bytes(root) == 491520 * 1024
    # an instruction cache never counts, even at the highest level; a size it cannot read is skipped
    root = _cache_dir(tmp_path / "b", [(1, "Data", "32K"), (2, "Unified", "1M"), (3, "Instruction", "8M"),
                                       (3, "Unified", "lots")])
    assert last_level_cache_bytes(root) == 2**20
    assert last_level_cache_bytes(str(tmp_path / "missing")) is None
