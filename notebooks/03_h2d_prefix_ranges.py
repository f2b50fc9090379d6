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
# ## Recorded on a GPU: every layer's copies make the host wait
# The run the answer above reads (`labkit bench h2d --size full` on the GPU machine): host time and
# host-to-device copies per decode step at 128 sequences x 32 images, for Gemma 3 4B's 34 layers and
# 27B's 62, per strategy (next sections: what each does, and why the copies wait).

# %%
from labkit.attn.bench_h2d import ledger_demo, run_benchmarks
from labkit.device import resolve_device
from labkit.results import CALIBRATION, H2D_GPU_IDLE, H2D_STEP, H2D_SWEEP, find, find_all
from labkit.viz.lab.h2d import STRATEGY_LABELS, plot_before_after, plot_gpu_idle, plot_sweep
from labkit.viz.notebook import fold
from labkit.bench import format_table
recorded = find_all(H2D_STEP)
step = find(H2D_STEP, source="measured-gpu", results=recorded)
named = lambda rows: [dict(r, strategy=STRATEGY_LABELS.get(r["variant"], r["variant"])) for r in rows]  # noqa: E731
if step is not None:
    declare_sources(step.source)
(format_table(named(step.rows), columns=["strategy", "model", "layers", "median_ns", "h2d_per_step", "sync_per_step",
                                         "speedup_vs_per_layer"], time_unit="ms",
              caption=f"recorded on {step.slug} ({step.source}, {step.size} size), per decode step")
 if step else print("No h2d_step result recorded yet: run `labkit bench h2d --size full`."))

# %% [markdown]
# The same per machine (this one included where it recorded a run); the menu picks the layer count,
# the buttons host time, copies or synchronizing copies per step:

# %%
plot_before_after(recorded)

# %% [markdown]
# ## Recorded on a GPU: the GPU idles between the layers' copies
# `h2d_gpu_idle` comes from a torch.profiler trace of a loop where every layer launches a
# memory-bound matmul (like a decode layer) and a small kernel that reads the prefix-range tensor;
# idle is the sum of gaps between GPU events on the stream, and the profiler's copies match the
# ledger's. The profiler adds its own time to every CUDA call, so a per-layer step of thousands of
# synchronous copies lasts longer profiled than its unprofiled median (the third bar).

# %%
idle = find_all(H2D_GPU_IDLE)
format_table(named([r for g in idle for r in g.rows]), columns=["strategy", "layers", "idle_fraction", "idle_us_per_step",
                                                             "busy_us_per_step", "step_median_ns", "counts_match"],
             time_unit="ms", caption="recorded on " + ", ".join(f"{g.slug} ({g.source}, {g.size} size)" for g in idle))

# %%
plot_gpu_idle(idle)

# %% [markdown]
# ## Recorded on a GPU: a pageable copy makes the host wait, a pinned one does not
# One small copy, timed alone (`labkit calibrate` on a GPU): from pageable memory the host time
# includes the synchronization it forces, the wait #38794 removed from every attention layer;
# pinned copies enqueue and return.

# %%
from labkit.viz.machines.calibration import plot_gpu_calibration
plot_gpu_calibration(find_all(CALIBRATION))

# %% [markdown]
# ## Why one tiny `torch.tensor(..., device="cuda")` stalls the pipeline
#
# `torch.tensor(python_list, device="cuda")` first builds the tensor in ordinary (pageable) host
# memory and then copies it to the GPU. The GPU's copy engine can only read pinned memory, so CUDA
# stages a pageable copy through a pinned buffer and the host **waits** until the copy is done, which
# means until everything queued before it on the stream has run. While the host waits it launches
# nothing; once the copy finishes the queue is empty, and the GPU idles until the host catches up.
# Before #38794 this happened once per sequence (+1 for the nested tensor's row lengths) on every
# layer: 128 sequences x 34 layers is 34 x 129 = 4,386 synchronizing copies per decode step.
#
# The ledger records every copy each strategy makes; below, three decode steps of a small batch
# (4 sequences, one without images, 3 layers). On a CPU nothing crosses a bus, so each record is the
# copy the same code makes on a GPU (`target = cpu-equivalent`).

# %%
device = resolve_device(device)
fold("the ledger of a small batch: every copy of three decode steps, per strategy",
     format_table([{k: v for k, v in r.items() if k != "device"} for r in ledger_demo(device)], max_rows=50))

# %% [markdown]
# ## The four strategies: one copy per layer and sequence, one per step, or none
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
# Host time grows with sequences x layers for `per_layer`, and barely at all for the others
# (recorded sweeps; the menu picks the layer count):

# %%
plot_sweep(find_all(H2D_SWEEP))

# %% [markdown]
# ## Measured here, now, quick
# This run measures the same step on the machine it runs on, in quick size (fewer repeats; on a CPU
# each copy is the one a GPU would make), and files it as `h2d_step_quick`: its numbers are this
# run's, not the recorded ones above.

# %%
from labkit.results import reuse_or_measure
results, note = reuse_or_measure([H2D_STEP], lambda: run_benchmarks(device, size, sweep=False))
here = results[H2D_STEP]
declare_sources(here.source)
format_table(named(here.rows), columns=["strategy", "layers", "median_ns", "h2d_per_step", "sync_per_step",
                                        "speedup_vs_per_layer"], time_unit="ms",
             caption=f"this run on {here.slug} ({here.source}, {here.size} size), per decode step")

# %% [markdown]
# ## Try it live
# The recorded sweeps, without a kernel: the slider picks the sequences in the batch, the menu the
# machine and layer count; bars are host ms per decode step per strategy (log scale). In JupyterLab
# the panel below it measures any point on your machine.

# %%
from labkit.viz.explore import plot_explorer
sweep = [dict(r, strategy=STRATEGY_LABELS[r["variant"]], ms=r["median_ns"] / 1e6, run=f"{g.slug} ({g.source}), {r['layers']} layers")
         for g in find_all(H2D_SWEEP) for r in g.rows]
plot_explorer(sweep, x="strategy", y="ms", slider="num_seqs", menu="run", names={"num_seqs": "sequences", "run": "recorded"},
              start={"num_seqs": 128}, title="Host time per decode step, 32 images per sequence (recorded sweeps)",
              y_title="host ms per step", unit="ms", log_y=True, highlight=(STRATEGY_LABELS["per_layer"],))

# %%
from labkit.widgets.h2d import make_h2d_widget
make_h2d_widget(device)
