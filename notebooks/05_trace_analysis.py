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
# This notebook analyses **real GPU profiles** end to end with `labkit.trace`: where each device
# stream sat idle, *why* (the host had not launched the next op yet = **host wait**, a short launch
# gap = **kernel wait**, or something else), what the launching CPU thread was doing during those
# gaps (annotation, Python frame, CPU op, runtime call), and which host-to-device copies were
# pageable (each one makes the host wait for the stream to drain: the bubble behind vLLM PR #38794).
#
# The main example is the lab's own engine profiled with `torch.profiler` on an **NVIDIA H200**
# (`data/traces/h200/<variant>/`, measured-gpu): #38794's `per_layer` prefix ranges against
# `per_step`, and #40143's slow `tensor` placeholders. A second example is a real trace from
# outside the lab (a fixture under `tests/data/`), and the last section shows how to point the
# analyzer at your own vLLM profile.

# %% tags=["remove-input"]
from labkit.report import answers
from labkit.viz.trace_notebook import lab_analyses
lab = lab_analyses()
answers.trace_analysis(lab)

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## Per step, before and after #38794: the H200 traces the answer reads
# One trace per engine variant, recorded on the GPU machine (the analysis itself runs on this
# host; only the traces are GPU measurements). These are the mini engine's Gemma-4-E4B-like
# model, 42 layers: per layer it makes one copy per sequence plus one (128 + 1), 42 x 129 = 5,418
# copies per step, and a few more for the step's own inputs. Page 03 counts the same copies for
# Gemma 3 4B's 34 layers (34 x 129 = 4,386).

# %%
from labkit.report.answers.gpu import trace_per_step
from labkit.viz.trace_notebook import PER_LAYER, PER_STEP, TENSOR_LOOP, analyses_sources, missing_lab_traces
from labkit.viz.notebook import fold
from labkit.bench import format_table
declare_sources(*analyses_sources(*lab.values()))
max_bars = 3000 if size == "quick" else 20000  # bars drawn per timeline; the analysis uses every event
(format_table(trace_per_step(lab), caption="per step, from the traces") if not missing_lab_traces(lab)
 else print(missing_lab_traces(lab)))

# %%
format_table([{"variant": v, "GPU": an.source().get("gpu"), "device_ops": an.summary()["device_ops_count"],
               "steps": an.summary()["steps_count"]} for v, an in lab.items()], caption="the traces")

# %% [markdown]
# ## #38794 on the H200: `per_layer` against `per_step`
# `per_layer` builds the prefix-range tensor inside every attention layer: one small pageable
# host-to-device copy per sequence per layer, each followed by a wait for the stream. `per_step`
# builds it once per step and shares it. `diff_analyses` lines the two runs up (after minus
# before: busy and idle time by cause in us, copies, host stall).

# %%
from labkit.trace.analysis.diff import diff_analyses
d = diff_analyses(lab[PER_LAYER], lab[PER_STEP]) if PER_LAYER in lab and PER_STEP in lab else None
fold("the two runs lined up, as `labkit analyze --vs` prints them", "\n".join(d.summary_lines()),
     format_table(d.copies)) if d else print("per_layer / per_step traces not recorded")

# %% [markdown]
# The two timelines stacked (time from each trace's start). Red bars are host-wait gaps: the GPU
# idles while the host issues the next pageable copy. Zoom with the mouse; hover a gap for the
# call site.

# %%
from labkit.viz.timeline import plot_timeline_pair
(plot_timeline_pair(lab[PER_LAYER], lab[PER_STEP], labels=("per_layer (before #38794)", "per_step (after)"),
                    max_events=max_bars, title="measured-gpu: NVIDIA H200, #38794 per_layer / per_step")
 if d else None)

# %% [markdown]
# ## The flagged pageable copies of `per_layer`
# The rule in `labkit.trace.analysis.device.h2d` flags a call site issuing >= 4 pageable host-to-device copies of
# <= 64 KiB in one step. Every flag should name a layer's forward (`forward/layer_N`).

# %%
from labkit.viz.trace_notebook import flags_table
format_table(flags_table(lab[PER_LAYER])) if PER_LAYER in lab else None

# %%
fold("the copies per call site", format_table(lab[PER_LAYER].copies().by_call_site)) if PER_LAYER in lab else None

# %% [markdown]
# ## #40143 on the H200: what the host did while the GPU starved
# With `tensor` placeholders the scheduler reads one element of a torch tensor per image per
# request per step. Device idle time in host-wait gaps, split by the innermost call site on the
# launching thread (`share` of all host-wait idle):

# %%
format_table(lab[TENSOR_LOOP].call_sites()) if TENSOR_LOOP in lab else None

# %%
from labkit.viz.timeline import plot_idle_breakdown
plot_idle_breakdown({labels: lab[v] for v, labels in ((TENSOR_LOOP, "tensor/loop (before #40143)"),
                     (PER_LAYER, "per_layer (before #38794)"), (PER_STEP, "per_step (after #38794)")) if v in lab})

