"""Range builders: identical ranges from all four, options, and requests joining/leaving."""

from __future__ import annotations

import random

import pytest
import torch

from labkit.attn.prefix_ranges import build_prefix_range_tensor
from labkit.attn.range_builders import RANGE_BUILDERS, make_builder
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
from labkit.mm.workload import MMFeature, Request, make_request

OPTION_BUILDERS = ["v033", "cached", "incremental"]


# -- independent reference: plain Python over the mask ----------------------------------------

def runs(offset, length, mask):
    """Inclusive absolute (start, end) of each run of True in mask (None = all True)."""
    flags = [True] * length if mask is None else [bool(v) for v in mask.tolist()]
    out, start = [], None
    for i, f in enumerate(flags + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((offset + start, offset + i - 1))
            start = None
    return out


def reference(requests, *, sliding_window=None, clamp=False, span_pad=0, all_modalities=False):
    rows = []
    for req in requests:
        row = []
        for f in ([] if req is None else req.mm_features):
            if not all_modalities and f.modality not in ("image", "video"):
                continue
            pos = f.mm_position
            for s, e in runs(pos.offset, pos.length, pos.is_embed):
                s = max(0, s - span_pad)
                if sliding_window and not clamp and e - s + 1 > sliding_window:
                    continue
                row.append((s, e))
        rows.append(row)
    return rows


_counter = [0]


def random_request(rng: random.Random, variant="list", modalities=("image",)):
    _counter[0] += 1
    feats, pos = [], rng.randint(0, 3)
    for k in range(rng.choice([0, 1, 1, 2, 3, 5])):
        length = rng.choice([1, 2, 5, 9, 20])
        kind = rng.random()
        if kind < 0.3:
            mask = None
        elif kind < 0.4:
            mask = torch.zeros(length, dtype=torch.bool)  # image with no embeds
        else:
            mask = torch.tensor([rng.random() < 0.6 for _ in range(length)])
        cls = PLACEHOLDER_VARIANTS[variant]
        feats.append(MMFeature(f"img-{_counter[0]}-{k}", cls(pos, length, mask), rng.choice(modalities)))
        pos += length + rng.randint(0, 3)
    return Request(f"req-{_counter[0]}", pos + 1, 4, feats)


# -- hand-worked ------------------------------------------------------------------------------

def test_hand_worked():
    a = make_request("a", 40, [(2, 5), (20, 4), (30, 3)],
                     is_embed=[torch.tensor([False, True, False, True, True]), None, torch.zeros(3, dtype=torch.bool)])
    b = make_request("b", 5)
    expected = [[(3, 3), (5, 6), (20, 23)], [], []]
    for name in RANGE_BUILDERS:
        assert make_builder(name).build([a, None, b]) == expected, name


def test_sliding_window_drops_long_ranges_unless_clamped():
    a = make_request("a", 60, [(0, 10), (20, 4)])  # ranges (0, 9) length 10 and (20, 23) length 4
    for name in OPTION_BUILDERS:
        assert make_builder(name, sliding_window=8).build([a]) == [[(20, 23)]]
        assert make_builder(name, sliding_window=10).build([a]) == [[(0, 9), (20, 23)]]
        assert make_builder(name, sliding_window=8, clamp_sliding_window=True).build([a]) == [[(0, 9), (20, 23)]]
        assert make_builder(name, sliding_window=0).build([a]) == [[(0, 9), (20, 23)]]  # 0 = no window


def test_span_pad_moves_starts_and_counts_toward_window():
    a = make_request("a", 60, [(1, 4), (20, 4)])
    for name in OPTION_BUILDERS:
        assert make_builder(name, span_pad=2).build([a]) == [[(0, 4), (18, 23)]]
        assert make_builder(name, span_pad=2, sliding_window=5).build([a]) == [[(0, 4)]]


def test_modality_filter():
    pr = PLACEHOLDER_VARIANTS["list"]
    req = Request("m", 30, 1, [MMFeature("x", pr(0, 3), "image"), MMFeature("y", pr(5, 4), "audio"),
                              MMFeature("z", pr(10, 2), "video")])
    for name in OPTION_BUILDERS:
        assert make_builder(name).build([req]) == [[(0, 2), (10, 11)]]
    assert make_builder("pr38794").build([req]) == [[(0, 2), (5, 8), (10, 11)]]  # PR era: every feature


# -- randomized: all builders agree with the reference ----------------------------------------

@pytest.mark.parametrize("variant", list(PLACEHOLDER_VARIANTS))
def test_randomized_identical(variant):
    rng = random.Random(sum(map(ord, variant)))
    for _ in range(25):
        batch = [None if rng.random() < 0.1 else random_request(rng, variant) for _ in range(rng.randint(0, 6))]
        expected = reference(batch)
        for name in RANGE_BUILDERS:
            builder = make_builder(name)
            for _step in range(2):
                assert builder.build(batch) == expected, name


def test_randomized_options_and_modalities():
    rng = random.Random(5)
    for _ in range(40):
        opts = dict(sliding_window=rng.choice([None, 0, 1, 3, 6, 100]), clamp_sliding_window=rng.random() < 0.3,
                    span_pad=rng.choice([0, 0, 1, 3]))
        batch = [random_request(rng, "fast", ("image", "video", "audio")) for _ in range(rng.randint(1, 5))]
        expected = reference(batch, sliding_window=opts["sliding_window"], clamp=opts["clamp_sliding_window"],
                             span_pad=opts["span_pad"])
        for name in OPTION_BUILDERS:
            assert make_builder(name, **opts).build(batch) == expected, (name, opts)
        assert make_builder("pr38794").build(batch) == reference(batch, all_modalities=True)


@pytest.mark.parametrize("use_update", [True, False])
def test_requests_joining_and_leaving(use_update):
    rng = random.Random(11)
    running = [random_request(rng) for _ in range(6)]
    builders = {name: make_builder(name, sliding_window=rng.choice([None, 6])) for name in OPTION_BUILDERS}
    windows = {name: b.sliding_window for name, b in builders.items()}
    for step in range(30):
        removed = [running.pop(rng.randrange(len(running))) for _ in range(rng.randint(0, min(2, len(running))))]
        added = [random_request(rng) for _ in range(rng.randint(0, 2))]
        running += added
        rng.shuffle(running)  # batch rows move
        for name, b in builders.items():
            if use_update:
                b.update(added=added, removed=removed)
            assert b.build(running) == reference(running, sliding_window=windows[name]), (name, step)
    if use_update:
        assert len(builders["incremental"]) == len(running)


def test_incremental_steady_state_reuses_lists():
    rng = random.Random(3)
    batch = [random_request(rng) for _ in range(5)]
    b = make_builder("incremental")
    b.update(added=batch)
    first = b.build(batch)
    count = b.recomputed
    second = b.build(batch)
    assert second == first and all(x is y for x, y in zip(first, second))
    assert b.recomputed == count


def test_incremental_never_stale_on_reused_id_or_new_image():
    pr = PLACEHOLDER_VARIANTS["list"]
    old = Request("same-id", 20, 1, [MMFeature("a", pr(0, 3))])
    b = make_builder("incremental")
    b.update(added=[old])
    assert b.build([old]) == [[(0, 2)]]
    new = Request("same-id", 20, 1, [MMFeature("b", pr(5, 2))])  # id reused, no update call
    assert b.build([new]) == [[(5, 6)]]
    new.mm_features.append(MMFeature("c", pr(10, 2)))  # a new image on the same request
    assert b.build([new]) == [[(5, 6), (10, 11)]]


class CountingRange:
    """A placeholder double that counts extract_embeds_range calls."""

    calls = 0

    def __init__(self, offset, length):
        self.offset, self.length, self.is_embed = offset, length, None

    def extract_embeds_range(self):
        CountingRange.calls += 1
        return [(self.offset, self.offset + self.length - 1)]


def test_cached_extracts_once_per_placeholder():
    CountingRange.calls = 0
    reqs = [Request(f"c{i}", 40, 1, [MMFeature(f"f{i}{k}", CountingRange(10 * k, 4)) for k in range(3)])
            for i in range(4)]
    b = make_builder("cached")
    for _ in range(5):
        b.build(reqs)
    assert CountingRange.calls == 12 and len(b) == 12
    b.update(removed=reqs[:2])
    assert len(b) == 6
    CountingRange.calls = 0
    v = make_builder("v033")
    for _ in range(5):
        v.build(reqs)
    assert CountingRange.calls == 60  # every step, every feature


def test_builder_output_feeds_prefix_tensor():
    a = make_request("a", 40, [(2, 5)], is_embed=[torch.tensor([False, True, False, True, True])])
    rows = make_builder("incremental").build([a, None])
    assert build_prefix_range_tensor(rows, 3).tolist() == [[[3, 3], [5, 6]], [[0, 0], [0, 0]], [[0, 0], [0, 0]]]


@pytest.mark.parametrize("name, opts", [
    ("v033", {"sliding_window": -1}),
    ("v033", {"span_pad": -2}),
    ("cached", {"span_pad": "x"}),
    ("incremental", {"sliding_window": 2.5}),
    ("pr38794", {"sliding_window": 8}),
    ("nope", {}),
])
def test_bad_options(name, opts):
    with pytest.raises(ValueError):
        make_builder(name, **opts)


# -- labkit bench ranges ----------------------------------------------------------------------

def test_bench_rows():
    from labkit.attn import bench_ranges

    batch = bench_ranges.make_batch(3, 2)
    assert make_builder("v033").build(batch) == reference(batch)
    row = bench_ranges.measure_builder("incremental", batch, repeats=2)
    assert row["images"] == 6 and row["kind"] == "builder" and row["median_ns"] > 0
    lab = bench_ranges.measure_pipeline("incremental+cached", batch, 3, "cpu", repeats=2)
    today = bench_ranges.measure_pipeline("v033+pinned", batch, 3, "cpu", repeats=2)
    assert lab["h2d_per_step"] == 0 and today["h2d_per_step"] == 1


def test_bench_cli(tmp_path, monkeypatch, capsys):
    import json

    from labkit.cli import main as cli_main
    from labkit.results import load_results

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    rc = cli_main(["bench", "ranges", "--device", "cpu", "--requests", "3", "--images", "2", "--layers", "2",
                   "--sweep-requests", "1,2", "--sweep-images", "1", "--repeats", "2",
                   "--json", str(tmp_path / "r.json")])
    assert rc == 0
    assert "incremental+cached" in capsys.readouterr().out
    assert {r.name for r in load_results(tmp_path / "results")} == {"ranges_step_quick", "ranges_sweep_quick"}
    payload = json.loads((tmp_path / "r.json").read_text())
    kinds = [(r["kind"], r["variant"]) for r in payload["ranges_step"]["rows"]]
    assert ("builder", "v033") in kinds and ("pipeline", "v033+pinned") in kinds
    assert len(payload["ranges_sweep"]["rows"]) == 2 * len(RANGE_BUILDERS)
    rows = payload["ranges_step"]["rows"]
    base = {r["kind"]: r["median_ns"] for r in rows if r["variant"] in ("v033", "v033+pinned")}
    ratios = {"builder": ("speedup_vs_v033", "speedup_vs_v033_pinned"),
              "pipeline": ("speedup_vs_v033_pinned", "speedup_vs_v033")}
    for r in rows:  # builders against vLLM 0.33's builder, pipelines against its whole path
        ratio, other = ratios[r["kind"]]
        assert r[ratio] == pytest.approx(base[r["kind"]] / r["median_ns"]) and other not in r, r
    for r in payload["ranges_sweep"]["rows"]:
        v033 = [s for s in payload["ranges_sweep"]["rows"] if s["variant"] == "v033"
                and s["num_requests"] == r["num_requests"] and s["images_per_request"] == r["images_per_request"]]
        assert r["speedup_vs_v033"] == pytest.approx(v033[0]["median_ns"] / r["median_ns"])


@pytest.mark.parametrize("argv", [["--builders", "v033,zzz"], ["--requests", "0"], ["--variant", "nope"],
                                  ["--sweep-images", "-1"], ["--size", "huge"]])
def test_bench_cli_bad_input(argv, tmp_path, monkeypatch, capsys):
    from labkit.cli import main as cli_main

    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "results"))
    assert cli_main(["bench", "ranges", *argv]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_ranges_sweep_figure():
    from labkit.attn import bench_ranges
    from labkit.results import make_result
    from labkit.viz.lab.h2d import plot_ranges_sweep

    rows = bench_ranges.sweep_bench(["v033", "incremental"]).sweep("quick", requests=(1, 2), images=(1, 2), repeats=1)
    fig = plot_ranges_sweep([make_result("ranges_sweep", rows, source="measured-cpu", machine={"slug": "t"})])
    assert len(fig.data) == 2 * 2  # builders x images-per-request choices
    assert [t.visible for t in fig.data] == [False, False, True, True]  # the largest choice shown first
    assert list(fig.data[2].x) == [1, 2]
    assert "no ranges_sweep" in plot_ranges_sweep([]).layout.annotations[0].text
