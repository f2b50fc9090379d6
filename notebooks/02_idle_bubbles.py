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
# # Idle bubbles: where host overhead becomes GPU idle time
#
# A mini engine runs the lab's scheduler, attention metadata and a Gemma-4-E4B-like model step by
# step, the way vLLM's engine does (async scheduling: the host plans step n+1 while the GPU runs
# step n). Whenever the host needs longer than the GPU for a step, the GPU waits: an **idle bubble**.
#
# - **#40143**: with `tensor` placeholders the scheduler pays torch C++ cost on 4,096
#   `get_num_embeds()` calls per step (128 requests x 32 images) and the steps become host-bound;
#   `list` (the fix) and `fast` (this lab) shrink the gap.
# - **#38794**: with `per_layer` prefix ranges every attention layer makes one synchronising
#   pageable copy per sequence, so the GPU drains between layers; `per_step` and `cached` remove it.
#
# On a CPU the GPU stream is **simulated** (real host time, device times from a recorded GPU
# profile); the second half shows the engine **measured on an NVIDIA H200** beside it.

# %% tags=["remove-input"]
from labkit.report import answers
answers.idle_bubbles()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %%
import tempfile
from labkit.bench import format_table
from labkit.engine.runs import ENGINE_COLUMNS, run_notebook_set
from labkit.engine.runs import default_profile_name
from labkit.engine.device.profiles import load_profile
from labkit.engine.recorded import analyze_recorded, describe_host_cost, host_cost_figures, with_robust_metrics
from labkit.results import ENGINE, find_all
from labkit.viz.notebook import fold
profile = load_profile(default_profile_name())
gpu = next(iter(find_all(ENGINE, source="measured-gpu")), None)  # the recorded GPU run, read once (the second half uses it too)
gpu_rows = with_robust_metrics(gpu.rows) if gpu else []
measured = analyze_recorded("h200")
if gpu:
    declare_sources("measured-gpu")
fold("The simulated device's profile, and what its host cost per op rests on",
     f"{profile.label()}\nhost cost per op: {profile.launch_overhead_ns / 1e3:.1f} us; qkv_proj at 128 tokens: "
     f"{profile.duration_ns('qkv_proj', tokens=128) / 1e3:.1f} us on the device\n"
     + (describe_host_cost(host_cost_figures(profile, gpu_rows, measured)) if gpu else "no GPU result recorded yet"),
     "The recorded H200 profile charges the host a fixed cost per engine op: the mini engine's whole eager host "
     "cost per op group (Python, torch dispatches, 1-4 kernel launches), the host time of one forward over its op "
     "count; several times a bare torch.add launch. The real H200 runs pay exactly this, so the simulator keeps it; "
     "vLLM replays decode steps as CUDA graphs, where this cost nearly vanishes.")

# %% [markdown]
# ## Rerun the variants here (simulated device)
# Seven variants: three placeholder/scheduling variants (#40143) and four prefix-range strategies
# (#38794), each run eagerly (`cudagraph=none`, like the lab's H200 runs so far) and under CUDA
# graphs (`piecewise`, `full`: vLLM's regime, further down).

# %%
declare_sources("simulated")
trace_dir = tempfile.mkdtemp(prefix="labkit-engine-")
rows, traces = run_notebook_set(size, trace_dir=trace_dir, profile=profile, cudagraph=("none", "piecewise", "full"))
eager_rows = [r for r in rows if r["cudagraph"] == "none"]
fold("Every run's figures, as the bench prints them", format_table(rows, columns=ENGINE_COLUMNS))

# %% [markdown]
# ## Throughput, idle fraction and step time per variant
# The buttons switch the metric (they work in the exported HTML too).

# %%
from labkit.viz.lab.engine import plot_engine_bars
plot_engine_bars(eager_rows, title="Mini engine (eager), 128 requests x 32 images")

