"""The GPU run's packing and filing: scripts/pack_gpu_check.py and scripts/ingest_gpu_check.sh,
and gpu_check.sh's answers to bad input (the run itself needs a GPU, or a dry run on CPU)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from labkit.device import has_cuda
from labkit.engine.recorded import engine_traces

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "scripts" / "pack_gpu_check.py"
INGEST = ROOT / "scripts" / "ingest_gpu_check.sh"
GPU_CHECK = ROOT / "scripts" / "gpu_check.sh"
H200 = ROOT / "data" / "traces" / "h200"
BIG = next(iter(sorted((H200 / "fast-cursor-per_layer-async").glob("*.pt.trace.json.gz"))), None)
SMALL = next(iter(sorted((H200 / "tensor-loop-none-async").glob("*.pt.trace.json.gz"))), None)
needs_traces = pytest.mark.skipif(BIG is None or SMALL is None, reason="recorded H200 traces missing")


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _one_line_exit_2(run: subprocess.CompletedProcess) -> None:
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert run.stderr.strip() and run.stderr.strip().count("\n") == 0, run.stderr
    assert "Traceback" not in run.stderr


def _work(tmp_path: Path) -> Path:
    """A gpu_check work folder: one result, logs, a profile, a report, engine + h2d traces."""
    work = tmp_path / "work"
    (work / "results" / "h200").mkdir(parents=True)
    (work / "results" / "h200" / "engine.json").write_text(json.dumps({"name": "engine", "rows": []}))
    (work / "logs").mkdir()
    (work / "logs" / "engine.log").write_text("ran\n")
    (work / "profile.json").write_text("{}")
    (work / "summary.txt").write_text("gpu_check: test\n")
    (work / "report").mkdir()
    (work / "report" / "index.html").write_text("<html>index</html>")
    page = "<html>" + "plotly.js stand-in " * 20000 + "</html>"
    for n in ("00_environment", "06_compare_gpus"):
        (work / "report" / f"{n}.html").write_text(page)  # the same bulk twice: one solid xz copy
    for run, src in (("fast-cursor-per_layer-async", BIG), ("tensor-loop-none-async", SMALL)):
        (work / "traces" / "engine" / run).mkdir(parents=True)
        shutil.copy(src, work / "traces" / "engine" / run / src.name)
    (work / "traces" / "h2d").mkdir()
    shutil.copy(SMALL, work / "traces" / "h2d" / "h2d-per_layer-S128-L34.pt.trace.json.gz")
    return work


def _pack(work: Path, out: Path, max_mb: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PACK), str(work), str(out), "--max-mb", str(max_mb)],
                          capture_output=True, text=True, env=_env(), cwd=ROOT)


def _members(tarball: Path) -> dict[str, int]:
    with tarfile.open(tarball) as tar:
        return {m.name: m.size for m in tar.getmembers() if m.isfile()}


@needs_traces
def test_pack_keeps_everything_when_it_fits(tmp_path):
    work = _work(tmp_path)
    out = tmp_path / "gpu_check.tar.gz"
    run = _pack(work, out, 16)
    assert run.returncode == 0, run.stderr
    names = _members(out)
    for name in ("results/h200/engine.json", "logs/engine.log", "profile.json", "summary.txt", "MANIFEST.txt",
                 "report.tar.xz", f"traces/engine/fast-cursor-per_layer-async/{BIG.name}",
                 "traces/h2d/h2d-per_layer-S128-L34.pt.trace.json.gz"):
        assert name in names, name
    assert names[f"traces/engine/fast-cursor-per_layer-async/{BIG.name}"] == BIG.stat().st_size  # untouched
    # the two identical page bodies compress to about one copy
    assert names["report.tar.xz"] < len((work / "report" / "00_environment.html").read_text()) / 20
    with tarfile.open(out) as tar:
        inner = tar.extractfile("report.tar.xz").read()
    (tmp_path / "r.tar.xz").write_bytes(inner)
    with tarfile.open(tmp_path / "r.tar.xz") as rep:
        assert {"report/index.html", "report/00_environment.html", "report/06_compare_gpus.html"} <= set(rep.getnames())


@needs_traces
def test_pack_trims_the_largest_trace_to_fit(tmp_path):
    work = _work(tmp_path)
    out = tmp_path / "gpu_check.tar.gz"
    total = BIG.stat().st_size + 2 * SMALL.stat().st_size
    cap_mb = (total - BIG.stat().st_size // 3) / 1e6  # needs about a third of the big trace gone
    run = _pack(work, out, cap_mb)
    assert run.returncode == 0, run.stdout + run.stderr
    assert out.stat().st_size <= cap_mb * 1e6
    names = _members(out)
    big = f"traces/engine/fast-cursor-per_layer-async/{BIG.name}"
    assert big in names and names[big] < BIG.stat().st_size
    with tarfile.open(out) as tar:
        doc = json.loads(gzip.decompress(tar.extractfile(big).read()))
        manifest = tar.extractfile("MANIFEST.txt").read().decode()
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 1
    assert "trimmed traces/engine/fast-cursor-per_layer-async" in manifest


@needs_traces
def test_pack_leaves_out_h2d_traces_before_engine_traces(tmp_path):
    work = _work(tmp_path)
    out = tmp_path / "gpu_check.tar.gz"
    run = _pack(work, out, 0.6)  # room for the fixed parts and a trimmed small trace at most
    assert out.stat().st_size <= 0.6e6, run.stdout
    names = _members(out)
    assert not any(n.startswith("traces/h2d/") for n in names)
    with tarfile.open(out) as tar:
        manifest = tar.extractfile("MANIFEST.txt").read().decode()
    left_out = [line for line in manifest.splitlines() if "left out" in line]
    assert left_out and "traces/h2d/" in left_out[0]
    assert "results/h200/engine.json" in names and run.returncode == 0


def test_pack_bad_input(tmp_path):
    _one_line_exit_2(_pack(tmp_path / "missing", tmp_path / "o.tar.gz", 16))
    (tmp_path / "w").mkdir()
    _one_line_exit_2(_pack(tmp_path / "w", tmp_path / "o.tar.gz", 0))
    assert not (tmp_path / "o.tar.gz").exists()


@needs_traces
def test_pack_skips_a_truncated_trace_and_keeps_packing(tmp_path):
    """A trace cut off mid-write (a step killed while its profiler wrote it) is skipped and listed;
    everything else is packed."""
    work = _work(tmp_path)
    whole = SMALL.read_bytes()
    cut = work / "traces" / "engine" / "fast-cursor-per_step-async" / "labkit.9.pt.trace.json.gz"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(whole[: len(whole) // 2])  # a gzip stream that stops half-way
    plain = work / "traces" / "engine" / "fast-cursor-pinned-async" / "labkit.8.pt.trace.json"
    plain.parent.mkdir(parents=True)
    plain.write_text(gzip.decompress(whole).decode()[:5000])  # JSON that stops before its end
    out = tmp_path / "gpu_check.tar.gz"
    run = _pack(work, out, 16)
    assert run.returncode == 0, run.stdout + run.stderr
    names = _members(out)
    assert f"traces/engine/tensor-loop-none-async/{SMALL.name}" in names and "results/h200/engine.json" in names
    assert not any("per_step" in n or "pinned" in n for n in names)
    with tarfile.open(out) as tar:
        manifest = tar.extractfile("MANIFEST.txt").read().decode()
    skipped = [line for line in manifest.splitlines() if line.startswith("# skipped")]
    assert len(skipped) == 2 and "unreadable" in skipped[0]
    assert {"fast-cursor-per_step-async", "fast-cursor-pinned-async"} == {line.split("/")[2] for line in skipped}


@needs_traces
def test_progress_pack_leaves_pages_and_trimming_to_the_final_pack(tmp_path):
    work = _work(tmp_path)
    out = tmp_path / "gpu_check.tar.gz"
    run = subprocess.run([sys.executable, str(PACK), str(work), str(out), "--progress"], capture_output=True,
                         text=True, env=_env(), cwd=ROOT)
    assert run.returncode == 0, run.stderr
    names = _members(out)
    assert "report.tar.xz" not in names and "results/h200/engine.json" in names
    assert names[f"traces/engine/fast-cursor-per_layer-async/{BIG.name}"] == BIG.stat().st_size
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no part file left


def _tarball(tmp_path: Path, runs=("tensor-loop-none-async", "list-loop-none-async"), slugs=("h200",)) -> Path:
    src = tmp_path / "src"
    for slug in slugs:
        (src / "results" / slug).mkdir(parents=True)
        (src / "results" / slug / "engine.json").write_text('{"name": "engine"}')
        (src / "results" / slug / "report.json").write_text('{"name": "report"}')
    for run in runs:
        (src / "traces" / "engine" / run).mkdir(parents=True)
        (src / "traces" / "engine" / run / "labkit.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (src / "traces" / "h2d").mkdir(parents=True)
    (src / "traces" / "h2d" / "h2d-x.pt.trace.json.gz").write_bytes(b"x")
    (src / "profile.json").write_text('{"ops": {}}')
    (src / "logs").mkdir()
    (src / "logs" / "engine.log").write_text("ok\n")
    (src / "summary.txt").write_text("summary\n")
    out = tmp_path / "gpu_check.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name)
    return out


def _ingest(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INGEST), *map(str, args)], capture_output=True, text=True)


def test_ingest_files_traces_where_the_notebooks_look(tmp_path):
    dest = tmp_path / "repo"
    stale = dest / "data" / "traces" / "h200" / "fast-cursor-none-async"
    stale.mkdir(parents=True)
    (stale / "labkit.0.pt.trace.json.gz").write_bytes(b"old")
    run = _ingest(_tarball(tmp_path), "--into", dest)
    assert run.returncode == 0, run.stderr
    # the reader the notebooks use finds exactly the new runs (the stale one is replaced)
    found = engine_traces("h200", root=dest / "data" / "traces")
    assert set(found) == {"tensor/loop/none/async", "list/loop/none/async"}
    assert json.loads((dest / "data" / "results" / "h200" / "engine.json").read_text()) == {"name": "engine"}
    assert (dest / "data" / "results" / "h200" / "report.json").is_file()
    assert (dest / "data" / "profiles" / "h200.json").read_text() == '{"ops": {}}'
    logs = dest / "data" / "results" / "h200" / "gpu_check_logs"
    assert (logs / "engine.log").is_file() and (logs / "summary.txt").is_file()
    assert not (dest / "data" / "traces" / "h200" / "engine").exists()
    assert not list((dest / "data").rglob("h2d-x.pt.trace.json.gz"))


def test_ingest_files_only_whole_results_and_full_over_quick(tmp_path):
    src = tmp_path / "src" / "results" / "h200"
    src.mkdir(parents=True)
    (src / "engine.json").write_text(json.dumps({"name": "engine", "complete": False, "rows": [{}]}))
    (src / "h2d_step.json").write_text(json.dumps({"name": "h2d_step", "complete": True}))
    (src / "mm_sweep_quick.json").write_text(json.dumps({"name": "mm_sweep_quick"}))
    tarball = tmp_path / "t.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(tmp_path / "src" / "results", arcname="results")
    dest = tmp_path / "repo"
    into = dest / "data" / "results" / "h200"
    into.mkdir(parents=True)
    (into / "h2d_step_quick.json").write_text("{}")  # replaced by the full recording
    (into / "mm_sweep.json").write_text("{}")  # a full recording: the quick run is not filed over it
    run = _ingest(tarball, "--into", dest)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in into.glob("*.json")) == ["h2d_step.json", "mm_sweep.json"]
    assert "engine.json is the partial result of a cut step" in run.stdout
    assert "ingested 1 results" in run.stdout


def test_ingest_bad_input(tmp_path):
    _one_line_exit_2(_ingest())
    _one_line_exit_2(_ingest(tmp_path / "missing.tar.gz"))
    junk = tmp_path / "junk.tar.gz"
    junk.write_text("not a tarball")
    _one_line_exit_2(_ingest(junk))
    _one_line_exit_2(_ingest(_tarball(tmp_path / "two", slugs=("h200", "a100")), "--into", tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with tarfile.open(tmp_path / "empty.tar.gz", "w:gz") as tar:
        tar.add(empty, arcname="logs")
    _one_line_exit_2(_ingest(tmp_path / "empty.tar.gz", "--into", tmp_path))


def _gpu_check(tmp_path, timeout_s: int = 120, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("OUT", "GPU_CHECK_ALLOW_CPU", "LABKIT_RESULTS")}
    full.update(env)
    return subprocess.run(["bash", str(GPU_CHECK)], capture_output=True, text=True, env=full, cwd=tmp_path,
                          timeout=timeout_s)


def test_gpu_check_bad_input(tmp_path):
    _one_line_exit_2(_gpu_check(tmp_path))
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), GPU_CHECK_SIZE="huge"))
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), GPU_CHECK_BUDGET="9m"))
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), PYTHON=str(tmp_path / "no-python")))
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), GPU_CHECK_STEPS="engine bogus"))
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\nexit 1\n")
    no_torch.chmod(0o755)
    run = _gpu_check(tmp_path, OUT=str(tmp_path / "o"), PYTHON=str(no_torch), GPU_CHECK_ALLOW_CPU="1")
    _one_line_exit_2(run)
    assert "cannot import torch" in run.stderr
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), GPU_CHECK_WORK=str(tmp_path / "o" / "w")))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "old.log").write_text("x")
    _one_line_exit_2(_gpu_check(tmp_path, OUT=str(tmp_path / "o"), GPU_CHECK_WORK=str(tmp_path / "used")))
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == []  # refused before writing anything


@pytest.mark.skipif(has_cuda(), reason="checks the refusal on a machine without a GPU")
def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    run = _gpu_check(tmp_path, OUT=str(tmp_path / "o"), PYTHON=sys.executable)
    _one_line_exit_2(run)
    assert "GPU_CHECK_ALLOW_CPU" in run.stderr
    assert not (tmp_path / "o" / "gpu_check.tar.gz").exists()


def _plan(**env) -> list[list[str]]:
    run = _gpu_check(ROOT, timeout_s=30, GPU_CHECK_PLAN="1", **env)
    assert run.returncode == 0, run.stderr
    return [line.split() for line in run.stdout.splitlines()]


def _header_plan() -> dict[str, int]:
    """The plan table in gpu_check.sh's header: step -> estimated H200 seconds."""
    table, on = {}, False
    for line in GPU_CHECK.read_text().splitlines():
        if line.startswith("#   step") and "H200 s" in line:
            on = True
        elif on and "---" in line:
            break
        elif on and line.startswith("#   ") and line[4:5] not in (" ", "("):
            name, sec = line[4:].split()[:2]
            table[name] = int(sec)
    return table


