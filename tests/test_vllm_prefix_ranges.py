"""labkit.vllm.census.bench_vllm_prefix_ranges without vLLM: workload, the caching patch on the lab's placeholder, results.

The measurement against the installed vLLM (and the patch file applied to vLLM's source)
is checked in tests/vllm_conformance/.
"""

from __future__ import annotations

import random

import pytest
import torch

from labkit.vllm.census import bench_vllm_prefix_ranges as nb
from labkit.mm.placeholder import ListPlaceholderRange, TensorPlaceholderRange
from labkit.results import VLLM_PREFIX_RANGES, find_all, make_result, results_rows, save_result


def _runs_reference(offset, mask, length):
    """Inclusive runs of True, by a plain loop (independent of torch's diff/nonzero)."""
    if mask is None:
        return [(offset, offset + length - 1)]
    runs, start = [], None
    flags = mask.tolist() + [False]
    for i, f in enumerate(flags):
        if f and start is None:
            start = i
        elif not f and start is not None:
            runs.append((offset + start, offset + i - 1))
            start = None
    return runs


def test_gemma_mask_and_workload_layout():
    m = nb.gemma_mask(258)
    assert m.dtype == torch.bool and m.shape == (258,) and int(m.sum()) == 256 and not m[0] and not m[-1]
    with pytest.raises(ValueError):
        nb.gemma_mask(2)
    feats = nb.make_features(3, 2, placeholder_cls=ListPlaceholderRange, placeholder_len=10, text_between=4)
    assert len(feats) == 3 and all(len(f) == 2 for f in feats)
    assert [f.mm_position.offset for f in feats[0]] == [4, 18]
    assert feats[0][0].mm_position is not feats[1][0].mm_position  # own objects per request
    assert feats[2][1].mm_position.extract_embeds_range() == [(19, 26)]
    assert nb.make_features(0, 5, placeholder_cls=ListPlaceholderRange) == []


@pytest.fixture
def patched_list_class():
    restore = nb.cached_embeds_ranges(ListPlaceholderRange)
    try:
        yield ListPlaceholderRange
    finally:
        restore()


def test_patch_returns_the_same_runs_and_caches_them(patched_list_class, monkeypatch):
    rng = random.Random(0)
    for _ in range(300):
        length = rng.randint(1, 30)
        mask = nb.random_mask(rng, length)
        offset = rng.randint(0, 99)
        p = ListPlaceholderRange(offset, length, mask)
        first = p.extract_embeds_range()
        assert first == _runs_reference(offset, mask, length)
        assert all(type(a) is int and type(b) is int for a, b in first)
        first.append((-1, -1))  # a caller mutating its list does not touch the cache
        assert p.extract_embeds_range() == _runs_reference(offset, mask, length)
    # the second call runs no torch op
    p = ListPlaceholderRange(3, 6, torch.tensor([True, False, True, True, False, True]))
    p.extract_embeds_range()
    monkeypatch.setattr(torch, "diff", lambda *a, **k: (_ for _ in ()).throw(AssertionError("torch.diff called")))
    assert p.extract_embeds_range() == [(3, 3), (5, 6), (8, 8)]


def test_patch_is_undone_and_refuses_double_application():
    original = ListPlaceholderRange.__dict__["extract_embeds_range"]
    restore = nb.cached_embeds_ranges(ListPlaceholderRange)
    with pytest.raises(RuntimeError, match="already patched"):
        nb.cached_embeds_ranges(ListPlaceholderRange)
    restore()
    assert ListPlaceholderRange.__dict__["extract_embeds_range"] is original
    assert nb.CACHE_ATTR not in ListPlaceholderRange.__dict__
    with pytest.raises(TypeError):
        nb.cached_embeds_ranges(int)


def test_clear_cached_runs():
    feats = nb.make_features(2, 3, placeholder_cls=TensorPlaceholderRange, placeholder_len=5)
    with nb.patched_placeholder(TensorPlaceholderRange):
        for row in feats:
            for f in row:
                f.mm_position.extract_embeds_range()
        assert all(nb.CACHE_ATTR in vars(f.mm_position) for row in feats for f in row)
        nb.clear_cached_runs(feats)
        assert not any(nb.CACHE_ATTR in vars(f.mm_position) for row in feats for f in row)


def _fake_result(root, machine_slug, rows, version="0.33.0"):
    res = make_result(VLLM_PREFIX_RANGES, rows, params={"vllm_version": version}, source="measured-cpu",
                      machine={"slug": machine_slug, "cpu_model": "test"})
    save_result(res, root=root)


def test_rows_side_by_side_and_lookup(tmp_path):
    rows = [
        {"variant": "installed", "num_requests": 128, "images": 32, "median_ns": 140e6},
        {"variant": "patched", "num_requests": 128, "images": 32, "median_ns": 0.7e6},
        {"variant": "installed", "num_requests": 1, "images": 1, "median_ns": 40e3},
    ]
    _fake_result(tmp_path, "cpu-test-2c", rows)
    got = results_rows(find_all(VLLM_PREFIX_RANGES, root=tmp_path), params=("vllm_version",))
    assert len(got) == 3 and got[0]["machine"] == "cpu-test-2c" and got[0]["vllm_version"] == "0.33.0"
    table = nb.side_by_side(got)
    big = next(r for r in table if r["num_requests"] == 128)
    assert big["installed_us"] == pytest.approx(140e3) and big["patched_us"] == pytest.approx(700.0)
    assert big["speedup"] == pytest.approx(200.0) and big["saved_us"] == pytest.approx(139300.0)
    small = next(r for r in table if r["num_requests"] == 1)
    assert "speedup" not in small  # no patched row recorded there
    assert nb.lookup(got, 128, 32)["speedup"] == pytest.approx(200.0)
    assert nb.lookup(got, 64, 64) is None


