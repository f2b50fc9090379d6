"""The results store: round trip, atomic writes, and skipping files that are not results."""

from __future__ import annotations

import json
import os
import stat

import pytest

from labkit import results as store
from labkit.results import load_result, load_results, make_result, results_rows, results_table, save_result

MACHINE = {"slug": "test-gpu", "gpu_name": "Test GPU", "device": "cuda"}


def _result(name="mm_demo", rows=None, source="simulated", machine=MACHINE, **params):
    rows = rows if rows is not None else [{"variant": "list", "median_ns": 10.0}, {"variant": "tensor", "median_ns": 90.0}]
    return make_result(name, rows, params=params or {"n": 3}, source=source, machine=machine)


def test_round_trip(results_store):
    r = _result()
    path = save_result(r)
    assert path == results_store / "test-gpu" / "mm_demo.json"
    data = json.loads(path.read_text())
    assert data["name"] == "mm_demo" and data["source"] == "simulated" and data["schema"] == store.SCHEMA
    assert data["rows"][1] == {"variant": "tensor", "median_ns": 90.0}
    assert "path" not in data
    (back,) = load_results()
    assert back.rows == r.rows and back.params == {"n": 3} and back.machine == MACHINE
    assert back.created == r.created and back.path == str(path)
    assert load_result("mm_demo", machine="test-gpu").rows == r.rows
    assert load_result("mm_demo", machine="elsewhere") is None


def test_file_mode_is_not_private(results_store):
    path = save_result(_result())
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


def test_numpy_and_torch_scalars_are_saved_as_numbers(results_store):
    import numpy as np
    import torch

    path = save_result(_result(rows=[{"variant": "x", "median_ns": np.float64(1.5), "n": torch.tensor(3)}]))
    assert json.loads(path.read_text())["rows"][0] == {"variant": "x", "median_ns": 1.5, "n": 3}


def test_crash_mid_write_keeps_old_file_and_leaves_no_temp(results_store, monkeypatch):
    path = save_result(_result(rows=[{"variant": "old", "median_ns": 1.0}]))
    before = path.read_text()

    def crash(fd):
        raise OSError("disk vanished")

    monkeypatch.setattr(store.os, "fsync", crash)
    with pytest.raises(OSError, match="disk vanished"):
        save_result(_result(rows=[{"variant": "new", "median_ns": 2.0}]))
    assert path.read_text() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["mm_demo.json"]


def test_interrupt_mid_write_also_cleans_up(results_store, monkeypatch):
    save_result(_result())

    def interrupt(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        save_result(_result(name="other"))
    assert sorted(p.name for p in (results_store / "test-gpu").iterdir()) == ["mm_demo.json"]


def test_corrupt_and_foreign_files_are_skipped_with_a_warning(results_store):
    save_result(_result())
    folder = results_store / "test-gpu"
    (folder / "broken.json").write_text('{"schema": 1, "name": ')
    (folder / "foreign.json").write_text(json.dumps({"hello": "world"}))
    (folder / "list.json").write_text("[1, 2]")
    (folder / "badsource.json").write_text(json.dumps({**_result().to_json(), "source": "guessed"}))
    (folder / "future.json").write_text(json.dumps({**_result().to_json(), "schema": store.SCHEMA + 1}))
    (folder / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.warns(UserWarning) as caught:
        found = load_results()
    assert [r.name for r in found] == ["mm_demo"]
    messages = " ".join(str(w.message) for w in caught)
    for name in ("broken.json", "foreign.json", "list.json", "badsource.json", "future.json", "binary.json"):
        assert name in messages


def test_filters_and_missing_root(results_store, tmp_path):
    save_result(_result(name="a"))
    save_result(_result(name="b"))
    save_result(_result(name="a", machine={"slug": "other", "gpu_name": None}))
    assert sorted((r.slug, r.name) for r in load_results()) == [("other", "a"), ("test-gpu", "a"), ("test-gpu", "b")]
    assert [r.slug for r in load_results(name="a", machine="other")] == ["other"]
    assert load_results(tmp_path / "nothing-here") == []


def test_bad_names_and_sources_are_refused():
    with pytest.raises(ValueError, match="bad result name"):
        make_result("../escape", [], source="simulated", machine=MACHINE)
    with pytest.raises(ValueError, match="bad source"):
        make_result("ok", [], source="measured-somewhere", machine=MACHINE)


def test_rows_and_table_tag_machine_and_source():
    a = _result(name="x")
    b = _result(name="y", rows=[{"variant": "v", "median_us": 2.0}], source="measured-cpu",
                machine={"slug": "cpu-a-2c", "gpu_name": None})
    rows = results_rows([a, b])
    assert len(rows) == 3
    assert rows[0]["machine"] == "test-gpu" and rows[0]["result"] == "x" and rows[0]["gpu_name"] == "Test GPU"
    assert rows[2] == {**rows[2], "machine": "cpu-a-2c", "source": "measured-cpu", "result": "y", "median_us": 2.0}
    df = results_table([a, b])
    assert list(df["result"]) == ["x", "x", "y"]
    assert df.loc[2, "median_us"] == 2.0
