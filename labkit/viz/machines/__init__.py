"""The recorded results across machines (notebooks 00 and 06, and the appendix).

``calibration`` (the per-machine unit costs), ``compare`` (machines side by side) and
``appendix`` (a machines x results matrix and each result's numbers).
"""