# %% [markdown]
# ## #40143 before and after: `tensor` vs `list` placeholders
# Red gaps on the device lane are host-wait idle: the GPU finished and waits for the scheduler.

# %%
from labkit.viz.timeline import plot_timeline_pair
plot_timeline_pair(traces["tensor/loop/none/async"], traces["list/loop/none/async"],
                   labels=("tensor placeholders (before #40143)", "list placeholders (after)"))

# %% [markdown]
# ## #38794 before and after: per-layer copies vs one copy per step
# With `per_layer` the device idles between layers while the host makes one pageable copy per
# sequence; with `per_step` the gaps are gone.

# %%
plot_timeline_pair(traces["fast/cursor/per_layer/async"], traces["fast/cursor/per_step/async"],
                   labels=("per_layer (before #38794)", "per_step (after)"))

# %% [markdown]
# ## Under CUDA graphs: vLLM's regime
# `piecewise` replays the work between attention calls as graphs (attention runs eagerly between
# them); `full` (vLLM's default FULL_AND_PIECEWISE) replays a whole decode step as one graph. A
# replay costs the host one call, so the device step becomes the longer side and only the rest of
# the host's step (scheduler, synchronising copies) shows as idle. `per_layer` cannot be captured
# whole (its copies sit inside attention): its `full` row is its `piecewise` run.

# %%
print(f"host cost per replay: {profile.replay_overhead_ns / 1e3:.1f} us ({profile.replay_origin})")
plot_engine_bars([r for r in rows if r["cudagraph"] == "full"], metric="device_idle_frac",
                 title="Mini engine under CUDA graphs (full), 128 requests x 32 images")

# %% [markdown]
# ## Eager and CUDA graphs side by side
# Eagerly (top) the device lane is mostly gaps whatever the variant; under full CUDA graphs
# (bottom) only the `per_layer` copies and a `tensor` scheduler longer than the device step open
# gaps. The dropdown picks the variant.

# %%
from labkit.viz.lab.engine import plot_mode_timelines
pairs = {v: (traces[v], traces[f"{v}/full"]) for v in ("tensor/loop/none/async", "list/loop/none/async",
         "fast/cursor/none/async", "fast/cursor/per_layer/async", "fast/cursor/per_step/async")
         if v in traces and f"{v}/full" in traces}
plot_mode_timelines(pairs, labels=("eager", "CUDA graphs (full; per_layer falls back to piecewise)"),
                    title="Simulated engine")

# %% [markdown]
# ## The one step model on the mini engine
#
# Each simulated run beside the lab's one step model (`labkit.step_model`, with which notebook 08
# predicts #40143's table): host and device time per step give `max(device, host)` under async
# scheduling and `device + host` under sync. The last column is the simulated step over the
# model's, less one: well above zero where part of the step does not overlap the device (the model's
# `non_overlap`, which the lab does not measure on a real GPU).

# %%
from labkit.engine.recorded import step_model_rows
format_table(step_model_rows(rows))

# %% [markdown]
# ## Measured on a GPU: recorded results
# `labkit bench engine` on a GPU runs the real model (Triton prefix attention, bf16) and records
# step times, TPOT and idle. The bars use the median step (the window-based throughput, the other
# button, keeps the first variant's one-off profiler-start stall).

# %%
cols = ["variant", "median_ns", "tokens_per_s_median", "tokens_per_s_window", "tpot_mean_ms", "stall_ns",
        "device_idle_frac", "host_schedule_ns", "h2d_per_step"]
if gpu:
    from labkit.bench import sig3
    print("GPU idle share of the run: " + ", ".join(f"{r['variant']} {sig3(100 * r['device_idle_frac'])}%"
                                                    for r in gpu_rows if r.get("device_idle_frac") is not None))
fold("The recorded GPU run's rows", format_table(gpu_rows, columns=cols)) if gpu else print(
    "No GPU result recorded yet: run `labkit bench engine --size full --trace-dir ...` on a GPU machine.")

