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
# # 01 · Placeholder ranges and the multimodal scheduler (vLLM #40143)
#
# Every engine step, vLLM's scheduler asks each running request which of its images the next
# tokens need encoded. Each image's position in the prompt is a `PlaceholderRange`, and the question
# starts with `get_num_embeds()`, asked of **every image of every running request**, even in a plain
# decode step where all images are long since in the KV cache. With 128 requests x 32 images that is
# 4,096 calls per step. Before #40143 each call indexed a cached CPU *tensor* and converted the 0-d
# result with `int()`; #40143 cached a Python *list* instead (+27% output tokens/s on Gemma-4-E4B).
#
# This page measures that change on the machine running it, goes past it (a cursor that skips the
# images already in the KV cache, and a placeholder class that precomputes everything), checks that
# every strategy makes identical scheduling decisions. Notebook 08 takes the saving to the
# published table.

# %% tags=["remove-input"]
from labkit.report import answers
answers.placeholder_scheduler()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## The change
#
# | | before #40143 (`"tensor"`, vLLM 0.19.1) | #40143 (`"list"`, vLLM 0.20.0) | this lab (`"fast"`) |
# |---|---|---|---|
# | `embeds_cumsum` | cached `torch.Tensor` | cached `list[int]` | `list[int]`, built at construction |
# | `get_num_embeds()` | `int(cumsum[-1])`: a 0-d tensor made and freed per call | `cumsum[-1]` | one slot read |
# | empty mask | `IndexError` | 0 | 0 |
# | `get_embeds_indices_in_range(s, 0)` | wraps to `(…, total)` | `(…, 0)` | `(…, 0)` |
# | `extract_embeds_range()` | torch ops per call | torch ops per call | cached tuple, copied |
#
# Scheduling strategies decide where the scan over a request's images starts: `loop` (vLLM 0.20.0:
# all of them), `window` (vLLM 0.33: bisect to the first image not yet in the KV cache) and `cursor`
# (this lab: a per-request cursor, rewound on preemption). All make the same decisions; the tests
# check that on hundreds of random workloads with chunked prefill, preemption, eviction and
# duplicate images.
#
# The three variants really are different types with the same interface:

# %%
from labkit.mm.placeholder import PLACEHOLDER_VARIANTS
from labkit.mm.workload import placeholder_layout
length, mask = placeholder_layout("gemma", 256)  # 258 tokens: begin marker, 256 soft tokens, end marker
{v: (type(cls(0, length, mask).embeds_cumsum).__name__, cls(0, length, mask).get_num_embeds())
 for v, cls in PLACEHOLDER_VARIANTS.items()}

# %% [markdown]
# ## Measure on this machine
#
# Host time only (the scheduler runs on the CPU whatever the accelerator). `quick` uses fewer
# repeats, a coarse sweep and a small workload; its results are filed as `*_quick` so they never
# overwrite full recordings made with `labkit bench mm --size full --sweep`.

# %%
from labkit.device import resolve_device
from labkit.mm.bench_mm import run_benchmarks
from labkit.results import (MM_DECODE_STEP, MM_GET_NUM_EMBEDS, MM_SWEEP, MM_WORKLOAD, find_all, provenance,
                            results_rows, reuse_or_measure)
from labkit.timing import unit_cost_note
device = resolve_device(device)
results, note = reuse_or_measure([MM_GET_NUM_EMBEDS, MM_DECODE_STEP, MM_SWEEP, MM_WORKLOAD],
                                 lambda: run_benchmarks(size, sweep=True))
print(note)
declare_sources(*sorted({r.source for r in results.values()}))

# %% [markdown]
# ### One call
# Per-call cost of each placeholder method (log scale). The tensor variant pays the torch
# dispatcher on every `get_num_embeds()`; `extract_embeds_range()` still runs torch ops
# after #40143 (the next bubble, see notebook 07).

# %%
from labkit.viz.lab.mm import plot_placeholder_calls, plot_decode_step, plot_sweep, plot_before_after, plot_workload
plot_placeholder_calls(results[MM_GET_NUM_EMBEDS].rows)

