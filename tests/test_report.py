"""The report builder: notebook discovery, parameter injection, failures, index, offline pages."""

from __future__ import annotations

import json

import nbformat
import pytest
from report_helpers import FAIL_CELLS, OK_CELLS, write_notebook

from labkit.cli import main as cli_main
from labkit.errors import UsageError
from labkit.report import build
from labkit.report.exporter import strip_remote_scripts
from labkit.report.index import render_index


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_find_notebooks_orders_and_filters(tmp_path):
    for name in ("02_b", "00_a", "10_c", "notes", "1_bad"):
        (tmp_path / f"{name}.py").write_text("# x\n")
    found = build.find_notebooks(tmp_path)
    assert [p.stem for p in found] == ["00_a", "02_b", "10_c"]
    assert [p.stem for p in build.find_notebooks(tmp_path, ["10_c.py", "00"])] == ["00_a", "10_c"]
    with pytest.raises(UsageError, match="no such notebook: 99_x"):
        build.find_notebooks(tmp_path, ["99_x"])
    with pytest.raises(UsageError, match="no notebooks folder"):
        build.find_notebooks(tmp_path / "missing")


def test_inject_parameters_goes_after_the_tagged_cell():
    nb = _nb(
        nbformat.v4.new_markdown_cell("# T"),
        nbformat.v4.new_code_cell("device = 'auto'", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(device)"),
    )
    at = build.inject_parameters(nb, {"device": "cpu", "size": "full"})
    assert at == 2
    cell = nb.cells[2]
    assert cell.metadata["tags"] == ["injected-parameters"]
    scope: dict = {}
    exec(cell.source, scope)
    assert (scope["device"], scope["size"]) == ("cpu", "full")
    assert nb.cells[3].source == "print(device)"


def test_inject_parameters_without_tagged_cell_goes_first():
    nb = _nb(nbformat.v4.new_code_cell("print(1)"))
    assert build.inject_parameters(nb, {"size": "quick"}) == 0
    assert "size = 'quick'" in nb.cells[0].source


def test_title_and_sources_from_outputs():
    out1 = nbformat.v4.new_output("display_data", data={"text/html": "x"}, metadata={"labkit_sources": ["simulated"]})
    out2 = nbformat.v4.new_output(
        "display_data", data={"text/html": "y"}, metadata={"labkit_sources": ["measured-gpu", "simulated"]}
    )
    code = nbformat.v4.new_code_cell("x")
    code.outputs = [out1, out2]
    nb = _nb(nbformat.v4.new_markdown_cell("intro\n## The title"), code)
    assert build.notebook_title(nb, "fallback") == "The title"
    assert build.notebook_title(_nb(), "fallback") == "fallback"
    assert build.notebook_sources(nb) == ["simulated", "measured-gpu"]


def test_strip_remote_scripts_keeps_local_ones():
    html = (
        '<div><script src="https://cdn.example.org/mathjax.js"></script>'
        '<script src="_static/local.js"></script><script>var a = 1;</script>'
        "<script src='//cdn.example.org/x.js' async></script></div>"
    )
    code = nbformat.v4.new_code_cell("x")
    code.outputs = [nbformat.v4.new_output("display_data", data={"text/html": html})]
    nb = _nb(code)
    assert strip_remote_scripts(nb) == 2
    left = code.outputs[0]["data"]["text/html"]
    assert "cdn.example.org" not in left
    assert '_static/local.js' in left and "var a = 1;" in left


def test_index_escapes_and_reports_failures():
    meta = {
        "created": "2026-01-01T00:00:00+00:00", "labkit_commit": "abc", "size": "quick", "device": "cpu",
        "machine": {"slug": "cpu-x-2c", "gpu_name": None},
        "notebooks": [
            {"name": "00_a", "title": "A <b>", "html": "00_a.html", "ok": True, "seconds": 1.0,
             "sources": ["measured-cpu"], "error": None},
            {"name": "01_b", "title": "B", "html": "01_b.html", "ok": False, "seconds": 2.0, "sources": [],
             "error": {"cell": 3, "first_line": "y = x / 0", "error": "ZeroDivisionError: division by zero"}},
        ],
    }
    page = render_index(meta)
    assert "A &lt;b&gt;" in page and "A <b>" not in page
    assert 'href="00_a.html"' in page and 'data-source="measured-cpu"' in page
    assert "cell 3" in page and "y = x / 0" in page and "ZeroDivisionError" in page
    assert "1 of 2 notebooks ran to the end" in page
    assert "http" not in page  # nothing to load, no links out


@pytest.mark.slow
def test_build_report_runs_notebooks_and_reports_failures(tmp_path, capsys, monkeypatch):
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_ok", "Fine notebook", OK_CELLS + READ_RESULTS_CELLS)
    write_notebook(nbdir, "01_fail", "Broken notebook", FAIL_CELLS)
    write_notebook(nbdir, "02_after", "Runs after the failure", ["print('still here', size)"])
    store = tmp_path / "results"
    monkeypatch.setenv("LABKIT_RESULTS", str(store))
    recorded = _record(store, "gpu-x", "bench_a", "0123456789ab+dirty"), _record(store, "gpu-y", "bench_b", "unknown")
    out = tmp_path / "out"

    rc = cli_main(["report", "--notebooks", str(nbdir), "--out", str(out), "--device", "cpu", "--size", "full"])
    err = capsys.readouterr().err
    assert rc == 1
    # cells: 0 title, 1 parameters, 2 "x = 1", 3 the division
    assert "FAILED 01_fail: cell 3 `y = x / 0  # fails here`: ZeroDivisionError" in err
    assert "[3/3] 02_after: ok" in err

    manifest = json.loads((out / "report.json").read_text())
    by = {n["name"]: n for n in manifest["notebooks"]}
    assert [n["name"] for n in manifest["notebooks"]] == ["00_ok", "01_fail", "02_after"]
    assert by["00_ok"]["ok"] and by["00_ok"]["sources"] == ["simulated"]
    assert by["01_fail"]["error"]["cell"] == 3
    assert manifest["device"] == "cpu" and manifest["size"] == "full"
    # where each notebook ran, and the recorded results 00_ok read (in the order it read them)
    assert {n["device"] for n in manifest["notebooks"]} == {"cpu"}
    assert by["00_ok"]["results"] == [
        {"machine": "gpu-x", "name": "bench_a", "labkit_commit": "0123456789ab+dirty", "commit_status": "dirty",
         "size": "full"},
        {"machine": "gpu-y", "name": "bench_b", "labkit_commit": "unknown", "commit_status": "unknown",
         "size": "full"},
    ]
    assert by["02_after"]["results"] == []
    assert all(p.is_file() for p in recorded)

    # the run in the results store: one row per notebook
    slug = manifest["machine"]["slug"]
    saved = json.loads((store / slug / "report.json").read_text())
    assert saved["name"] == "report" and saved["source"] == "measured-cpu" and saved["size"] == "full"
    rows = {r["notebook"]: r for r in saved["rows"]}
    assert sorted(rows) == ["00_ok", "01_fail", "02_after"]
    assert rows["00_ok"]["status"] == "ok" and rows["00_ok"]["device"] == "cpu"
    assert "ZeroDivisionError" in rows["01_fail"]["status"] and rows["01_fail"]["status"].startswith("cell 3")
    assert all(r["seconds"] > 0 for r in saved["rows"])

    ok_html = (out / "00_ok.html").read_text()
    assert "params cpu full" in ok_html  # injected parameters reached the kernel
    fail_html = (out / "01_fail.html").read_text()
    assert "ZeroDivisionError" in fail_html and "did not finish" in fail_html
    assert "never reached" in fail_html  # source shown ...
    assert fail_html.count("never reached") == 1  # ... but never printed
    assert "still here full" in (out / "02_after.html").read_text()
    index = (out / "index.html").read_text()
    assert "failed" in index and "2 of 3 notebooks ran to the end" in index
    fold = index[index.index('<details id="flags"'):]
    fold = fold[fold.index('data-notebook="00_ok"'):fold.index("</li>")]  # the results 00_ok read, folded
    assert "gpu-x/bench_a" in fold and "uncommitted changes" in fold
    assert "gpu-y/bench_b" in fold and "commit unknown" in fold
    styles = sorted(p.name for p in (out / "_static").glob("style-*.css"))  # the pages share nbconvert's style
    assert styles and all(f'href="_static/{s}"' in ok_html and f'href="_static/{s}"' in fail_html for s in styles)

    # --only reruns one notebook and keeps the others in the index
    rc = cli_main(["report", "--notebooks", str(nbdir), "--out", str(out), "--device", "cpu", "--only", "02"])
    assert rc == 0
    manifest = json.loads((out / "report.json").read_text())
    assert [n["name"] for n in manifest["notebooks"]] == ["00_ok", "01_fail", "02_after"]
    # a quick run files under report_quick, leaving the full recording alone
    quick = json.loads((store / slug / "report_quick.json").read_text())
    assert [r["notebook"] for r in quick["rows"]] == ["02_after"] and quick["size"] == "quick"
    assert json.loads((store / slug / "report.json").read_text())["rows"] == saved["rows"]


READ_RESULTS_CELLS = [
    "from labkit.results import find\n"
    "print(find('bench_a', machine='gpu-x').labkit_commit, find('bench_b', machine='gpu-y').rows)",
]


def _record(store, machine: str, name: str, commit: str):
    """A recorded result in ``store`` made on ``machine`` at labkit ``commit``."""
    from labkit.results import make_result, save_result

    result = make_result(name, [{"x": 1}], source="simulated", machine={"slug": machine}, size="full")
    result.labkit_commit = commit
    return save_result(result, store)


def test_report_bad_input_exits_2(tmp_path, capsys):
    assert cli_main(["report", "--size", "huge"]) == 2
    assert cli_main(["report", "--notebooks", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "no notebooks folder" in capsys.readouterr().err
    assert not (tmp_path / "o" / "index.html").exists()


def test_nothing_a_notebook_started_outlives_its_run(tmp_path):
    """The report kills the kernel's process group once the last cell replied: a process a
    notebook left running is gone when ``execute_notebook`` returns."""
    import os
    import time

    from labkit.report.execute import execute_notebook

    pid_file = tmp_path / "child.pid"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))")]
    t0 = time.monotonic()
    run = execute_notebook(nb, cwd=tmp_path, timeout=60, env=dict(os.environ))
    assert run.error is None
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        try:  # reap it if it became our zombie (it is not our child: normally nothing to do)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        raise AssertionError("the notebook's child process outlived the report's kernel")
    assert time.monotonic() - t0 < 60


def test_report_kernels_skip_the_optional_parser_and_still_validate_notebooks(tmp_path):
    """A report kernel starts with ``rfc3987_syntax`` blocked (labkit.report): importing
    nbformat and plotly's renderers does not import it, notebooks still validate, and jsonschema's
    other format checks still work."""
    import os

    from labkit.report.execute import execute_notebook

    out = tmp_path / "seen.txt"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import sys, nbformat, jsonschema, plotly.io as pio\n"
        "pio.renderers.default = 'plotly_mimetype+notebook'\n"
        "nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')]))\n"
        "check = jsonschema.FormatChecker()\n"
        "ok = check.conforms('1.2.3.4', 'ipv4') and not check.conforms('1.2.3', 'ipv4')\n"
        f"open({str(out)!r}, 'w').write(repr((sys.modules.get('rfc3987_syntax', 'absent'), ok)))")]
    run = execute_notebook(nb, cwd=tmp_path, timeout=60, env=dict(os.environ))
    assert run.error is None
    assert out.read_text() == "(None, True)"


