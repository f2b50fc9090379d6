"""labkit.widgets: ipywidgets factories for live use in JupyterLab (import ipywidgets lazily)."""
