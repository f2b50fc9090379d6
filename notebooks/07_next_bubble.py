# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · The next bubble: vLLM rebuilds every image range on every step
#
# PR #40143 took torch out of the scheduler's per-image hot path and #38794 made the
# prefix-range tensor one copy per step. Profiling today's vLLM (0.33) on an mm-prefix
# workload (Gemma-style images, 128 requests x 32 images) points at the next host-side
# cost on the step's critical path: `compute_mm_prefix_ranges`, which the model runner
# calls **every step** and which calls `PlaceholderRange.extract_embeds_range()` for
# **every image of every request**. That method runs four torch ops per call and caches
# nothing, although a placeholder never changes.
#
# This notebook shows the profile that pointed there, the installed function against a
# two-line patch (cache the runs on the placeholder; `patches/`), the lab's range-builder
# variants, and what a GPU would see. Numbers with vLLM come from recorded results
# (`.venv-vllm/bin/labkit bench vllm-prefix-ranges --size full`); this kernel re-measures only when
# vLLM is importable here.

# %% tags=["remove-input"]
from labkit.report import answers
answers.next_bubble()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## Recorded: installed against patched, per batch shape
#
# The run the answer above reads (`.venv-vllm/bin/labkit bench vllm-prefix-ranges --size full`). The patch
# computes a placeholder's runs once (a `cached_property` holding a tuple) and returns a fresh list
# per call; `labkit.vllm.census.bench_vllm_prefix_ranges` checks on randomized inputs that the patched function
# returns exactly what the installed one does, then times both on the same features. The GPU idle
# columns set each host time beside the device step below (perfect-overlap bound: a step lasts
# `max(device, host)`).

# %%
from labkit.results import RANGES_STEP, RANGES_SWEEP, VLLM_PREFIX_RANGES, VLLM_SCHED, find_all, results_rows
from labkit.timing import unit_cost_note
from labkit.bench import format_table
from labkit.viz.vllm.prefix_ranges import plot_installed_vs_patched, plot_profile
from labkit.vllm.census import bench_vllm_prefix_ranges
recorded = find_all(VLLM_PREFIX_RANGES)
rows = results_rows(recorded, params=("vllm_version",))
declare_sources(*sorted({r["source"] for r in rows}))
device_step_ms, step_from = bench_vllm_prefix_ranges.device_step_ms()
print(f"device step: {device_step_ms} ms ({step_from})")
format_table(bench_vllm_prefix_ranges.gpu_idle_table(rows, device_step_ms),
             columns=["machine", "num_requests", "images", "installed_us", "patched_us", "speedup",
                      "installed_idle_frac", "patched_idle_frac"], time_unit="ms",
             rename={"num_requests": "requests", "installed_us": "installed", "patched_us": "patched",
                     "installed_idle_frac": "GPU idle, installed", "patched_idle_frac": "GPU idle, patched"},
             max_rows=50)

# %% [markdown]
# Per batch shape (the menu picks the images per request): the installed function grows with
# requests x images; the patched one pays the old cost once per image, on its first step.

# %%
plot_installed_vs_patched(rows)

# %% [markdown]
# ## How profiling pointed at the call site
#
# A cProfile of one `compute_mm_prefix_ranges` call at 128 requests x 32 images (installed
# vLLM, recorded with `--profile`): almost all of the time is `extract_embeds_range` and
# the torch ops it runs (`diff` twice, `nonzero` twice, `stack`), 4,096 times per step.

# %%
profile, aten_ops = bench_vllm_prefix_ranges.saved_profile(recorded)
plot_profile(profile, aten_ops)

# %% [markdown]
# ## A GPU host is no faster at it
#
# The range build runs in the model runner while it prepares the step's inputs. Under async
# scheduling a step lasts `max(device, host)`; under sync, `device + host` (the one step model,
# notebook 08). The device step is Gemma-4-E4B's full-batch decode step at 128 x 32 on an H200 from
# the lab's roofline, the step whose peak notebook 08 checks against the published one. Per
# machine, the recorded host time of one build at 128 x 32: the GPU machine's host is *slower* at
# it than the development CPU.