# %% [markdown]
# ### One decode step at the PR's shape
# Encoder scheduling of one steady decode step, 128 requests x 32 images, this run:

# %%
from labkit.bench import format_table
format_table(results[MM_DECODE_STEP].rows, columns=["combo", "median_ns", "p20_ns", "p80_ns", "per_image_ns",
                                                      "speedup_vs_before", "speedup_vs_pr"])

# %% [markdown]
# and as recorded on every machine (full runs of `labkit bench mm`; GPU machines record the host
# time of their own CPU):

# %%
from labkit.bench import duration, sig3
recorded = find_all(MM_DECODE_STEP)
print(*(provenance(r) for r in recorded), unit_cost_note(recorded), sep="\n")
format_table([{"machine": r["machine"], "combo": r["combo"], "per step": duration(r["median_ns"]),
               "vs tensor+loop": f"{sig3(r['speedup_vs_before'])}x", "vs list+loop (#40143)": f"{sig3(r['speedup_vs_pr'])}x"}
              for r in results_rows(recorded)])

# %%
plot_decode_step(results_rows(recorded) or results[MM_DECODE_STEP].rows)

# %% [markdown]
# ## Before / after, and past #40143
# How the step's cost grows with images per request at 128 requests. The buttons switch between
# before vs #40143 and #40143 vs this lab's strategies (they work in the exported HTML too). The
# `loop` lines grow with requests x images; `cursor` stays flat in images, `window` grows with their
# logarithm.

# %%
recorded = find_all(MM_SWEEP)
print(*(provenance(r) for r in recorded), unit_cost_note(recorded), sep="\n")
sweep_rows = results_rows(recorded) or results[MM_SWEEP].rows
plot_before_after(sweep_rows, "images")

# %%
plot_sweep(sweep_rows, "requests")

# %% [markdown]
# ## The whole scheduler
# The step scheduler (running requests, admissions, encoder cache, KV blocks) over a full workload
# (`quick`: 32 requests x 8 images; `full`: the PR's 128 x 32 with 256 output tokens). Prefill steps
# also encode images; decode steps are where the per-image scan used to dominate. Strategy only
# changes host time; `identical decisions` compares every plan of every step.

# %%
plot_workload(results[MM_WORKLOAD].rows)

# %% [markdown]
# ## From the scheduler's saving to the published gain
#
# The saving above is the scheduler's own loop, timed alone. How much of vLLM's whole engine step
# it is, and how that step becomes #40143's published table under async scheduling, is notebook
# 08's answer: there the saving is measured inside vLLM's real engine and set against a roofline of
# the device step, with nothing fitted.

# %% [markdown]
# ## Try it live
# The recorded sweeps, without a kernel: the menu picks what varies (requests at 32 images each, or
# images per request at 128 requests), the slider its value; bars are host ms of one decode step's
# encoder scheduling per placeholder and strategy (log scale). In JupyterLab the panel below it
# measures any shape on your machine.

# %%
from labkit.viz.explore import plot_explorer
from labkit.viz.lab.mm import COMBO_LABELS
explore = [dict(r, placeholder=COMBO_LABELS.get(r["combo"], r["combo"]), ms=r["median_ns"] / 1e6,
                value=r["num_requests"] if r["sweep"] == "requests" else r["images_per_request"],
                varies=f"{'requests, 32 images each' if r['sweep'] == 'requests' else 'images per request, 128 requests'}"
                       f" ({r.get('machine', 'this run')})") for r in sweep_rows]
plot_explorer(explore, x="placeholder", y="ms", slider="value", menu="varies", names={"value": "value", "varies": "varies"},
              start={"value": 128}, unit="ms", log_y=True, highlight=(COMBO_LABELS["tensor+loop"],),
              title="Encoder scheduling per decode step (recorded sweeps, host time)", y_title="host ms per step")

# %%
from labkit.widgets.mm import make_mm_widget
make_mm_widget()
