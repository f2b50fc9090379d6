"""The results store: round trip, atomic writes, and skipping files that are not results."""

from __future__ import annotations

import json
import os
import stat

import pytest

from labkit import results as store
from labkit import timing
from labkit.results import find, find_all, load_results, make_result, results_rows, results_table, save_result

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
    assert find_all("mm_demo", machine="test-gpu")[0].rows == r.rows
    assert find_all("mm_demo", machine="elsewhere") == []


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
    assert [(r.slug, r.name) for r in load_results(machine="other", names=["a"])] == [("other", "a")]
    assert [r.name for r in load_results(names=["b"])] == ["b"]
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


# -- provenance: commit, size, command line ----------------------------------------------------

def test_size_follows_the_name_and_must_agree_with_it():
    assert _result(name="h2d_step").size == "full"
    assert _result(name="h2d_step_quick").size == "quick"
    assert make_result("x_quick", [], source="simulated", machine=MACHINE, size="quick").size == "quick"
    with pytest.raises(ValueError, match="name it 'x_quick'"):
        make_result("x", [], source="simulated", machine=MACHINE, size="quick")
    with pytest.raises(ValueError, match="name it 'x'"):
        make_result("x_quick", [], source="simulated", machine=MACHINE, size="full")
    with pytest.raises(ValueError, match="bad size"):
        make_result("x", [], source="simulated", machine=MACHINE, size="medium")


def test_sized_name_never_doubles_the_suffix():
    assert store.sized_name("calibration", "quick") == "calibration_quick"
    assert store.sized_name("calibration_quick", "quick") == "calibration_quick"
    assert store.sized_name("calibration_quick", "full") == "calibration"
    assert store.sized_name("calibration", "full") == "calibration"
    assert store.base_name("mm_sweep_quick") == "mm_sweep" and store.base_name("mm_sweep") == "mm_sweep"


def test_command_comes_from_the_environment_and_is_saved(results_store, monkeypatch):
    monkeypatch.delenv(store.COMMAND_ENV, raising=False)
    assert _result().command is None
    monkeypatch.setenv(store.COMMAND_ENV, "labkit bench mm --size full")
    r = _result()
    assert r.command == "labkit bench mm --size full"
    assert make_result("y", [], source="simulated", machine=MACHINE, command="python x.py").command == "python x.py"
    data = json.loads(save_result(r).read_text())
    assert (data["size"], data["command"], data["labkit_commit"]) == ("full", r.command, r.labkit_commit)
    (back,) = load_results()
    assert (back.size, back.command) == ("full", "labkit bench mm --size full")


