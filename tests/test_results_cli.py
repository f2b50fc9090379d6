"""``labkit results``: the table of what is recorded, one result's rows, and bad input."""

from __future__ import annotations

import json

import pytest

from labkit.cli import main as cli_main
from labkit.results import make_result, save_result


def _save(name, slug, rows, *, source="measured-cpu", commit="0123456789ab", created="2026-11-30T10:00:00+00:00"):
    r = make_result(name, rows, source=source, machine={"slug": slug, "gpu_name": None}, params={"n": 1})
    r.labkit_commit, r.created = commit, created
    return save_result(r)


@pytest.fixture
def recorded(results_store):
    _save("calibration", "h200", [{"variant": "h2d_pinned", "median_ns": 4000.0}], source="measured-gpu",
          commit="unknown", created="2026-11-29T08:00:00+00:00")
    _save("calibration", "cpu-a-2c", [{"variant": "list_index", "median_ns": 11.5},
                                      {"variant": "tensor_index_int", "median_ns": 1403.0}])
    _save("mm_sweep_quick", "cpu-a-2c", [{"variant": "list", "median_ns": 2.0}], commit="0123456789ab+dirty")
    return results_store


def _lines(text):
    return [line.split() for line in text.strip().splitlines()]


def test_overview_lists_every_result_with_its_provenance(recorded, capsys):
    assert cli_main(["results"]) == 0
    head, *rows = _lines(capsys.readouterr().out)
    assert head == ["machine", "name", "size", "source", "commit", "date"]
    assert rows == [
        ["cpu-a-2c", "calibration", "full", "measured-cpu", "0123456789ab", "2026-11-30"],
        ["cpu-a-2c", "mm_sweep_quick", "quick", "measured-cpu", "0123456789ab+dirty", "(uncommitted", "changes)",
         "2026-11-30"],
        ["h200", "calibration", "full", "measured-gpu", "UNKNOWN", "2026-11-29"],
    ]


def test_machine_filter(recorded, capsys):
    assert cli_main(["results", "--machine", "h200"]) == 0
    rows = _lines(capsys.readouterr().out)[1:]
    assert [r[:2] for r in rows] == [["h200", "calibration"]]


def test_a_name_shows_its_rows_on_every_machine(recorded, capsys):
    assert cli_main(["results", "calibration"]) == 0
    out = capsys.readouterr().out
    blocks = out.strip().split("\n\n")
    assert len(blocks) == 2
    cpu, gpu = (b.splitlines() for b in blocks)
    assert cpu[0] == "cpu-a-2c calibration: measured-cpu, size full, commit 0123456789ab, 2026-11-30"
    # the one table format: the time column in the unit its median reads best in, three significant figures
    assert _lines("\n".join(cpu[1:])) == [["variant", "median", "(us)"], ["list_index", "0.0115"],
                                          ["tensor_index_int", "1.40"]]  # 1.403 us: three figures
    assert "commit UNKNOWN" in gpu[0]
    assert _lines("\n".join(gpu[1:])) == [["variant", "median", "(us)"], ["h2d_pinned", "4"]]


def test_a_name_on_one_machine_with_its_command(results_store, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_COMMAND", "labkit bench mm --size full")
    _save("mm_decode_step", "cpu-a-2c", [{"combo": "list+loop", "median_ns": 123456.0}])
    assert cli_main(["results", "--machine", "cpu-a-2c", "mm_decode_step"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1] == "command: labkit bench mm --size full"
    assert _lines("\n".join(lines[2:])) == [["combo", "median", "(us)"], ["list+loop", "123"]]


def test_an_empty_store_says_so(results_store, capsys):
    assert cli_main(["results"]) == 0
    assert "no results recorded" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["results", "nothing"], "no result named 'nothing'"),
    (["results", "--machine", "tpu-v9"], "no machine 'tpu-v9'"),
    (["results", "--machine", "h200", "mm_sweep_quick"], "no result named 'mm_sweep_quick' for machine 'h200'"),
])
def test_bad_input_is_one_line_exit_2(recorded, argv, message, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("labkit results: error: ") and message in err[0]


def test_a_corrupt_file_is_named_on_stderr_and_skipped(recorded, capsys):
    (recorded / "h200" / "broken.json").write_text('{"schema": 1, "name"')
    (recorded / "h200" / "foreign.json").write_text(json.dumps({"hello": "world"}))
    assert cli_main(["results"]) == 0
    captured = capsys.readouterr()
    assert len(_lines(captured.out)) == 4
    err = captured.err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("labkit results: skipping ") for line in err)
    assert "Traceback" not in captured.err
