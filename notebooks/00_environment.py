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
#   does not. On a GPU this page times both, and the launch of an (almost) empty kernel (the
#   recorded copies are drawn on page 03).
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
# ## Recorded on each machine: a tensor read costs far more than a list read
# The calibration every machine records (`labkit calibrate --size full`), the run the answer above
# reads. The scheduler before #40143 paid the tensor read 4,096 times a decode step (128 requests
# x 32 images); the list read is what #40143 pays instead.

# %%
from labkit.results import CALIBRATION, find_all
from labkit.report.answers.host import calibration_rows
from labkit.bench import format_table
recorded = find_all(CALIBRATION)
declare_sources(*sorted({r.source for r in recorded}))
format_table(calibration_rows(recorded), rename={"tensor_index_int_ns": "tensor index + int()", "list_index_ns": "list index"})

# %% [markdown]
# Per machine, the read itself and the loop around it (the difference is the cost of the read;
# the menu picks a machine):

# %%
from labkit.viz.machines.calibration import plot_cpu_calibration
plot_cpu_calibration(recorded)

# %% [markdown]
# ## Measured here, now, quick
# This run calibrates the machine it runs on, in quick size (fewer repeats, and whatever else the
# machine is doing now), and files the result as `calibration_quick`: its numbers are this run's,
# not the recorded ones above.

# %%
from labkit import calibrate
from labkit.device import describe_machine, resolve_device
from labkit.results import reuse_or_measure
from labkit.viz.machines.calibration import CPU_LABELS
from labkit.viz.notebook import fold
device = resolve_device(device)
found, note = reuse_or_measure([CALIBRATION], lambda: {CALIBRATION: calibrate.measure_and_save(device, size)})
here = found[CALIBRATION]
declare_sources(here.source)
format_table([dict(r, read=CPU_LABELS[r["variant"]]) for r in here.rows if r["variant"] in CPU_LABELS],
             columns=["read", "median_ns", "p20_ns", "p80_ns"], time_unit="ns",
             caption=f"this run on {here.slug} ({here.source}, {here.size} size), per element read")

# %%
fold("this machine, as the results store names it",
     format_table([{"what": k, "value": v} for k, v in describe_machine(device).items() if v is not None]))