def test_format_command_quotes_and_hides_the_home_folder(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    text = store.format_command(["labkit", "bench", "mm", "--json", "/home/someone/out dir/x.json"])
    assert text == "labkit bench mm --json '~/out dir/x.json'"
    assert "someone" not in text


def test_commit_from_the_environment_only_where_git_has_none(monkeypatch):
    monkeypatch.setattr(store, "git_commit", lambda: None)
    monkeypatch.delenv(store.COMMIT_ENV, raising=False)
    assert store.labkit_commit() == "unknown"
    monkeypatch.setenv(store.COMMIT_ENV, "0123456789ab")
    assert store.labkit_commit() == "0123456789ab"
    assert _result().labkit_commit == "0123456789ab"
    monkeypatch.setattr(store, "git_commit", lambda: "fedcba987654")
    assert store.labkit_commit() == "fedcba987654"  # a real checkout's own commit wins


def _git(cwd, *args):
    import subprocess

    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false",
                           *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def fake_checkout(tmp_path, monkeypatch):
    """A labkit-like tree in its own git repository; ``store.REPO_ROOT`` points at it."""
    import shutil

    if not shutil.which("git"):
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "labkit").mkdir(parents=True)
    (repo / "labkit" / "a.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "labkit/a.py")
    _git(repo, "commit", "-q", "-m", "one")
    monkeypatch.setattr(store, "REPO_ROOT", repo.resolve())
    store.git_commit.cache_clear()
    yield repo
    store.git_commit.cache_clear()


def test_git_commit_of_a_clean_and_a_dirty_checkout(fake_checkout):
    full = _git(fake_checkout, "rev-parse", "HEAD")
    clean = store.git_commit()
    assert len(clean) == 12 and full.startswith(clean)
    (fake_checkout / "labkit" / "a.py").write_text("x = 2\n")
    store.git_commit.cache_clear()
    assert store.git_commit() == clean + "+dirty"


def test_a_copy_without_git_has_no_git_commit_even_inside_another_repository(fake_checkout, monkeypatch):
    copy = fake_checkout / "vendored" / "labkit-copy"  # lies inside fake_checkout's repository
    (copy / "labkit").mkdir(parents=True)
    monkeypatch.setattr(store, "REPO_ROOT", copy.resolve())
    store.git_commit.cache_clear()
    assert store.git_commit() is None
    monkeypatch.setenv(store.COMMIT_ENV, "abcdef123456")
    assert store.labkit_commit() == "abcdef123456"


@pytest.mark.parametrize("commit, status", [
    ("3447216bc366", "clean"), ("3447216bc366+dirty", "dirty"), ("unknown", "unknown"), ("", "unknown"),
    (None, "unknown"),
])
def test_commit_status(commit, status):
    assert store.commit_status(commit) == status


def test_provenance_line_flags_unknown_and_dirty_commits():
    r = _result(name="calibration")
    r.created = "2026-11-30T12:00:00+00:00"
    r.labkit_commit = "3447216bc366"
    assert store.provenance(r) == "test-gpu calibration: simulated, size full, commit 3447216bc366, 2026-11-30"
    r.labkit_commit = "3447216bc366+dirty"
    assert "commit 3447216bc366+dirty (UNCOMMITTED CHANGES)" in store.provenance(r)
    r.labkit_commit = "unknown"
    assert "commit UNKNOWN (not traceable to a labkit version)" in store.provenance(r)
    r.size = "unknown"
    assert "size UNKNOWN" in store.provenance(r)


@pytest.mark.parametrize("params, top, size", [
    ({"size": "full"}, None, "full"), ({"quick": True}, None, "quick"), ({"quick": False}, None, "full"),
    ({"full": False}, None, "quick"), ({"n": 1}, None, "unknown"), ({"quick": True}, "full", "full"),
])
def test_files_recorded_before_the_size_field_get_it_from_their_params(params, top, size):
    data = {**_result().to_json(), "params": params}
    data.pop("size")
    data.pop("command")
    if top is not None:
        data["size"] = top
    back = store.parse_result(data)
    assert back.size == size and back.command is None


# -- results written while their run goes on ----------------------------------------------------

def test_a_partial_result_is_rewritten_with_the_rows_so_far_until_the_whole_one_replaces_it(results_store):
    partial = store.PartialResult("engine_quick", params={"n": 2}, source="simulated", size="quick", machine=MACHINE)
    path = partial.add({"variant": "a", "median_ns": 1.0})
    assert path == results_store / "test-gpu" / "engine_quick.json"
    first = json.loads(path.read_text())
    assert first["complete"] is False and first["rows"] == [{"variant": "a", "median_ns": 1.0}]
    partial.add({"variant": "b", "median_ns": 2.0})
    (back,) = load_results()
    assert back.complete is False and [r["variant"] for r in back.rows] == ["a", "b"] and back.params == {"n": 2}
    assert store.provenance(back).endswith("PARTIAL: 2 rows of a run that did not finish")
    assert [p.name for p in path.parent.iterdir()] == ["engine_quick.json"]  # one file, rewritten in place
    save_result(make_result("engine_quick", back.rows, source="simulated", machine=MACHINE))
    (done,) = load_results()
    assert done.complete is True and json.loads(path.read_text())["complete"] is True
    assert "PARTIAL" not in store.provenance(done)


def test_a_partial_result_is_not_written_without_save_and_checks_its_name_first(results_store):
    assert store.PartialResult("x", source="simulated", machine=MACHINE, save=False).add({"a": 1}) is None
    assert not results_store.exists()
    with pytest.raises(ValueError, match="name it 'x_quick'"):
        store.PartialResult("x", source="simulated", size="quick", machine=MACHINE)


def test_complete_must_be_a_boolean():
    data = _result().to_json()
    data["complete"] = "no"
    with pytest.raises(ValueError, match="complete"):
        store.parse_result(data)
    data.pop("complete")
    assert store.parse_result(data).complete is True  # files from before the field: whole runs


def test_a_machine_with_only_a_quick_run_of_a_result_shows_that_run(results_store):
    other = {"slug": "cpu-box", "device": "cpu"}
    save_result(make_result("calibration_quick", [{"v": 1}], source="measured-gpu", machine=MACHINE))
    save_result(make_result("calibration_quick", [{"v": 2}], source="measured-cpu", machine=other))
    save_result(make_result("calibration", [{"v": 3}], source="measured-cpu", machine=other))
    found = {(r.slug, r.name) for r in find_all("calibration")}
    assert found == {("test-gpu", "calibration_quick"), ("cpu-box", "calibration")}  # the full one wins
    assert {(r.slug, r.name) for r in find_all("calibration", size="full")} == {("cpu-box", "calibration")}
    assert find_all("calibration", machine="test-gpu", size="full") == []
    assert {(r.slug, r.name) for r in find_all("calibration", size="quick")} == {
        ("test-gpu", "calibration_quick"), ("cpu-box", "calibration_quick")}


def _at(name, slug, created, source="measured-cpu", rows=({"v": 1},)):
    r = make_result(name, list(rows), source=source, machine={"slug": slug, "device": "cpu"})
    r.created = created
    return r


def test_find_all_one_per_machine_this_machine_first_then_by_slug(monkeypatch):
    monkeypatch.setattr(store, "describe_machine", lambda device=None: {"slug": "m-here"})
    results = [_at("x", "m-b", "2026-01-01"), _at("x", "m-b", "2026-01-03"), _at("x_quick", "m-b", "2026-01-09"),
               _at("x_quick", "m-here", "2026-01-02"), _at("x", "m-a", "2026-01-01"), _at("y", "m-c", "2026-01-05")]
    got = [(r.slug, r.name, r.created) for r in find_all("x", results=results)]
    # this machine's quick run first (it has no full one), then by slug; m-b's newest full run beats its newer quick one
    assert got == [("m-here", "x_quick", "2026-01-02"), ("m-a", "x", "2026-01-01"), ("m-b", "x", "2026-01-03")]
    assert [r.slug for r in find_all("x", results=results, here_first=False)] == ["m-a", "m-b", "m-here"]
    assert [r.slug for r in find_all("x_quick", results=results)] == ["m-here", "m-a", "m-b"]  # the base name


def test_find_prefers_source_and_machine_then_falls_back(monkeypatch):
    monkeypatch.setattr(store, "describe_machine", lambda device=None: {"slug": "m-here"})
    results = [_at("x", "m-gpu", "2026-01-01", source="measured-gpu", rows=[{"v": 1}]),
               _at("x", "m-here", "2026-01-01", rows=[{"v": 2}]), _at("x", "m-a", "2026-01-01", rows=[{"v": 3}]),
               _at("x", "m-empty", "2026-01-01", source="measured-gpu", rows=[])]
    assert find("x", results=results).slug == "m-here"  # nothing asked: this machine's
    assert find("x", source="measured-gpu", results=results).slug == "m-gpu"  # m-empty has no rows
    assert find("x", source="measured-gpu", machine="m-a", results=results).slug == "m-gpu"  # the source first
    assert find("x", source="simulated", machine="m-a", results=results).slug == "m-a"  # then the machine
    assert find("x", source="simulated", machine="m-z", results=results).slug == "m-here"  # then any
    assert find("x", where=lambda rows: rows[0]["v"] == 3, results=results).slug == "m-a"
    assert find("x", where=lambda rows: False, results=results) is None and find("nothing", results=results) is None


def test_this_runs_results_are_read_instead_of_measured_again(results_store, tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setattr(store, "describe_machine", lambda device=None: dict(MACHINE))
    monkeypatch.delenv(store.REUSE_ENV, raising=False)
    assert store.this_run_results(["h2d_step"]) == (None, "")  # not inside a run: measure
    monkeypatch.setenv(store.REUSE_ENV, str(run))
    monkeypatch.setenv(store.COMMAND_ENV, "labkit bench h2d --size full")
    save_result(make_result("h2d_step", [{"v": 1}], source="measured-gpu", machine=MACHINE), run)
    save_result(make_result("h2d_sweep", [{"v": 2}], source="measured-gpu", machine=MACHINE), run)
    partial = store.PartialResult("h2d_gpu_idle", source="measured-gpu", machine=MACHINE, root=run)
    partial.add({"v": 3})
    found, note = store.this_run_results(["h2d_step", "h2d_sweep"])
    assert {k: v.rows for k, v in found.items()} == {"h2d_step": [{"v": 1}], "h2d_sweep": [{"v": 2}]}
    assert note.count("\n") == 0 and note.startswith("Not measured again on this page: read h2d_step (measured-gpu), "
                                                     "h2d_sweep (measured-gpu)")
    assert "`labkit bench h2d --size full`" in note and "size full" in note
    assert store.this_run_results(["h2d_step", "h2d_gpu_idle"]) == (None, "")  # a partial one is measured again
    assert store.this_run_results(["mm_sweep"]) == (None, "")
    calls = []
    measured, note = store.reuse_or_measure(["mm_sweep"], lambda: calls.append(1) or {"mm_sweep": "fresh"})
    assert measured == {"mm_sweep": "fresh"} and note == "" and calls == [1]


def _costs(tensor_ns, loop_ns):
    return [{"kind": "cpu", "variant": "tensor_index_int", "median_ns": tensor_ns},
            {"kind": "cpu", "variant": "loop_only", "median_ns": loop_ns}]


def test_unit_costs_of_a_run_and_the_note_where_two_runs_ran_at_different_speeds():
    cal = _at("calibration", "m-a", "2026-01-01", rows=_costs(1000.0, 5.0) + [{"kind": "gpu", "variant": "loop_only",
                                                                           "median_ns": 1.0}])
    census = _at("vllm_step", "m-b", "2026-01-01")
    census.params[timing.IN_RUN_KEY] = {"8x1": _costs(1100.0, 5.0), "128x32": _costs(1300.0, 7.5),
                                       "32x8": _costs(1150.0, 6.5)}
    bench = _at("mm_decode_step", "m-c", "2026-01-01")
    bench.params[timing.IN_RUN_KEY] = _costs(1190.0, 5.5)
    bare = _at("mm_decode_step", "m-d", "2026-01-01")
    assert timing.unit_costs(cal) == {"tensor_index_int": 1000.0, "loop_only": 5.0}  # its CPU rows, not the GPU's
    assert timing.unit_costs(census) == {"tensor_index_int": 1150.0, "loop_only": 6.5}  # the points' median
    assert timing.unit_costs(bare) == {}
    assert timing.unit_cost_note([cal, bench]) == ""  # 1.19x and 1.10x: within 20%
    assert timing.unit_cost_note([census]) == ""
    note = timing.unit_cost_note([cal, census, bare]).splitlines()
    # the tensor reads are 1.15x apart (within 20%), the loop steps 1.3x: only those are named
    # (a run that kept none, m-d's, is said in its page's provenance, not here)
    assert len(note) == 1 and note[0].startswith("The runs set side by side ran at different speeds: one Python loop "
                                                 "step took 5.0 ns in m-a calibration's run and 6.5 ns in m-b vllm_step's (1.3x)")


def test_a_run_keeps_its_unit_costs_once_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(store, "_KEEP_UNIT_COSTS", False)
    monkeypatch.setattr(store, "_this_runs_unit_costs", lambda: calls.append(1) or _costs(900.0, 4.0))
    assert timing.IN_RUN_KEY not in make_result("x", [], source="measured-cpu", machine=MACHINE).params
    store.keep_unit_costs()
    assert make_result("x", [], source="measured-cpu", machine=MACHINE).params[timing.IN_RUN_KEY] == _costs(900.0, 4.0)
    assert timing.IN_RUN_KEY not in make_result("calibration", [], source="measured-cpu", machine=MACHINE).params
    kept = make_result("x", [], source="simulated", machine=MACHINE, params={timing.IN_RUN_KEY: _costs(1.0, 1.0)})
    assert kept.params[timing.IN_RUN_KEY] == _costs(1.0, 1.0) and len(calls) == 1  # a result's own kept as it is