# %% [markdown]
# ## A second real trace, from outside the lab
# The same analysis on a public PyTorch profile recorded on a Quadro GP100 (from the Holistic
# Trace Analysis test data, provenance in `tests/data/README.md`; with `size = "full"`: a vLLM
# serving trace recorded on a GB10). The GP100 trace has `ProfilerStep` spans, so the dropdown
# zooms to each step, and its pageable copies are each followed by a `cudaStreamSynchronize`.

# %%
from labkit.trace import Trace
from labkit.viz.trace_notebook import fixture_trace
ex = Trace(fixture_trace(size))
fold("where the trace comes from", format_table([{"field": k, "value": v} for k, v in ex.source().items()]))

# %%
from labkit.viz.timeline import plot_timeline
plot_timeline(ex, max_events=max_bars, title=f"a public PyTorch profile, {ex.source().get('gpu') or 'its GPU'} (measured-gpu)")

# %%
format_table(ex.idle())

# %%
fold("every host-to-device copy of the trace", format_table(ex.h2d(), columns=["kind", "bytes", "host_call_us", "sync_name",
                                                                          "sync_us", "host_stall_us", "call_site"]))

# %% [markdown]
# ### Side by side with HTA's conventions
# HTA sums signed gaps between consecutive events and, with several `ProfilerStep`s, drops the last
# one; `hta_compatible` reproduces those numbers exactly (the tests check them against HTA itself).

# %%
fold("the numbers with HTA's conventions", format_table(ex.hta_compatible()))

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
# (e.g. `execute_context_...`). `labkit analyze BEFORE --vs AFTER` compares two runs; in Python,
# `Trace(path)` (each table on first use: `.idle()`, `.bubbles()`, `.call_sites()`, `.copies()`, `.steps()`)
# and `diff_analyses(before, after)` as above.

# %% [markdown]
# ## How fast the analyzer is (measured-cpu)
# `labkit bench trace` measures, in one run on the same files, MB/s of trace JSON and peak memory
# over the JSON's size of `labkit analyze` at `--jobs 1` and `--jobs 2` (one file read as byte
# ranges on two processes) and of HTA's idle breakdown: on traces built from a real one's steps
# (100 MB and 1 GB at full size) and on real traces, with the machine's load beside them. These
# are host (CPU) timings, not GPU measurements; the table is the recorded result.

# %%
from labkit.viz.trace_notebook import bench_table
declare_sources("measured-cpu")
bench_table()

# %% [markdown]
# ## What would a fix buy? `labkit whatif`
# `labkit whatif TRACE --scale NAME=FACTOR --unsync NAME` replays a trace's dependency graph
# (host threads in order, each device op after its launch and its stream predecessor, CUDA-graph
# replays as units, synchronizing calls holding their thread until the device gets there) with
# some host spans made cheaper or some synchronizing copies made non-blocking, and predicts the
# step time. Every answer carries a self-check: the unchanged replay must reproduce the measured
# steps (within 2%). Here: the H200 `tensor` run with its scheduler ten times cheaper.

# %%
from labkit.engine.recorded import engine_traces
from labkit.trace.whatif.predict import parse_changes, predict
tensor_run = engine_traces("h200").get("tensor/loop/none/async")
w = predict(tensor_run, parse_changes(["^schedule$=0.1"])) if tensor_run else None
(fold("the what-if's answer, as `labkit whatif` prints it", "\n".join(w.summary_lines())) if w
 else print("the H200 tensor run's trace is not recorded"))

# %% [markdown]
# The what-if is checked against measured A/B pairs of the lab's engine (each pair differs in one
# thing; the first run's trace must predict the second run's step): on the H200's recorded runs and
# on the simulated device under a fixed host-cost model, in `tests/test_whatif_h200.py` and
# `tests/test_whatif.py`.

# %% [markdown]
# ### A host-only trace: vLLM's CPU engine
# vLLM's CPU build writes traces without a device: its steps are the model runner's annotations on
# one thread, scheduling and output processing run between them, and a step's time is the host's
# step-to-step time. `--suggest` names the scheduler's placeholder reads first (the pre-#40143
# `get_num_embeds` frames of vLLM 0.20's loop) and ranks the other host spans by the time between
# steps they take; `predict_host_only` is the same what-if from Python. Here on a pair recorded back
# to back in one process (16 requests x 15 images, `tests/data/README.md`): the baseline with its
# reads removed beside the merged run as measured. On a CPU the forward dominates the step, so the
# reads are a small part of it.

# %%
from labkit.trace.whatif.host_only import host_only_rows, predict_host_only
from labkit.viz.trace_notebook import FIXTURES
vllm_cpu = [FIXTURES / f"vllm-cpu-gemma4-{v}-16x15.trimmed.pt.trace.json.gz" for v in ("baseline", "merged")]
display(fold("what `--suggest` names first", "\n".join(predict(vllm_cpu[0], suggest=True).summary_lines()[-12:])))
format_table(host_only_rows(predict_host_only(vllm_cpu[0]), predict(vllm_cpu[1]).measured["step_ms_median"]))
