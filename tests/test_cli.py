"""The ``labkit`` command: exit codes, --help, env --json (in-process and as a real process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from labkit import cli


def test_bad_verb_exits_2(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_no_verb_exits_2():
    assert cli.main([]) == 2


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "labkit" in capsys.readouterr().out


def test_env_json_parses(capsys):
    assert cli.main(["env", "--json", "--device", "cpu"]) == 0
    desc = json.loads(capsys.readouterr().out)
    assert desc["device"] == "cpu" and desc["slug"].startswith("cpu-")


def test_env_table(capsys):
    assert cli.main(["env", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("slug") for line in out.splitlines())


def test_usage_error_is_one_line_exit_2(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("LABKIT_DEVICE", raising=False)
    from labkit.device import describe_machine

    describe_machine.cache_clear()
    assert cli.main(["env", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["labkit: error: device 'cuda' was asked for but torch sees no CUDA GPU"]


def test_bench_unknown_target_exits_2(capsys):
    assert cli.main(["bench", "nonsense"]) == 2


def test_internal_error_is_one_line_exit_1(capsys, monkeypatch):
    import labkit.calibrate as cal

    def boom(argv):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cal, "main", boom)
    monkeypatch.delenv("LABKIT_DEBUG", raising=False)
    assert cli.main(["calibrate"]) == 1
    assert capsys.readouterr().err.strip() == "labkit: internal error: RuntimeError: kaboom"


@pytest.mark.parametrize("argv, code", [(["env", "--json", "--device", "cpu"], 0), (["nope"], 2), (["report", "--size", "x"], 2)])
def test_real_process_exit_codes(argv, code):
    proc = subprocess.run([sys.executable, "-m", "labkit", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    if code == 0:
        json.loads(proc.stdout)
