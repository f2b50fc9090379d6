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
# # 06 · Machines side by side
#
# Every machine that has run the lab leaves its results in `data/results/<machine>/`. This page
# puts them side by side:
#
# - the calibration (list vs tensor reads, pageable vs pinned copies),
# - the effects of #40143 (`mm_*`) and of #38794 (`h2d_*`, `ranges_*`),
# - the Triton kernel (`attn_bench`), the engine (`engine_*`), the trace analyzer and the vLLM A/B runs.
#
# Each result is compared on one main metric (see `labkit.viz.machines.compare.MAIN_METRICS`). Numbers
# from different machines are only compared within one result, and every number keeps its
# source: **measured-gpu**, **measured-cpu**, **simulated** (a model fed with measured costs,
# not hardware) or **interpreted** (Triton's CPU interpreter: correctness only, never timed).
# Nothing is left out silently: what a machine lacks is listed below and marked on the chart.

# %% tags=["remove-input"]
from labkit.report import answers
answers.compare_gpus()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## What is recorded
# Per result and machine: its source, size and rows, where that machine recorded it (an empty
# cell: not recorded there).

# %%
from labkit.results import load_results
from labkit.viz.machines import appendix, compare
results = load_results()
appendix.results_matrix(results)

# %%
if results:
    declare_sources(*sorted({r.source for r in results}))
else:
    print("No results recorded yet: run `make report` on a machine.")

# %% [markdown]
# ## What is missing
# Beyond the empty cells above: results recorded without any of the compared metrics, and rows
# without a value for the result's main metric (with the metrics they have instead, e.g. engine
# rows recorded before `tokens_per_s_median` existed).

# %%
missing = appendix.missing_metrics(results)
missing if len(missing) else print("Nothing missing: every recorded result has its compared metric.")

# %% [markdown]
# ## Side by side
# Pick a result in the dropdown. Bars are grouped by the row's variant and swept parameters;
# the legend groups machines by source (measured bars solid, simulated hatched, interpreted
# dotted). A red ✕ marks a row a machine recorded without the metric; the line above the
# plot names what the result lacks.

# %%
table = compare.comparison_table(results)
compare.plot_comparison(table)

# %% [markdown]
# The same numbers as tables, one per result behind a click: per machine that recorded it, the
# value and its source (`missing`: recorded without the metric).

# %%
from IPython.display import HTML
HTML(appendix.side_by_side_html(table))

# %% [markdown]
# ## Adding a machine
# 1. Clone the lab on the new machine and run `make report` (add `DEVICE=cuda` to insist on the
#    GPU). It sets itself up, runs every notebook and records results under
#    `data/results/<slug>/`, where the slug names the GPU (`h200`, `a100`, `rtx-4090`) or the CPU.
# 2. Commit `data/results/<slug>/` and rebuild this page: the new machine appears in every chart.
