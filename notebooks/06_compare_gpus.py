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
# Each result is compared on one main metric (see `labkit.viz.compare.MAIN_METRICS`). Where a
# machine has no result for a part of the lab, the page says so. Numbers from different machines
# are only compared within one result; each machine's source (measured on a GPU, on a CPU,
# simulated, interpreted) is in the legend.

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %%
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## What is recorded

# %%
from labkit.results import load_results
from labkit.viz import compare
results = load_results()
print(f"{len(results)} results from {len({r.slug for r in results})} machines")
compare.coverage(results)

# %%
for line in compare.missing_messages(results):
    print(line)
if results:
    declare_sources(*sorted({r.source for r in results}))
else:
    print("No results recorded yet: run `make report` on a machine.")

# %% [markdown]
# ## Side by side
# Pick a result in the dropdown. Bars are grouped by the row's variant and swept parameters.

# %%
table = compare.comparison_table(results)
compare.plot_comparison(table)

# %%
table.pivot_table(index=["result", "label"], columns="machine", values="value").head(60) if len(table) else table

# %% [markdown]
# ## Adding a machine
# 1. Clone the lab on the new machine and run `make report` (add `DEVICE=cuda` to insist on the
#    GPU). It sets itself up, runs every notebook and records results under
#    `data/results/<slug>/`, where the slug names the GPU (`h200`, `a100`, `rtx-4090`) or the CPU.
# 2. Commit `data/results/<slug>/` and rebuild this page: the new machine appears in every chart.