# %%
print(unit_cost_note(recorded + find_all(RANGES_STEP)))
format_table(bench_vllm_prefix_ranges.host_comparison(128, 32))

# %% [markdown]
# ## The lab's range builders (recorded on every machine, and measured here, now, quick)
#
# The lab rebuilds the same ranges four ways (`labkit.attn.range_builders`): `pr38794` and
# `v033` (every step, as vLLM), `cached` (this patch's idea) and `incremental` (a per-batch
# structure updated only when requests join or leave). The recorded sweeps first, then this run.

# %%
from labkit.viz.lab.h2d import plot_ranges_sweep
ranges = find_all(RANGES_SWEEP)
declare_sources(*sorted({r.source for r in ranges}))
plot_ranges_sweep(ranges)

# %%
from labkit.attn.bench_ranges import step_bench
from labkit.device import measured_source, resolve_device
device = resolve_device(device)
quick = step_bench(device, ["v033", "cached", "incremental"], num_requests=32 if size == "quick" else 128,
                   images=8 if size == "quick" else 32, layers=4, pipelines=()).sweep(size, repeats=3)
format_table(quick, columns=["variant", "num_requests", "images_per_request", "median_ns", "speedup_vs_v033"],
             caption=f"this run on {device} ({measured_source(device)}, {size} size)")

# %% [markdown]
# ## A second, smaller bubble: the scheduler's window in decode
#
# vLLM 0.33's scheduler no longer reads every image per step, but it still bisects (twice per
# request per step, with a Python key function) to an empty window in every decode step.
# `labkit bench vllm-sched` times vLLM's real `Scheduler.schedule()` per decode step for a
# text-only batch, the installed vLLM and a patch that returns early once a request's last
# image is in the KV cache (`patches/vllm-0.33.0-encoder-early-return.diff`; identical
# decisions, checked by `make test-vllm`). The table reads the recorded `vllm_sched` result;
# the step columns are the two bubble bounds with the device step used above.

# %%
from labkit.vllm.census import bench_vllm_sched
sched_table = format_table(bench_vllm_sched.summary(results_rows(find_all(VLLM_SCHED)), device_step_ms=device_step_ms))
sched_table if len(sched_table) else print("no vllm_sched result recorded yet: run `.venv-vllm/bin/labkit bench vllm-sched --size full`")

# %% [markdown]
# ## Does it reproduce in vLLM itself?
#
# The A/B inside vLLM's own server (`scripts/vllm_ab.sh`: `vllm serve` once per variant and
# repeat, measured with `vllm bench serve`) is shown once, in
# [notebook 08, section 3](08_inside_vllm.html), beside the lab's own number for the same code path.

# %% [markdown]
# ## Try it live
# The recorded grid, without a kernel: the slider picks the requests in the batch, the menu the
# images per request; bars are host ms per step, installed and patched, against the device step
# (dashed). In JupyterLab with vLLM installed, the cell below it re-measures one point here.

# %%
from labkit.viz.explore import plot_explorer
grid = [dict(r, version=r["variant"], ms=r["median_ns"] / 1e6) for r in rows]
plot_explorer(grid, x="version", y="ms", slider="num_requests", menu="images", start={"num_requests": 128, "images": 32},
              names={"num_requests": "requests", "images": "images per request"}, unit="ms", log_y=True,
              highlight=("installed",), reference=(device_step_ms, f"device step {device_step_ms} ms"),
              title="compute_mm_prefix_ranges per step (recorded, host time)", y_title="host ms per step")

# %%
try:
    import vllm  # noqa: F401  (only in .venv-vllm)
    live = bench_vllm_prefix_ranges.PREFIX.sweep("quick", requests=(32,), images=(8,), repeats=3)
    display(format_table(live, columns=["variant", "num_requests", "images", "median_ns"], caption="measured here, now"))
except ImportError:
    print("vLLM is not installed in this kernel (it is in .venv-vllm): the figure above is the recorded run.")