@pytest.mark.parametrize("budget,allow_cpu", [(540, "0"), (150, "1"), (150, "0"), (900, "1"), (40, "1")])
def test_step_limits_add_up_to_the_budget(budget, allow_cpu):
    rows = _plan(GPU_CHECK_BUDGET=str(budget), GPU_CHECK_ALLOW_CPU=allow_cpu)
    windows = {r[0]: int(r[2]) for r in rows[1:] if len(r) == 4 and r[2].isdigit()}
    assert rows[-1] == ["total:", f"{budget}s", "of", "a", f"{budget}s", "budget"]
    assert sum(windows.values()) == budget  # start + every step that runs + the pack
    assert windows["pack"] == 15 or budget < 15 + 10
    for r in rows[1:-1]:
        if r[3].lstrip("-").isdigit():  # a step that runs: its limit leaves room for the kill and the tarball
            assert int(r[3]) >= 3 and int(r[2]) - int(r[3]) == 6, r
    if budget == 540 and allow_cpu == "0":
        # the header's table is the plan the script runs: same steps, same seconds, limits = estimates
        header = _header_plan()
        planned = {r[0]: int(r[1]) for r in rows[1:-1] if r[1].isdigit()}
        assert planned == {k: v for k, v in header.items() if k in planned}
        assert header["start"] == windows["start"] and header["pack"] == windows["pack"]
        assert set(header) == set(planned) | {"start", "pack"}
        assert all(int(r[3]) == planned[r[0]] for r in rows[1:-1] if r[0] in planned)


