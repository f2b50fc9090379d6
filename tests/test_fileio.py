"""The lab's one atomic writer: JSON encoding, writers that need a path, copies, and failures."""

from __future__ import annotations

import gzip
import json
import os
import stat

import pytest

from labkit import fileio


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_write_json_encodes_scalars_and_paths(tmp_path):
    import numpy as np
    import torch

    path = fileio.write_json(tmp_path / "sub" / "x.json",
                             {"a": np.float32(1.5), "b": torch.tensor(3), "c": (1, 2), "d": tmp_path / "f"})
    assert json.loads(path.read_text()) == {"a": 1.5, "b": 3, "c": [1, 2], "d": str(tmp_path / "f")}
    assert path.read_text().endswith("}\n")


def test_write_json_that_cannot_encode_leaves_the_old_file(tmp_path):
    path = fileio.write_json(tmp_path / "x.json", {"v": 1})
    with pytest.raises(TypeError, match="not JSON serializable: object"):
        fileio.write_json(path, {"v": object()})
    with pytest.raises(ValueError):
        fileio.write_json(path, {"v": float("nan")}, allow_nan=False)
    assert json.loads(path.read_text()) == {"v": 1} and _names(tmp_path) == ["x.json"]


def test_atomic_target_keeps_the_name_ending_and_replaces_on_success(tmp_path):
    target = tmp_path / "t" / "run.pt.trace.json.gz"
    with fileio.atomic_target(target) as part:
        assert part.parent == target.parent and part.name.endswith(".run.pt.trace.json.gz")
        assert not target.exists()
        part.write_bytes(gzip.compress(b"{}"))
    assert gzip.decompress(target.read_bytes()) == b"{}"
    assert _names(target.parent) == ["run.pt.trace.json.gz"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_atomic_target_failure_keeps_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="writer broke"):
        with fileio.atomic_target(target) as part:
            part.write_text("half")
            raise RuntimeError("writer broke")
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with fileio.atomic_target(target):
            pass
    assert target.read_text() == "old" and _names(tmp_path) == ["a.json"]


def test_copy_atomic(tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(bytes(range(256)) * 10)
    dst = fileio.copy_atomic(src, tmp_path / "out" / "dst.bin")
    assert dst.read_bytes() == src.read_bytes() and _names(dst.parent) == ["dst.bin"]