def test_host_comparison_and_device_step_read_from_results(tmp_path):
    _fake_result(tmp_path, "cpu-test-2c", [{"variant": "installed", "num_requests": 128, "images": 32,
                                            "median_ns": 139e6},
                                           {"variant": "installed", "num_requests": 8, "images": 32,
                                            "median_ns": 9e6}])
    gpu = make_result("ranges_step", [{"variant": "v033", "num_requests": 128, "images_per_request": 32,
                                       "median_ns": 165e6},
                                      {"variant": "cached", "num_requests": 128, "images_per_request": 32,
                                       "median_ns": 0.7e6}],
                      params={}, source="measured-gpu", machine={"slug": "gpu-test", "cpu_model": "test"})
    save_result(gpu, root=tmp_path)
    assert nb.host_comparison(root=tmp_path) == [
        {"machine": "gpu-test", "what": "lab v033 builder", "median_ms": 165.0, "source": "measured-gpu"},
        {"machine": "cpu-test-2c", "what": "vllm installed", "median_ms": 139.0, "source": "measured-cpu"},
    ]
    # the device step: the roofline's full-batch step at #40143's shape, the one notebook 08 reads
    from labkit.gpu.device_model import full_batch_device_ns

    ms, where = nb.device_step_ms("h100")
    assert ms == round(full_batch_device_ns("h100", 128, 1024 + 32 * 262) / 1e6, 2) and "roofline" in where


def test_cli_without_vllm_or_with_bad_arguments(capsys):
    from labkit.cli import main as labkit_main

    try:
        import vllm  # noqa: F401
        has_vllm = True
    except ImportError:
        has_vllm = False
    if not has_vllm:
        assert labkit_main(["bench", "vllm-prefix-ranges", "--no-save"]) == 2
        assert "vLLM is not installed" in capsys.readouterr().err
    assert labkit_main(["bench", "vllm-prefix-ranges", "--requests", "0"]) == 2
    assert "requests must be in 1..256" in capsys.readouterr().err
    assert labkit_main(["bench", "vllm-prefix-ranges", "--images", "65"]) == 2
    assert labkit_main(["bench", "vllm-prefix-ranges", "--checks", "0"]) == 2


def test_expected_effect_hand_worked():
    eff = nb.expected_effect(140.0, 0.7, 25.0)
    assert eff["step_ms_installed_overlapped"] == 140.0 and eff["step_ms_installed_serial"] == 165.0
    assert eff["step_ms_patched_overlapped"] == 25.0 and eff["step_ms_patched_serial"] == pytest.approx(25.7)
    assert eff["gpu_idle_fraction_installed_overlapped"] == pytest.approx(1 - 25 / 140)
    assert eff["gpu_idle_fraction_patched_overlapped"] == 0.0
    assert eff["speedup_overlapped"] == pytest.approx(5.6) and eff["speedup_serial"] == pytest.approx(165 / 25.7)
    with pytest.raises(ValueError):
        nb.expected_effect(1.0, 1.0, 0.0)


ROWS = [
    {"variant": v, "num_requests": r, "images": i, "median_ns": ns, "machine": "cpu-test-2c",
     "source": "measured-cpu", "vllm_version": "0.33.0"}
    for (r, i, v, ns) in [(1, 8, "installed", 4e5), (1, 8, "patched", 2e3), (128, 32, "installed", 1.4e8),
                          (128, 32, "patched", 7e5), (128, 8, "installed", 3.5e7), (128, 8, "patched", 1.8e5)]
]


def test_figures_from_recorded_rows():
    pytest.importorskip("plotly")
    from labkit.viz.vllm.prefix_ranges import plot_installed_vs_patched, plot_profile

    fig = plot_installed_vs_patched(ROWS)
    assert len(fig.data) == 4  # installed + patched for each of 2 image counts (one machine)
    assert [t.visible for t in fig.data].count(True) == 2  # the largest image count shows first
    assert "measured-cpu" in fig.layout.title.text and len(fig.layout.updatemenus[0].buttons) == 2
    big = next(t for t in fig.data if t.visible and t.name.startswith("installed"))
    assert list(big.x) == [128] and list(big.y) == [pytest.approx(140.0)]
    prof = plot_profile([{"function": "f", "ncalls": 4096, "tottime_us": 2e5, "cumtime_us": 3e5}], {"aten::diff": 8192})
    assert list(prof.data[0].x) == [200.0] and "8,192 aten ops" in prof.layout.title.text
    empty = plot_installed_vs_patched([])
    assert "no vllm_prefix_ranges result" in empty.layout.annotations[0].text


def test_gpu_idle_per_grid_point():
    table = {(r["num_requests"], r["images"]): r for r in nb.gpu_idle_table(ROWS, device_step_ms=25.0)}
    assert sorted(table) == [(1, 8), (128, 8), (128, 32)]
    big = table[(128, 32)]
    assert big["installed_us"] == 1.4e5 and big["speedup"] == pytest.approx(200.0)
    assert big["installed_idle_frac"] == pytest.approx(1 - 25 / 140) and big["patched_idle_frac"] == 0.0
    assert table[(128, 8)]["installed_idle_frac"] == pytest.approx(1 - 25 / 35)
