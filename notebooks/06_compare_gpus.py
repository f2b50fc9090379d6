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
# # 06 · Appendix: every recorded result, by machine
#
# Every machine that has run the lab leaves its results in `data/results/<machine>/`. This appendix
# says which results each machine recorded and sets their numbers side by side, each with its
# source: **measured-gpu**, **measured-cpu**, **simulated** (a model fed with measured costs, not
# hardware) or **interpreted** (Triton's CPU interpreter: correctness only, never timed). Numbers
# from different machines are only compared within one result.

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
# ## What each machine recorded
# One row per result, one column per machine, a cell only where that machine recorded it: its rows,
# "quick" where only a quick run is recorded, and the source where the numbers are not that
# machine's own measurement.

# %%
from labkit.results import load_results
from labkit.timing import unit_cost_note
from labkit.viz.machines import appendix, compare
from labkit.viz.notebook import fold
results = load_results()
declare_sources(*sorted({r.source for r in results}))
appendix.results_matrix(results)

# %% [markdown]
# The one host figure every machine records, one tensor index + `int()` (its calibration), from the
# fastest machine to the slowest:

# %%
from labkit.report.answers.host import calibration_rows
from labkit.bench import format_table, sig3
reads = sorted(calibration_rows(results), key=lambda r: r["tensor_index_int_ns"])
format_table([{"machine": r["machine"], "tensor index + int()": f"{sig3(r['tensor_index_int_ns'] / 1e3)} us",
               "x the fastest": f"{sig3(r['tensor_index_int_ns'] / reads[0]['tensor_index_int_ns'])}x"} for r in reads])

# %% [markdown]
# ## Side by side where several machines recorded a result
# Pick a result in the menu. Bars are the rows that two or more machines recorded, grouped by the row's
# variant and swept parameters; the legend groups machines by source (measured bars solid, simulated
# hatched, interpreted dotted). Every row of every result is in the tables below.

# %%
per_machine = appendix.one_per_machine(results)
table = compare.comparison_table(per_machine)
table = table[~table["label"].str.contains("[", regex=False)]  # the kernel's tile sweep: on page 04
# the rows two or more machines recorded: one metric per label, nothing drawn against an empty slot
machines = table.dropna(subset=["value"]).groupby(["result", "label"])["machine"].nunique()
both = table.set_index(["result", "label"]).index.isin(machines[machines > 1].index)
shared = sorted(set(table[both]["result"]))
notes = {name: unit_cost_note(r for r in per_machine if r.name == name) for name in shared}
(fold("how fast each machine's CPU ran in the runs compared", "\n".join(f"{n}: {t}" for n, t in notes.items() if t))
 if any(notes.values()) else None)
compare.plot_comparison(table[both])

# %% [markdown]
# Every result's numbers as tables, one per result behind a click (per machine that recorded it,
# the value and its source; `missing`: recorded without the compared metric), and what the
# comparison could not use:

# %%
from IPython.display import HTML
HTML(appendix.side_by_side_html(table))

# %%
missing = appendix.missing_metrics(results)
fold("results and rows recorded without the compared metric", missing) if len(missing) else None

# %% [markdown]
# ## Adding a machine
# 1. Clone the lab on the new machine and run `make report` (add `DEVICE=cuda` to insist on the
#    GPU). It sets itself up, runs every notebook and records results under
#    `data/results/<slug>/`, where the slug names the GPU (`h200`, `a100`, `rtx-4090`) or the CPU.
# 2. Commit `data/results/<slug>/` and rebuild this page: the new machine appears in every table.
