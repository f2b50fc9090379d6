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
# # 00 · The machine and its unit costs
#
# Every number in this lab depends on the machine it was taken on. This page describes the
# machine (GPU, driver, CUDA, torch, Triton, CPU) and calibrates the two unit costs the lab's
# stories are built from:
#
# - **#40143**: the scheduler read one element of `embeds_cumsum` per image per request per step.
#   When that was a torch tensor, each read was a tensor index (a 0-d tensor comes back) plus
#   `int()`; a Python list makes it a plain list index. How many times dearer is the tensor read?
# - **#38794**: the attention metadata built a small device tensor per sequence on every layer.
#   A small host-to-device copy from pageable memory makes the host wait; from pinned memory it
#   does not. On a GPU this page times both, and the launch of an (almost) empty kernel.
#
# Results are saved as `calibration` in `data/results/<machine>/`; recorded results of other
# machines are shown beside this one.

# %% tags=["remove-input"]
from labkit.report import answers
answers.environment()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## The machine
# The description holds no user, host or environment values; `slug` is the folder its results go to.

# %%
import pandas as pd
from labkit.device import describe_machine, resolve_device
device = resolve_device(device)
pd.Series(describe_machine(device), name="value").to_frame()

# %% [markdown]
# ## Calibrate this machine
# The CPU part reads 1024 elements in a Python loop per sample and reports nanoseconds per element.
# The loop alone is timed too, so the difference is the cost of the read itself.

# %%
from labkit import calibrate
from labkit.results import reuse_or_measure
found, note = reuse_or_measure(["calibration"], lambda: {"calibration": calibrate.measure_and_save(device, size)})
rows, source, saved = found["calibration"].rows, found["calibration"].source, found["calibration"].path
print(note + "\n" if note else "", calibrate.format_table(rows), sep="")
print({k: f"{v:.1f}x" for k, v in calibrate.summary(rows).items()})

# %% [markdown]
# ## This machine beside the recorded ones
# Pick a machine in the dropdown. A tensor element read costs around a microsecond of torch C++
# dispatch; a list read costs tens of nanoseconds at most. The scheduler did thousands of them a step.

# %%
from labkit.results import load_results
from labkit.viz.machines.calibration import plot_cpu_calibration, plot_gpu_calibration
recorded = load_results(name="calibration")
declare_sources(*sorted({r.source for r in recorded} | {source}))
plot_cpu_calibration(recorded)

# %% [markdown]
# On a GPU the pageable copy's host time includes the synchronization it forces: that wait is the
# bubble #38794 removed from every attention layer. Pinned copies enqueue and return.

# %%
gpu_recorded = [r for r in recorded if any(row.get("kind") == "gpu" for row in r.rows)]
if not gpu_recorded:
    print("No GPU calibration recorded yet: run `make report` (or `labkit calibrate`) on a GPU machine "
          "and commit data/results/<machine>/calibration.json.")
plot_gpu_calibration(recorded)