def test_a_missing_pytest_fails_the_run(tmp_path):
    """Without pytest the GPU tests cannot run: a failure of the run, never a skip."""
    fake = tmp_path / "site"
    fake.mkdir()
    (fake / "pytest.py").write_text("raise ImportError('no pytest here')\n")
    out = tmp_path / "out"
    run = _gpu_check(tmp_path, timeout_s=120, OUT=str(out), PYTHON=sys.executable, PYTHONPATH=str(fake),
                     GPU_CHECK_ALLOW_CPU="1", GPU_CHECK_SIZE="quick", GPU_CHECK_STEPS="gpu-tests",
                     LABKIT_WHEELHOUSE=str(tmp_path / "no-wheelhouse"))
    assert run.returncode == 1, run.stdout[-2000:]
    summary = (out / "summary.txt").read_text()
    assert _steps(summary) == {"gpu-tests": "FAILED"}
    assert "no pytest in" in summary and "failed: gpu-tests" in summary
    assert (out / "gpu_check.tar.gz").is_file()


def _steps(summary: str) -> dict[str, str]:
    """step -> ``rc=N`` / ``SKIPPED`` / ``FAILED`` from a gpu_check summary."""
    out = {}
    for line in summary.splitlines():
        parts = line.split()
        if len(parts) > 1 and not line.startswith(" ") and (parts[1].startswith("rc=") or parts[1] in ("SKIPPED", "FAILED")):
            out[parts[0]] = parts[1]
    return out


