"""Figures of the lab's own models and kernels (notebooks 01-04)."""
