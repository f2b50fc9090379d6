"""Many traces: a folder run on local processes and on a Dask LocalCluster gives the single-run figures."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from real_traces import SHARED

from labkit.cli import main as labkit_main
from labkit.errors import UsageError
from labkit.trace.analysis.many import analyze_one, combine, expand_paths

DATA = Path(__file__).resolve().parent / "data"
#: real traces of several ranks and kinds, copied into one folder: rank 3 of an A100 run (its
#: ``distributedInfo`` names the rank), BERT on an H100 (no rank recorded), vLLM steps on a GB10
RANK3 = "hta-trace-diff-control-a100-rank3.last-step-start.pt.trace.json.gz"
BERT = "tracelens-h100-bert-small-inference.pt.trace.json.gz"
FOLDER_FIXTURES = (RANK3, BERT, "nvllm-gb10-ten-steps.markers-and-copies.pt.trace.json.gz",
                   "hta-triton-example-a100.pt.trace.json.gz")
#: the folders analysed: the fixtures always, the whole shared collection where present
FOLDERS = ["fixtures"] + (["shared"] if SHARED.is_dir() else [])


def _fixture_folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ranks")
    for name in FOLDER_FIXTURES:
        shutil.copy(DATA / name, d / name)
    return d


@pytest.fixture(scope="module", params=FOLDERS)
def folder(request, tmp_path_factory):
    """``(folder, rank-3 trace name, BERT trace name)``."""
    if request.param == "shared":
        return SHARED, "hta-trace-diff-control-a100-rank3.pt.trace.json.gz", BERT
    return _fixture_folder(tmp_path_factory), RANK3, BERT


def _single_runs(root: Path) -> dict:
    """Each trace of the folder analysed alone, in this process."""
    return {str(p): analyze_one(str(p))["json"] for p in expand_paths([str(root)])}


@pytest.fixture(scope="module")
def single_runs(folder):
    return _single_runs(folder[0])


def _per_trace(doc: dict) -> dict:
    return {t["trace"]: {k: v for k, v in t.items() if k != "trace"} for t in doc["traces"]}


def test_folder_with_two_jobs_equals_single_runs(tmp_path, capsys, folder, single_runs):
    root, rank3, bert = folder
    out = tmp_path / "many.json"
    rc = labkit_main(["analyze", str(root), "--jobs", "2", "--json", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"traces", "combined"}
    assert _per_trace(doc) == json.loads(json.dumps(single_runs))
    assert "combined: " in printed and len(doc["combined"]["per_rank"]) == len(single_runs)
    ranks = {Path(r["trace"]).name: r["rank"] for r in doc["combined"]["per_rank"]}
    assert ranks[rank3] == 3  # from distributedInfo
    assert ranks[bert] is None  # none recorded
    assert all(r["peak_rss_bytes"] > 0 for r in doc["combined"]["per_rank"])


def test_dask_local_cluster_equals_single_runs(tmp_path_factory):
    """On the fixtures' folder (the Dask path does not depend on which traces it carries)."""
    distributed = pytest.importorskip("distributed")
    from labkit.trace.analysis.many import TraceSet

    single_runs = _single_runs(_fixture_folder(tmp_path_factory))
    paths = list(single_runs)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        recs = TraceSet(paths, dask_address=cluster.scheduler_address).records
    assert [r["trace"] for r in recs] == paths
    assert {r["trace"]: r["json"] for r in recs} == json.loads(json.dumps(single_runs))


def test_dask_unreachable_is_a_usage_error(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    import labkit.trace.analysis.many as many

    monkeypatch.setattr(many, "DASK_CONNECT_TIMEOUT_S", 2)  # nothing listens there: no need to wait 10 s
    rc = labkit_main(["analyze", str(DATA / "hta-triton-example-a100.pt.trace.json.gz"),
                      "--dask", "tcp://127.0.0.1:9", "--json", str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "Dask scheduler" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def _rank_trace(path: Path, rank: int, step_durs: list[float], busy_gap: float) -> Path:
    """A hand-made rank trace: steps of the given lengths, one kernel per step."""
    ev, t = [], 0.0
    for k, d in enumerate(step_durs):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
                   "ts": t, "dur": d})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                   "ts": t + 1, "dur": 2, "args": {"correlation": k + 1}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + busy_gap, "dur": d / 2,
                   "args": {"correlation": k + 1, "stream": 7, "device": 0}})
        t += d
    path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 3}, "traceEvents": ev}))
    return path


def test_combined_view_hand_counted(tmp_path):
    recs = [analyze_one(str(_rank_trace(tmp_path / f"r{r}.json", r, durs, 5)))
            for r, durs in [(0, [100, 100, 100]), (1, [100, 140, 100]), (2, [150, 100, 160])]]
    comb = combine(recs)
    assert [s["slowest_rank"] for s in comb["per_step"]] == [2, 1, 2]
    assert [s["spread_us"] for s in comb["per_step"]] == [50, 40, 60]
    # step totals 300 / 340 / 410: median 340, only rank 2 is more than 10% over it
    assert [(s["rank"], round(s["over_median"], 4)) for s in comb["stragglers"]] == [(2, round(410 / 340 - 1, 4))]
    assert comb["stragglers"][0]["slowest_steps_count"] == 2