def _results_in(tarball: Path) -> dict[str, dict]:
    with tarfile.open(tarball) as tar:
        return {Path(m.name).name: json.loads(tar.extractfile(m).read()) for m in tar.getmembers()
                if m.isfile() and m.name.startswith("results/") and m.name.endswith(".json")}


@pytest.mark.slow
@pytest.mark.skipif(has_cuda(), reason="a dry run is for machines without a GPU (with one, run the script itself)")
def test_gpu_check_dry_run_on_cpu_packs_and_ingests(tmp_path):
    """The whole script on CPU (quick size, one report page): every step runs, results pin the
    commit the summary names, and the tarball ingests into the layout the notebooks read."""
    out = tmp_path / "out"
    run = _gpu_check(tmp_path, OUT=str(out), PYTHON=sys.executable, GPU_CHECK_ALLOW_CPU="1", GPU_CHECK_SIZE="quick",
                     # a budget far above what the steps need here: the test is that every step runs
                     GPU_CHECK_BUDGET="900", GPU_CHECK_REPORT_ONLY="06", GPU_CHECK_WORK=str(tmp_path / "work"),
                     # fewer steps, requests and images, no H2D sweep: the same paths in less time
                     GPU_CHECK_EXTRA_ENGINE="--steps 2 --warmup 1 --num-requests 8",
                     GPU_CHECK_EXTRA_H2D="--no-sweep --seqs 8 --images 4",
                     GPU_CHECK_EXTRA_RANGES="--requests 8 --images 4", GPU_CHECK_EXTRA_MM="--requests 8 --images 4",
                     timeout_s=1000)
    assert run.returncode == 0, run.stdout[-3000:]
    summary = (out / "summary.txt").read_text()
    commit = summary.splitlines()[0].split("commit=")[1].strip()
    steps = _steps(summary)
    for name in ("gpu-tests", "kernel-tests", "calibrate", "attn", "h2d", "ranges", "engine", "mm", "report"):
        assert steps.get(name) == "rc=0", (name, summary[:3000])
    assert "setup" not in steps  # this python has pytest and Jupyter's stack
    # on CPU the kernel tests are the suite's own (interpreter) run: the dry run only collects them
    assert "--collect-only" in next(line for line in summary.splitlines() if line.startswith("kernel-tests"))
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.tar.gz", "summary.txt"]
    assert not (tmp_path / "work").exists()  # removed after a good pack
    end = int(next(line for line in summary.splitlines() if line.startswith("end:")).split()[1].rstrip("s"))
    assert end <= 900
    assert all(r.get("complete", True) for r in _results_in(out / "gpu_check.tar.gz").values())
    dest = tmp_path / "repo"
    dest.mkdir()
    ingest = _ingest(out / "gpu_check.tar.gz", "--into", dest)
    assert ingest.returncode == 0, ingest.stderr
    (slug_dir,) = (dest / "data" / "results").iterdir()
    results = {p.name: json.loads(p.read_text()) for p in slug_dir.glob("*.json")}
    assert {"engine_quick.json", "calibration_quick.json", "mm_sweep_quick.json", "report_quick.json"} <= set(results)
    assert {r["labkit_commit"] for r in results.values()} == {commit}
    assert all(r["size"] == "quick" for r in results.values())
    traces = engine_traces(slug_dir.name, root=dest / "data" / "traces")
    engine_rows = results["engine_quick.json"]["rows"]
    # one trace folder per engine run: a row that shares another's run has none
    assert traces and len(traces) == len([r for r in engine_rows if "same_run_as" not in r])
    assert [r["variant"] for r in engine_rows if "same_run_as" in r] == ["fast/cursor/per_layer/async/full"]
    assert (dest / "reports" / f"gpu_check-{slug_dir.name}" / "06_compare_gpus.html").is_file()


