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
    assert err == ["labkit env: error: device 'cuda' was asked for but torch sees no CUDA GPU"]


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


# -- --version, -v anywhere, the options every bench verb shares ------------------------------

def test_version_names_the_package_version_and_commit(capsys):
    import tomllib

    from labkit.results import REPO_ROOT, labkit_commit

    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"labkit {version} (commit {labkit_commit()})"


@pytest.mark.parametrize("argv, rest, verbose", [
    (["bench", "mm", "-v", "--size", "full"], ["bench", "mm", "--size", "full"], True),
    (["--verbose", "env"], ["env"], True),
    (["env", "--json"], ["env", "--json"], False),
    (["analyze", "x", "--", "-v"], ["analyze", "x", "--", "-v"], False),
])
def test_split_verbose(argv, rest, verbose):
    assert cli.split_verbose(argv) == (rest, verbose)


def test_verbose_after_the_verb_turns_logging_on(capsys):
    import logging

    root = logging.getLogger()
    level = root.level
    try:
        assert cli.main(["env", "--device", "cpu", "--json", "-v"]) == 0
        assert root.level == logging.INFO
        json.loads(capsys.readouterr().out)
        assert cli.main(["env", "--device", "cpu", "--json"]) == 0
        assert root.level == logging.WARNING
    finally:
        root.setLevel(level)


def _run_options(argv):
    import argparse

    from labkit.bench import add_run_options, resolve_run_options

    p = argparse.ArgumentParser(prog="labkit bench x")
    add_run_options(p)
    args = p.parse_args(argv)
    return resolve_run_options(args), args


def test_run_options_default_to_quick_and_take_size(capsys):
    assert _run_options([])[0] == "quick"
    size, args = _run_options(["--size", "full", "--no-save", "--json", "out.json"])
    assert (size, args.size, args.no_save, args.json) == ("full", "full", True, "out.json")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, message", [
    (["--json", "."], "not a file path"),
])
def test_contradicting_or_bad_run_options_are_usage_errors(argv, message):
    from labkit.errors import UsageError

    with pytest.raises(UsageError, match=message):
        _run_options(argv)


def test_json_under_a_file_is_refused(tmp_path):
    from labkit.errors import UsageError

    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="is not a folder"):
        _run_options(["--json", str(tmp_path / "f" / "out.json")])


#: serve-sim takes vllm bench serve's workload options instead of a size
SHARED_TARGETS = [t for t in cli.BENCH_TARGETS if t != "serve-sim"]


@pytest.mark.parametrize("verb", [["calibrate"], *(["bench", t] for t in SHARED_TARGETS)])
def test_every_bench_verb_and_calibrate_share_the_run_options(verb, capsys):
    assert cli.main([*verb, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--size {quick,full}", "--json OUT", "--no-save", "-v, --verbose"):
        assert option in text, (verb, option)
    assert "--quick" not in text and "--full" not in text  # one way to say the size


@pytest.mark.parametrize("verb", [["calibrate"], *(["bench", t] for t in SHARED_TARGETS)])
def test_every_bench_verb_refuses_a_bad_size_in_one_line(verb, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    assert cli.main([*verb, "--size", "huge", "-v"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.endswith(" error: argument --size: invalid choice: 'huge' (choose from 'quick', 'full')"), line
    assert cli.main([*verb, "--json", str(tmp_path)]) == 2
    assert not (tmp_path / "results").exists()


def test_command_line_is_recorded_only_while_the_command_runs(monkeypatch, capsys):
    from labkit.results import COMMAND_ENV

    monkeypatch.delenv(COMMAND_ENV, raising=False)
    seen = {}

    def fake_main(argv):
        import os

        seen["command"] = os.environ.get(COMMAND_ENV)
        return 0

    import labkit.calibrate as cal

    monkeypatch.setattr(cal, "main", fake_main)
    assert cli.main(["calibrate", "--size", "full", "--json", "a b.json"]) == 0
    assert seen["command"] == "labkit calibrate --size full --json 'a b.json'"
    import os

    assert COMMAND_ENV not in os.environ