# %%
plot_engine_bars(gpu_rows, title=f"Mini engine on {gpu.machine.get('gpu_name')} (measured-gpu)") if gpu else None

# %% [markdown]
# ## Measured H200 timelines (measured-gpu)
# The H200 run's profiler traces through the same analyzer and timeline: blue bars are real
# kernels, red gaps the GPU waiting for the host; `list` cuts #40143's scheduling gap several-fold.

# %%
(plot_timeline_pair(measured["tensor/loop/none/async"], measured["list/loop/none/async"],
                    labels=("tensor placeholders (before #40143)", "list placeholders (after)"),
                    title="measured-gpu: NVIDIA H200, #40143 before / after")
 if measured else None)

# %% [markdown]
# PR #38794 on the H200: with `per_layer` every attention layer makes 128 synchronising pageable
# copies, so the GPU drains between layers (a step many times longer than its kernels); `per_step`
# makes one copy per step. Zoom into a step with the dropdown.

# %%
(plot_timeline_pair(measured["fast/cursor/per_layer/async"], measured["fast/cursor/per_step/async"],
                    labels=("per_layer (before #38794)", "per_step (after)"),
                    title="measured-gpu: NVIDIA H200, #38794 before / after")
 if measured else None)

# %% [markdown]
# ### Measured H200 under CUDA graphs
# Where the H200 runs were also recorded in graph mode (`scripts/gpu_check.sh` runs the engine at
# this shape eagerly and with `--cudagraph full`), the same side-by-side view.

# %%
from labkit.engine.recorded import engine_traces
rec = engine_traces("h200")
graph_pairs = {v.rsplit("/", 1)[0]: (rec[v.rsplit("/", 1)[0]], p) for v, p in rec.items()
               if v.endswith("/full") and v.rsplit("/", 1)[0] in rec}
if graph_pairs:
    declare_sources("measured-gpu")
(plot_mode_timelines(graph_pairs, title="measured-gpu: NVIDIA H200") if graph_pairs
 else print("No graph-mode engine traces recorded on the H200 yet."))

# %% [markdown]
# ## How far is the simulator from the H200?
# The simulated runs above used the H200 profile (device op times measured on the H200, host
# time of the scheduler and metadata measured here, on this CPU). Step time is the median time
# between outputs; device busy per step comes from the measured traces and the simulated stream.

# %%
from labkit.engine.recorded import sim_vs_measured
from labkit.viz.lab.engine import plot_sim_vs_measured
table = sim_vs_measured(rows, gpu_rows, measured) if gpu else None
fold("Simulated against measured, run by run", format_table(table)) if table is not None else None

# %%
plot_sim_vs_measured(table, title="Simulated (h200 profile) vs measured H200") if table is not None else None

# %% [markdown]
# The device side is close (the busy ratios); the differences are host time. `per_layer` is furthest
# off: thousands of small synchronising copies, each charged the full per-op host cost.

# %% [markdown]
# ## Try it live
# This page's simulated runs, without a kernel: the slider picks the CUDA-graph mode; bars are
# output tokens/s per variant. In JupyterLab the panel below it reruns the simulated engine with
# the variants and request count you pick.

# %%
from labkit.viz.explore import plot_explorer
explore = [dict(r, run=r["variant"].removesuffix("/" + r["cudagraph"]).removesuffix("/async"),
                mode="eager" if r["cudagraph"] == "none" else r["cudagraph"]) for r in rows]
plot_explorer(explore, x="run", y="tokens_per_s_median", slider="mode", names={"mode": "CUDA graphs"},
              start={"mode": "eager"}, unit="tok/s", highlight=("tensor/loop/none",),
              title="Mini engine, 128 requests x 32 images (simulated, this page's runs)", y_title="output tokens/s",
              height=420)

# %%
from labkit.widgets.engine import make_engine_widget
make_engine_widget(profile=profile)
