"""Helpers for the report tests: write small py:percent notebooks into a folder; the results the repository records."""

from __future__ import annotations

import subprocess
from pathlib import Path

from labkit.results import load_results

REPO = Path(__file__).resolve().parents[1]

HEADER = """# ---
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
"""

PARAMS = """# %% tags=["parameters"]
device = "auto"
size = "quick"
"""


def write_notebook(folder: Path, name: str, title: str, code_cells: list[str], *, params: bool = True) -> Path:
    """``folder/name.py``: a title cell, the parameters cell, then one cell per code string.

    Cell numbering in the built notebook: 0 title, 1 parameters, 2.. the code cells
    (without ``params``: 0 title, 1.. the code cells).
    """
    parts = [HEADER, f"# %% [markdown]\n# # {title}\n"]
    if params:
        parts.append(PARAMS)
    for code in code_cells:
        parts.append(f"# %%\n{code.strip()}\n")
    path = Path(folder) / f"{name}.py"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


OK_CELLS = [
    "from labkit.viz.notebook import setup_notebook, declare_sources\nsetup_notebook()\ndeclare_sources('simulated')",
    "print('params', device, size)",
]

FAIL_CELLS = [
    "x = 1",
    "y = x / 0  # fails here",
    "print('never reached')",
]

TOGGLE_CELLS = [
    "from labkit.viz.notebook import setup_notebook, declare_sources\nsetup_notebook()\ndeclare_sources('measured-cpu')",
    """import plotly.graph_objects as go
fig = go.Figure([go.Scatter(y=[1, 2, 3], name="up"), go.Scatter(y=[3, 2, 1], name="down", visible=False)])
fig.update_layout(updatemenus=[dict(type="buttons", buttons=[
    dict(label="up", method="update", args=[{"visible": [True, False]}]),
    dict(label="down", method="update", args=[{"visible": [False, True]}]),
])])
fig""",
    """import plotly.graph_objects as go
fig2 = go.Figure([go.Bar(x=["a", "b"], y=[1, 2], name="p"), go.Bar(x=["a", "b"], y=[2, 1], name="q")])
fig2.update_layout(updatemenus=[dict(buttons=[
    dict(label="both", method="update", args=[{"visible": [True, True]}]),
    dict(label="p", method="update", args=[{"visible": [True, False]}]),
    dict(label="q", method="update", args=[{"visible": [False, True]}]),
])])
fig2""",
    "import ipywidgets as w\nw.IntSlider(value=3, min=0, max=10, description='n')",
]


def tracked_results(store: Path) -> list:
    """The results in ``store`` (a copy of data/results) that the repository records: the files git
    tracks under data/results (a checkout's own quick runs, which git ignores, left out), or every
    file where git is not available."""
    proc = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--", "data/results"], capture_output=True,
                          check=False)
    results = load_results(store)
    if proc.returncode != 0 or not proc.stdout:
        return results
    tracked = {Path(n).relative_to("data/results") for n in proc.stdout.decode().split("\0") if n}
    return [r for r in results if Path(r.path).relative_to(store) in tracked]
