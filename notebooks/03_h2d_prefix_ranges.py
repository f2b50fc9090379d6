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
# # 03 · Prefix ranges and host-to-device copies (vLLM #38794)
#
# Prefix-LM multimodal models (Gemma 3 and friends) let the tokens of one image attend to each
# other in both directions. vLLM's Triton attention kernel learns where the images are from a small
# int32 tensor `(num_seqs, max_ranges, 2)` of inclusive `(start, end)` positions. Before #38794 a
# metadata *property* rebuilt that tensor on **every attention layer** of every step: one tiny
# device tensor per sequence, then a nested-tensor pad. This page counts and times those copies for
# four ways of handing the tensor to the layers, and shows recorded GPU idle time where a GPU run
# exists.

# %% tags=["remove-input"]
from labkit.report import answers
answers.h2d_prefix_ranges()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## Why one tiny `torch.tensor(..., device="cuda")` stalls the pipeline
#
# `torch.tensor(python_list, device="cuda")` first builds the tensor in ordinary (pageable) host
# memory and then copies it to the GPU. The GPU's copy engine can only read pinned memory, so CUDA
# stages a pageable copy through a pinned buffer and the host **waits** until the copy is done, which
# means until everything queued before it on the stream has run. While the host waits it launches
# nothing; once the copy finishes the queue is empty, and the GPU idles until the host catches up.
# Before #38794 this happened `num_seqs` (+1 for the nested tensor's row lengths) times on every
# layer: 128 sequences x 62 layers is ~8,000 synchronizing copies per decode step.
#
# The ledger below records every copy each strategy makes over three decode steps of a small batch
# (4 sequences, one without images, 3 layers). On a CPU nothing crosses a bus, so each record is the
# copy the same code makes on a GPU (`target = cpu-equivalent`).

# %%
from labkit.device import resolve_device
from labkit.attn.bench_h2d import ledger_demo, run_benchmarks
from labkit.viz.tables import format_table
device = resolve_device(device)
format_table([{k: v for k, v in r.items() if k != "device"} for r in ledger_demo(device)])

# %% [markdown]
# ## The four strategies
#
# | strategy | what it does | H2D copies per step |
# |---|---|---|
# | `per_layer` | before #38794: the property, on every layer | layers x (sequences + 1), all synchronizing |
# | `per_step` | #38794: pad once on the host, one copy, share the tensor | 1, synchronizing |
# | `pinned` | #41434: pinned staging + `non_blocking=True` | 1, asynchronous |
# | `cached` | this lab: upload only when the batch's ranges change | 0 in steady decode |
#
# `cached` compares the rows with a snapshot of the last upload (exact; a pointer compare per range
# when the range tuples are reused, a value compare when they are rebuilt from scratch) and builds a
# *fresh* device tensor on change, so no kernel can read a tensor that a later upload overwrites.
#
# Now measure host time per decode step on this machine at the PR's scale (128 sequences x 32
# images) for Gemma 3 layer counts (4B: 34, 27B: 62 layers), and a sweep over batch size. Results go
# to the results store.

# %%
from labkit.results import load_results, reuse_or_measure
results, note = reuse_or_measure(["h2d_step", "h2d_sweep"], lambda: run_benchmarks(device, size))
print(note)
declare_sources(*sorted({r.source for r in load_results(name="h2d_step")} | {results["h2d_step"].source}))
format_table(results["h2d_step"].rows, columns=["variant", "layers", "model", "median_ns", "h2d_per_step",
                                               "sync_per_step", "speedup_vs_per_layer"])

# %% [markdown]
# ## Before and after
# Recorded results of every machine (this one included). The dropdown picks the layer count, the
# buttons switch between host time, copies and synchronizing copies per step.

# %%
from labkit.viz.lab.h2d import plot_before_after, plot_sweep, plot_gpu_idle
plot_before_after(load_results(name="h2d_step"))

# %% [markdown]
# Host time grows with sequences x layers for `per_layer`, and barely at all for the others.

# %%
plot_sweep(load_results(name="h2d_sweep"))

# %% [markdown]
# ## On a GPU: idle time between layers
# `h2d_gpu_idle` comes from a torch.profiler trace of a loop where every layer launches a
# memory-bound matmul (like a decode layer) and a small kernel that reads the prefix-range tensor;
# idle is the sum of gaps between GPU events on the stream. The profiler's memcpy counts are checked
# against the ledger (`counts_match`). Idle is read from the profiled steps, so it is drawn beside
# the profiled step (busy + idle) it belongs to: the profiler adds its own time to every CUDA call,
# and a per-layer step of thousands of synchronous copies lasts longer profiled than its unprofiled
# median (the third bar), which is why its idle time can exceed that median.

# %%
gpu = load_results(name="h2d_gpu_idle")
print(f"{len(gpu)} recorded GPU result(s)" if gpu else "No GPU result recorded yet: run `labkit bench h2d --size full` on a CUDA machine.")
plot_gpu_idle(gpu)

# %% [markdown]
# ## The next bubble: building the ranges themselves
# Both vLLM versions still rebuild every request's image ranges on every step, calling the uncached
# `extract_embeds_range()` (a handful of torch ops) for every image of every request. The lab's
# `cached` builder computes each placeholder's ranges once; `incremental` keeps each request's list
# and only touches requests that join or leave. The pipeline rows add the prefix-range tensor for
# every layer: vLLM 0.33 (`v033+pinned`) against the lab (`incremental+cached`).

# %%
from labkit.attn import bench_ranges
ranges, note = reuse_or_measure(["ranges_step"], lambda: bench_ranges.run_benchmarks(device, size))
print(note)
format_table(ranges["ranges_step"].rows, columns=["kind", "variant", "median_ns", "h2d_per_step", "speedup_vs_v033",
                                                  "speedup_vs_v033_pinned"])

# %%
from labkit.viz.lab.h2d import plot_ranges_sweep
plot_ranges_sweep(load_results(name="ranges_sweep"))

# %% [markdown]
# ## Try it live
# In JupyterLab, pick a point and measure it on this machine (the widget needs a live kernel).

# %%
from labkit.widgets.h2d import make_h2d_widget
make_h2d_widget(device)
