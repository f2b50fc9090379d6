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
# On a CPU the engine runs on a **simulated** GPU stream: host time is real, device durations come
# from a recorded GPU profile (or a parametric one, labelled so). Everything simulated says so.

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %%
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %%
import tempfile
from labkit.engine.bench import run_notebook_set, print_table
from labkit.engine.bench import default_profile_name
from labkit.engine.profiles import load_profile
profile = load_profile(default_profile_name())
print(profile.label())

# %% [markdown]
# ## Rerun the variants here (simulated device)
# Seven runs: three placeholder/scheduling variants (#40143) and four prefix-range strategies (#38794).

# %%
declare_sources("simulated")
trace_dir = tempfile.mkdtemp(prefix="labkit-engine-")
rows, traces = run_notebook_set(size, trace_dir=trace_dir, profile=profile)
print_table(rows)

# %% [markdown]
# ## Throughput, idle fraction and step time per variant
# The buttons switch the metric (they work in the exported HTML too).

# %%
from labkit.viz.engine import plot_engine_bars, plot_timeline_choice
plot_engine_bars(rows, title="Mini engine, 128 requests x 32 images")

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
# ## Every run, one dropdown
# All seven timelines are precomputed into one figure; the dropdown picks a run.

# %%
plot_timeline_choice(traces, title="Engine timelines (simulated)")

# %% [markdown]
# ## Recorded GPU results
# `labkit bench engine` on a GPU runs the real model (Triton prefix attention, bf16) and records
# tokens/s, step time and idle from its profiler trace under `data/results/<gpu>/engine.json`.

# %%
from labkit.results import load_results
gpu = [r for r in load_results(name="engine") if r.source == "measured-gpu"]
if gpu:
    declare_sources("measured-gpu")
    print(f"GPU result: {gpu[0].machine.get('gpu_name')} ({gpu[0].created})")
    fig = plot_engine_bars(gpu[0].rows, title=f"Mini engine on {gpu[0].machine.get('gpu_name')}")
else:
    fig = None
    print("No GPU result recorded yet: run `labkit bench engine --quick` on a GPU machine.")
fig

# %% [markdown]
# ## Try it live
# Pick variants and the number of requests, then run the simulated engine again (needs a running
# kernel; the exported page shows the controls only).

# %%
from labkit.widgets.engine import make_engine_widget
make_engine_widget(profile=profile)