@pytest.mark.slow
@pytest.mark.skipif(has_cuda(), reason="a dry run is for machines without a GPU (with one, run the script itself)")
def test_a_budget_too_small_for_every_step_keeps_what_finished_and_the_cut_steps_rows(tmp_path):
    """The budget holds however the steps go: the step that overruns is cut at its limit, its rows
    so far come back marked incomplete beside the finished steps' results, and the summary names it."""
    out = tmp_path / "out"
    budget = 75
    t0 = time.monotonic()
    run = _gpu_check(tmp_path, OUT=str(out), PYTHON=sys.executable, GPU_CHECK_ALLOW_CPU="1", GPU_CHECK_SIZE="quick",
                     GPU_CHECK_BUDGET=str(budget), GPU_CHECK_STEPS="calibrate h2d",
                     # four quick points at 1 layer, then one at 2,000 layers that cannot end in time
                     # (~10 minutes of per-layer copies): the cut falls between them on any machine
                     GPU_CHECK_EXTRA_H2D="--layers 1,2000 --repeats 50 --no-sweep", timeout_s=300)
    took = time.monotonic() - t0
    assert run.returncode == 1, run.stdout[-3000:]
    assert took <= budget + 30
    summary = (out / "summary.txt").read_text()
    assert _steps(summary) == {"calibrate": "rc=0", "h2d": "rc=124"}, summary[:2000]
    assert "cut by their time limit: h2d" in summary
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.tar.gz", "summary.txt"]
    results = _results_in(out / "gpu_check.tar.gz")
    with tarfile.open(out / "gpu_check.tar.gz") as tar:
        h2d_log = tar.extractfile("logs/h2d.log").read().decode()
    assert results["calibration_quick.json"]["complete"] and len(results) == 2, (summary[:1500], h2d_log)
    h2d = results["h2d_step_quick.json"]
    assert h2d["complete"] is False
    assert [(r["variant"], r["layers"]) for r in h2d["rows"]] == [(v, 1) for v in ("per_layer", "per_step", "pinned",
                                                                                    "cached")]
    assert {"logs/h2d.log", "logs/calibrate.log", "MANIFEST.txt"} <= set(_members(out / "gpu_check.tar.gz"))