def test_report_command_blocks_the_optional_parser_before_nbformat():
    """``labkit report`` blocks the import in its own process before its module imports nbformat."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, labkit.cli as c\n"
            "try:\n    c.main(['report', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(sys.modules.get('rfc3987_syntax', 'absent'), 'nbformat' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "None True"


def test_a_cell_that_prints_a_failure_or_a_page_whose_results_do_not_load_fails_the_page(tmp_path, capsys,
                                                                                        monkeypatch):
    """A page whose cells all ran still fails when a cell printed that a check failed (a log record
    included) or when a recorded result it opened did not load; the other pages are still exported."""
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    write_notebook(nbdir, "00_logged", "A check that logs", [
        "import logging\nlogging.getLogger('x').warning('conformance on tiny failed: 3 of 4 equal')", "print('on')"])
    write_notebook(nbdir, "01_fine", "Prints no failure", ["print('max_abs_err 0.1, no Errors here, failed 0')"])
    write_notebook(nbdir, "02_unloaded", "Reads a broken result", [
        "import warnings\nwarnings.simplefilter('ignore')\n"
        "from labkit.results import find\nprint(find('bench_a', machine='gpu-x'))"])
    store = tmp_path / "results"
    monkeypatch.setenv("LABKIT_RESULTS", str(store))
    path = _record(store, "gpu-x", "bench_a", "0123456789ab")
    path.write_text(path.read_text()[:40])  # cut short: not JSON
    out = tmp_path / "out"
    rc = cli_main(["report", "--notebooks", str(nbdir), "--out", str(out), "--device", "cpu", "--no-save"])
    err = capsys.readouterr().err
    assert rc == 1, err
    by = {n["name"]: n for n in json.loads((out / "report.json").read_text())["notebooks"]}
    assert not by["00_logged"]["ok"] and by["00_logged"]["error"]["cell"] == 2
    assert "conformance on tiny failed: 3 of 4 equal" in by["00_logged"]["error"]["error"]
    assert by["01_fine"]["ok"], by["01_fine"]["error"]
    assert not by["02_unloaded"]["ok"] and "gpu-x/bench_a.json" in by["02_unloaded"]["error"]["error"]
    assert all((out / f"{name}.html").is_file() for name in by)
    assert "did not finish" in (out / "00_logged.html").read_text()
    index = (out / "index.html").read_text()
    assert "1 of 3 notebooks ran to the end" in index
    row = index[index.index('<tr data-notebook="02_unloaded"'):]
    assert '<span class="small">recorded results that did not load: gpu-x/bench_a.json' in row[:row.index("</tr>")]


def test_a_planted_kernel_failure_fails_page_04_and_the_report(tmp_path, capsys):
    """Page 04 with its kernel made wrong (each output off by one) prints FAILED for the kernel's check:
    the index marks the page failed and ``labkit report`` exits 1, the next page exported all the same."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    text = (repo / "notebooks" / "04_prefix_attention_kernel.py").read_text(encoding="utf-8")
    plant = ("# %%\nimport labkit.attn.prefix_attention as _k\n_real = _k.prefix_attention\n"
             "_k.prefix_attention = lambda *a, **k: _real(*a, **k) + 1\n\n")
    at = text.index("# %% [markdown]\n# ## The kernel")
    (nbdir / "04_prefix_attention_kernel.py").write_text(text[:at] + plant + text[at:], encoding="utf-8")
    write_notebook(nbdir, "05_after", "After the kernel page", ["print('exported')"])
    out = tmp_path / "out"
    rc = cli_main(["report", "--notebooks", str(nbdir), "--out", str(out), "--device", "cpu", "--no-save"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "FAILED 04_prefix_attention_kernel" in err and "FAILED: triton_prefix on tiny" in err
    by = {n["name"]: n for n in json.loads((out / "report.json").read_text())["notebooks"]}
    assert not by["04_prefix_attention_kernel"]["ok"] and by["05_after"]["ok"]
    row = (out / "index.html").read_text()
    row = row[row.index('<tr data-notebook="04_prefix_attention_kernel"'):]
    assert 'class="failed"' in row[:row.index("</tr>")]
    assert (out / "05_after.html").is_file()
