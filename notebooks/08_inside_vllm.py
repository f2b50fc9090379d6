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
from labkit.results import PR_TABLE, VLLM_AB, VLLM_INPUT, VLLM_STEP, find, find_all
from labkit.timing import unit_cost_note
from labkit.viz.vllm import pr_table
pr = find(PR_TABLE, size="full")
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

# %%
from labkit.viz.notebook import fold
fold("The H200's device step, part by part (the roofline, simulated; each efficiency measured on the lab's H200 "
     "or carried over from one that was)", format_table(pr_table.device_parts_frame("h200")))

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
censuses = find_all(VLLM_STEP)  # one per machine that recorded it, this machine's first
inputs = find_all(VLLM_INPUT)
census = censuses[0] if censuses else None
ab_runs = find_all(VLLM_AB)

# %% [markdown]
# ## The evidence: every phase of a real vLLM step
#
# vLLM's CPU build runs the real engine step; `labkit bench vllm-step` times each phase of each
# decode step per variant and shape (`schedule`, `prepare_inputs`, `forward`: the CPU's own model,
# never a GPU figure, `sample`, `update_from_output`, `process_outputs`, `other`), and again with
# the forward taken off the host: the host as a GPU server pays it, the chain the answer reads
# (every phase but `process_outputs`, which the API server pays). A menu switches machines.

# %%
from labkit.report.findings import census_saving
from labkit.viz.tables import sig3
saving = census_saving(census) if census is not None else None
if saving:
    print(f"At 128 x 32, forward off the host, {census.slug}: {sig3(saving['before_ms'])} ms a step with baseline, "
          f"{sig3(saving['after_ms'])} ms with pr40143: #40143 saves {sig3(saving['saving_ms'])} ms a step.")
print(unit_cost_note(censuses))
inside_vllm.plot_phase_census(censuses)

# %%
from labkit.viz.vllm.census_checks import checks_view
by_phase = inside_vllm.saving_by_phase(census, after="pr40143")
table = inside_vllm.census_table(census)
fold("The census in numbers: every phase per point, its checks, and where the saving lies phase by phase",
     *([format_table(table)] if not table.empty else []), checks_view(census),
     *([format_table(by_phase)] if not by_phase.empty else []))

# %% [markdown]
# ## What the lab measures of the intake
#
# vLLM times the frontend's stages per image itself (`enable_mm_processor_stats`): JPEG decode,
# Gemma 4's processor, hashing, the processor cache, the placeholder expansion. The simulation
# takes the image decode and the whole `add_request` from here, scaled by the one factor inferred
# from the published mean TTFT.

# %%
inside_vllm.plot_input_stages(inputs)

# %% [markdown]
# ## The A/B in vLLM's own server, on this CPU
#
# `scripts/vllm_ab.sh` serves the lab's made Gemma 4 with vLLM's CPU build once per variant and
# repeat, in alternating order, and measures it with `vllm bench serve --dataset-name random-mm`;
# the mark on baseline's column is the lab's prediction for it: merged's median plus what the lab's own
# figure for the same loop (`mm_decode_step`) adds at this shape. On the
# CPU build the forward runs on the host and async scheduling is off, so every microsecond the
# scheduler adds lands on the step; its shape and arms are its own, not the PR's.

# %%
ab_view.plot_ab(ab_runs)

# %%
ab_table = ab_view.summary_table(ab_runs)
fold("The A/B's runs per variant", format_table(ab_table)) if not ab_table.empty else print(ab_view.NO_RESULT)

# %% [markdown]
# ## vLLM's own server, request by request and step by step
#
# `scripts/vllm_ab.sh --timeline` runs the same server at #40143's image size and count per request
# (1024x1536, 32 images) and keeps every request's send, first token, token gaps and finish from
# `vllm bench serve --save-detailed`, and every engine step vLLM logs
# (`--enable-logging-iteration-details`). The menu picks the arm and shape.

# %%
from labkit.results import VLLM_SERVE_TIMELINE
timeline = find(VLLM_SERVE_TIMELINE)
inside_vllm.plot_serve_timeline(timeline)

# %% [markdown]
# Each run in numbers: how far apart the requests got their first tokens and how far apart they
# finished; the client's mean gap between tokens; the engine's median step with a prefill chunk in
# it and without one.

# %%
summary = inside_vllm.timeline_summary(timeline)
format_table(summary) if not summary.empty else print(inside_vllm.NO_TIMELINE)

# %% [markdown]
# ## The next host costs to hunt
#
# With the fix in, what is left on the host of a decode step at 128 x 32, largest first (the
# forward left out: on a GPU it is device work).

# %%
inside_vllm.plot_next_costs(census) if census is not None else print(inside_vllm.NO_STEP)

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
