"""``labkit analyze``: output files, bad input (one line, exit 2, no partial output) and a fuzz test."""

from __future__ import annotations

import copy
import gzip
import json
import random
from pathlib import Path

import pytest

from labkit.cli import main as labkit_main

DATA = Path(__file__).resolve().parent / "data"
SMALL = DATA / "hta-triton-example-a100.pt.trace.json.gz"
GP100 = DATA / "hta-step-based-gpu-annotation-gp100.pt.trace.json.gz"
BERT = DATA / "tracelens-h100-bert-small-inference.pt.trace.json.gz"


def run(argv, capsys):
    rc = labkit_main(["analyze", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_summary_json(tmp_path, capsys):
    out_json = tmp_path / "a.json"
    rc, out, err = run([GP100, "--json", out_json, "--top", "3"], capsys)
    assert rc == 0, err
    assert "host_wait" in out and "FLAG repeated small pageable copies" in out
    doc = json.loads(out_json.read_text())
    for key in ("streams", "bubbles", "host_starvation", "h2d", "source", "steps", "hta_compatible"):
        assert key in doc
    st = doc["streams"][0]
    assert st["idle_us"] == pytest.approx(st["idle_host_wait_us"] + st["idle_kernel_wait_us"] + st["idle_other_us"])
    assert doc["source"]["gpu"] == "Quadro GP100" and doc["source"]["simulated"] is False
    assert doc["h2d"]["pageable_count"] == 10 and len(doc["host_starvation"]) == 3


def test_vs_and_html(tmp_path, capsys):
    pytest.importorskip("plotly")
    out_html, out_json = tmp_path / "r.html", tmp_path / "r.json"
    rc, out, err = run([GP100, "--vs", SMALL, "--html", out_html, "--json", out_json], capsys)
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert set(doc) == {"before", "after", "diff"}
    totals = {r["metric"]: r for r in doc["diff"]["totals"]}
    assert totals["h2d_count"]["before"] == 10 and totals["h2d_count"]["after"] == 0
    from plotly.offline import get_plotlyjs

    page = out_html.read_text()
    lib = get_plotlyjs()
    assert page.startswith("<!DOCTYPE html>") and lib in page  # plotly.js inline
    rest = page.replace(lib, "")
    assert "src=" not in rest and "http://" not in rest and "https://" not in rest
    assert "Plotly.newPlot" in rest


@pytest.mark.parametrize("content", [b"", b"not json", b'{"schemaVersion": 1}', b'{"traceEvents": [{"ph"'])
def test_bad_input_one_line_exit_2_no_output(tmp_path, capsys, content):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    out_json = tmp_path / "out.json"
    rc, out, err = run([bad, "--json", out_json], capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("labkit analyze: error:")
    assert "Traceback" not in err and not out_json.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


@pytest.mark.parametrize("argv, message", [
    (["{tmp}/nope.json"], "no such trace file: {tmp}/nope.json"),
    (["{gp100}", "--top", "0"], "--top must be >= 1"),
    (["{gp100}", "--jobs", "0"], "--jobs must be >= 1"),
    (["{gp100}", "--steps", "("], "bad step pattern '(': missing ), unterminated subpattern at position 0"),
    (["{gp100}", "--kernel-wait-us", "-1"], "--kernel-wait-us must be a finite number >= 0"),
    (["{gp100}", "--json", "{tmp}/no/dir.json"], "output folder '{tmp}/no' does not exist"),
    (["{gp100}", "--json", "{tmp}"], "output '{tmp}' is a folder"),
    (["{gp100}", "--json", "{tmp}/o.json", "--html", "{tmp}/o.json"],
     "--json and --html name the same file '{tmp}/o.json'"),
    (["{gp100}", "--json", "{gp100}"], "--json '{gp100}' is one of the input traces"),
])
def test_missing_file_and_bad_options(tmp_path, capsys, argv, message):
    """Each mistake is one line naming it, exit 2, nothing written."""
    fill = {"tmp": str(tmp_path), "gp100": str(GP100)}
    rc, out, err = run([a.format(**fill) for a in argv], capsys)
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [f"labkit analyze: error: {message.format(**fill)}"], err
    assert list(tmp_path.iterdir()) == []


def test_help_exits_0_and_names_the_options(capsys):
    assert labkit_main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: labkit analyze")
    assert all(opt in out for opt in ("--vs", "--json", "--html", "--steps", "--jobs", "--dask", "--skip-malformed"))


# ----------------------------------------------------------------------------------------------
# fuzz: mutated real traces never produce anything but a result or a clean usage error
# ----------------------------------------------------------------------------------------------

def _mutate_doc(doc: dict, rng: random.Random) -> dict:
    doc = copy.deepcopy(doc)
    ev = doc["traceEvents"]
    for _ in range(rng.randint(1, 6)):
        if not ev:
            break
        e = rng.choice(ev)
        if not isinstance(e, dict) or not e:
            continue
        key = rng.choice(sorted(e))
        action = rng.randrange(6)
        if action == 0:
            del e[key]
        elif action == 1:
            e[key] = rng.choice([None, "x", -1, 1.5, [], {}, True, -1e300, "12"])
        elif action == 2 and isinstance(e.get("args"), dict) and e["args"]:
            k = rng.choice(sorted(e["args"]))
            e["args"][k] = rng.choice([None, "7", -5, [1, 2], {"a": 1}, 3.7])
        elif action == 3:
            e["dur"] = rng.choice([-1, -0.5, 0, float("inf")]) if rng.random() < 0.5 else "10"
        elif action == 4:
            ev[ev.index(e)] = rng.choice([None, 3, "event", [e]])
        else:
            e["ts"] = rng.choice([None, "1", float("nan"), -10, 1e18])
    if rng.random() < 0.05:
        doc.pop("traceEvents")
    return doc


def _mutate_bytes(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    action = rng.randrange(3)
    if action == 0:
        return bytes(b[: rng.randrange(len(b))])
    if action == 1:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        return bytes(b)
    i = rng.randrange(len(b))
    return bytes(b[:i] + b[i + rng.randint(1, 50):])


@pytest.mark.parametrize("seed_file", [SMALL, BERT], ids=["triton", "bert"])
def test_fuzz_no_uncaught_exception(tmp_path, capsys, seed_file):
    rng = random.Random(1234)
    with gzip.open(seed_file, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    if len(doc["traceEvents"]) > 400:  # keep cases fast: the first 400 events
        doc["traceEvents"] = doc["traceEvents"][:400]
    plain = json.dumps(doc).encode()
    gz = gzip.compress(plain)
    codes = []
    for case in range(150):
        kind = case % 3
        p = tmp_path / f"case{case}.json"
        if kind == 0:
            p.write_text(json.dumps(_mutate_doc(doc, rng)))
        elif kind == 1:
            p.write_bytes(_mutate_bytes(plain, rng))
        else:
            p = p.with_suffix(".json.gz")
            p.write_bytes(_mutate_bytes(gz, rng))
        out_json = tmp_path / f"case{case}.out.json"
        # half the cases skip malformed events whatever their share; the others apply the 0.1% limit
        rc, out, err = run([p, "--json", out_json] + (["--skip-malformed"] if case % 2 == 0 else []), capsys)
        assert rc in (0, 2), f"case {case}: {err}"
        assert "Traceback" not in err
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and not out_json.exists()
        else:
            json.loads(out_json.read_text())
        codes.append(rc)
    assert codes.count(0) > 10 and codes.count(2) > 10  # both outcomes were exercised


# ----------------------------------------------------------------------------------------------
# malformed events, non-traces and output paths
# ----------------------------------------------------------------------------------------------

def _doc_with_bad(n_good: int, n_bad: int) -> dict:
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
          for i in range(n_good)]
    bad = [{"ph": "X", "cat": "cpu_op", "name": "neg", "pid": 1, "tid": 1, "ts": 3, "dur": -1}] * n_bad
    return {"traceEvents": ev[:3] + bad + ev[3:]}


def test_too_many_malformed_events_exit_2_unless_skipped(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_doc_with_bad(997, 3)))  # 3 of 1000 = 0.3%
    out_json = tmp_path / "out.json"
    rc, out, err = run([p, "--json", out_json], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "3 of 1000 events are malformed" in err and "event 3: negative duration" in err
    assert not out_json.exists()
    rc, out, err = run([p, "--json", out_json, "--skip-malformed"], capsys)
    assert rc == 0, err
    assert json.loads(out_json.read_text())["summary"]["malformed_events"] == 3
    assert "malformed events skipped: 3 of 1000" in out


def test_few_malformed_events_are_skipped_and_reported(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_doc_with_bad(999, 1)))  # 1 of 1000 = 0.1%: at the limit
    out_json = tmp_path / "out.json"
    rc, out, err = run([p, "--json", out_json], capsys)
    assert rc == 0, err
    assert json.loads(out_json.read_text())["summary"]["malformed_events"] == 1
    assert "malformed events skipped: 1 of 1000" in out


@pytest.mark.parametrize("content", [b"[1, 2, 3]", b'{"traceEvents": [1, 2, 3]}', b'{"traceEvents": 5}'])
def test_not_a_trace_exit_2(tmp_path, capsys, content):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    rc, out, err = run([p, "--skip-malformed", "--json", tmp_path / "o.json"], capsys)
    assert rc == 2 and "not a trace" in err and len(err.strip().splitlines()) == 1
    assert [q.name for q in tmp_path.iterdir()] == ["t.json"]


def test_output_paths_checked_before_work(tmp_path, capsys, monkeypatch):
    import labkit.viz.trace_cli as trace_cli

    def boom(*a, **k):
        raise AssertionError("analysis ran before the outputs were checked")

    monkeypatch.setattr(trace_cli, "Trace", boom)
    same = tmp_path / "same.out"
    rc, _, err = run([GP100, "--json", same, "--html", same], capsys)
    assert rc == 2 and "same file" in err
    rc, _, err = run([GP100, "--json", tmp_path, "--html", tmp_path / "ok.html"], capsys)
    assert rc == 2 and "is a folder" in err
    rc, _, err = run([GP100, "--json", tmp_path / "ok.json", "--html", tmp_path / "no" / "r.html"], capsys)
    assert rc == 2 and "does not exist" in err
    copy_in = tmp_path / "in.json.gz"
    copy_in.write_bytes(GP100.read_bytes())
    rc, _, err = run([copy_in, "--json", copy_in], capsys)
    assert rc == 2 and "input" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json.gz"]


def test_failed_write_leaves_no_output(tmp_path, capsys, monkeypatch):
    """When the second output cannot be written, the first one is not left behind."""
    pytest.importorskip("plotly")
    import os as _os

    real = _os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr("labkit.trace.outputs.os.replace", flaky)
    rc, _, err = run([SMALL, "--json", tmp_path / "a.json", "--html", tmp_path / "a.html"], capsys)
    assert rc == 2 and "No space left" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