def test_expand_paths(tmp_path):
    (tmp_path / "a").mkdir()
    g = tmp_path / "a" / "x.pt.trace.json.gz"
    g.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "a" / "notes.txt").write_text("x")
    j = tmp_path / "y.json"
    j.write_text('{"traceEvents": []}')
    assert expand_paths([str(tmp_path), str(j)]) == [g, j]
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no \\*.json"):
        expand_paths([str(tmp_path / "empty")])
    with pytest.raises(UsageError, match="no such trace"):
        expand_paths([str(tmp_path / "missing.json")])


def test_bad_trace_among_many_exit_2_nothing_written(tmp_path, capsys):
    bad = tmp_path / "in" / "bad.json"
    bad.parent.mkdir()
    bad.write_text("[1, 2, 3]")
    (tmp_path / "in" / "good.json.gz").write_bytes((DATA / "hta-triton-example-a100.pt.trace.json.gz").read_bytes())
    out = tmp_path / "o.json"
    rc = labkit_main(["analyze", str(tmp_path / "in"), "--jobs", "1", "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "not a trace" in err and not out.exists()
    rc = labkit_main(["analyze", str(tmp_path / "in"), "--html", str(tmp_path / "r.html")])
    assert rc == 2 and "one trace" in capsys.readouterr().err


def test_combined_uses_device_idle_and_ranks_with_steps(tmp_path):
    """Per-rank idle is the device's real gaps; a trace without steps does not pull the median down."""
    recs = [analyze_one(str(_rank_trace(tmp_path / f"r{r}.json", r, durs, 5)))
            for r, durs in [(0, [100, 100]), (1, [100, 130])]]
    two_streams = tmp_path / "r2.json"  # two kernels on two streams that overlap: no device idle
    ev = [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": s, "ts": t, "dur": 10,
           "args": {"stream": s, "device": 0, "correlation": -1}} for s, t in ((7, 0), (8, 5), (7, 20), (8, 12))]
    two_streams.write_text(json.dumps({"distributedInfo": {"rank": 2}, "traceEvents": ev}))
    recs.append(analyze_one(str(two_streams)))
    comb = combine(recs)
    r2 = comb["per_rank"][2]
    # stream 7: [0,10] [20,30], stream 8: [5,15] [12,22]: per stream 10 + 0 us idle, the device none
    assert (r2["rank"], r2["busy_us"], r2["idle_us"], r2["steps_count"]) == (2, 30, 0, 0)
    assert recs[2]["json"]["summary"]["idle_us"] == 10
    # step totals 200 and 230 (rank 2 has no steps): median 215, nobody is 10% over it
    assert comb["stragglers"] == [] and comb["measure"] == "step time"


def _as_rank(src: Path, dst: Path, rank: int) -> Path:
    """A shipped real trace written as one rank's file of a vLLM profile folder (its rank stamped)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    doc["distributedInfo"] = {"rank": rank, "world_size": 3}
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def test_profile_folder_per_step_rows_name_the_slowest_rank(tmp_path, capsys):
    """A folder of three real traces as ranks: per step seen in two or more of them, the slowest rank, its
    idle in that step and its host call sites during the step's host-wait gaps, against a hand-written
    reading of each trace's own analysis (every bubble, summed by call site here)."""
    from labkit.trace import Trace

    folder = tmp_path / "vllm_profile"
    folder.mkdir()
    names = ["nvllm-gb10-ten-steps.markers-and-copies", "nvllm-gb10-one-step.trimmed",
             "labkit-h200-fast-cursor-per_layer-async.trimmed"]
    files = [_as_rank(DATA / f"{n}.pt.trace.json.gz", folder / f"rank{r}.pt.trace.json.gz", r)
             for r, n in enumerate(names)]
    out = tmp_path / "o.json"
    assert labkit_main(["analyze", str(folder), "--jobs", "2", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    comb = json.loads(out.read_text())["combined"]
    ans = [Trace(f) for f in files]
    expected = []
    for k in range(max(len(a.steps()) for a in ans)):
        have = [(float(a.steps()["dur_us"].iloc[k]), r) for r, a in enumerate(ans) if len(a.steps()) > k]
        if len(have) < 2:
            continue
        dur, r = max(have)
        row = ans[r].steps().iloc[k]
        sites: dict = {}
        for b in ans[r].bubbles().itertuples():
            if b.category == "host_wait" and b.step == k:
                sites[b.call_site] = sites.get(b.call_site, 0.0) + b.dur_us
        top = sorted(sites.items(), key=lambda kv: -kv[1])[:3]
        expected.append((k, r, len(have), dur, row["name"], row["idle_us"], row["idle_host_wait_us"], top))
    got = [(s["step"], s["slowest_rank"], s["ranks_count"], s["max_dur_us"], s["slowest_name"], s["slowest_idle_us"],
            s["slowest_idle_host_wait_us"], [(c["call_site"], c["idle_us"]) for c in s["slowest_call_sites"]])
           for s in comb["per_step"]]
    assert [g[:7] for g in got] == [e[:7] for e in expected] and len(got) == 1  # step 0: all three ranks
    assert [[(c, pytest.approx(v)) for c, v in g[7]] for g in got] == [e[7] for e in expected]
    assert got[0][1] == 2 and got[0][7] and got[0][7][0][0].startswith("forward/layer_")  # the H200 per_layer rank
    assert [r["rank"] for r in comb["per_rank"]] == [0, 1, 2]
    assert "per step (the n-th step marker of each trace)" in printed and "forward/layer_" in printed
