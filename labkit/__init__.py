"""labkit: a GPU performance lab for vLLM's multimodal serving path.

Importing the package is cheap and never touches a GPU or a Triton driver; the
submodules import torch and triton when they need them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
