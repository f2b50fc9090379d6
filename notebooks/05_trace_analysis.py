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
# # 05 · Trace analysis: idle bubbles, their causes, and pageable copies
#
# This notebook analyses a **real GPU profile** (a PyTorch/Kineto trace recorded on an NVIDIA GPU)
# end to end with `labkit.trace`: where each device stream sat idle, *why* (the host had not launched
# the next op yet = **host wait**, a short launch gap = **kernel wait**, or something else), what the
# launching CPU thread was doing during those gaps (annotation, Python frame, CPU op, runtime call),
# and which host-to-device copies were pageable (each one makes the host wait for the stream to drain:
# the bubble behind vLLM PR #38794). The same numbers are checked against Holistic Trace Analysis'
# conventions. Lab traces under `data/traces/` (real or simulated) are used when present.

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %%
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## Pick a trace
# `find_notebook_trace` prefers a lab trace under `data/traces/`, then the shared real traces
# beside the repository, then the small fixtures under `tests/data/`. The source section says
# whether it was recorded on a GPU or simulated.

# %%
from labkit.trace.notebook import find_notebook_trace, trace_sources
path = find_notebook_trace(size)
declare_sources(*trace_sources(path))
print(path)

# %%
from labkit.trace.analyze import analyze_trace
an = analyze_trace(path)
an.source

# %% [markdown]
# ## Idle time per stream, by cause
# `idle_us` is every gap between the stream's first and last op (overlaps clipped);
# the three causes sum to it.

# %%
from labkit.viz.timeline import plot_idle_breakdown, plot_timeline
plot_idle_breakdown(an)

# %%
an.streams

# %% [markdown]
# ## The timeline
# Host threads that launched GPU work on top, device streams below; red bars are host-wait gaps.
# Hover a gap to see the call site the host was in; the dropdown zooms to a `ProfilerStep`.

# %%
plot_timeline(an, max_events=4000 if size == "quick" else 20000)

# %% [markdown]
# ## What the host was doing while the GPU starved
# Device idle time (host-wait gaps only) split by the innermost call site on the launching thread.

# %%
an.host_starvation.head(10)

# %% [markdown]
# ## Host-to-device copies
# Pageable copies stall the host (the runtime call plus any `cudaStreamSynchronize` right after);
# the rule in `labkit.trace.h2d` flags call sites issuing >= 4 pageable copies of <= 64 KiB per step.

# %%
an.h2d[["kind", "bytes", "host_call_us", "sync_name", "sync_us", "host_stall_us", "call_site"]].head(10)

# %%
an.copies.flags

# %% [markdown]
# ## Side by side with HTA's conventions
# HTA sums signed gaps between consecutive events and, with several `ProfilerStep`s, drops the last
# one; `hta_compatible` reproduces those numbers exactly (the tests check them against HTA itself).

# %%
an.hta_compatible

# %% [markdown]
# ## Point the lab at your own vLLM profile
# Start the server with the torch profiler on, run a benchmark with `--profile`, then analyse the
# worker trace (vLLM writes `*.pt.trace.json.gz` per worker into `torch_profiler_dir`):
#
# ```bash
# vllm serve google/gemma-4-E4B-it \
#     --profiler-config '{"profiler": "torch", "torch_profiler_dir": "./vllm_profile"}'
# vllm bench serve --backend openai-chat --endpoint /v1/chat/completions \
#     --model google/gemma-4-E4B-it --dataset-name random-mm --num-prompts 32 --profile
# labkit analyze ./vllm_profile/<worker>.pt.trace.json.gz --steps '^execute_context' \
#     --json profile.json --html profile.html
# ```
#
# vLLM traces have no `ProfilerStep` spans; `--steps` names the per-step annotation to group by
# (e.g. `execute_context_...`). `labkit analyze BEFORE --vs AFTER` compares two runs.

# %%
from labkit.trace.notebook import recorded_bench
recorded_bench()
