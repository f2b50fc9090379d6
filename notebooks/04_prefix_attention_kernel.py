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
# # 04 · A Triton prefix-LM attention kernel
#
# In prefix-LM multimodal models (Gemma 3 and friends) the tokens of one image attend to each other
# in both directions, while text stays causal. vLLM's Triton backend reads the image ranges from an
# int32 tensor `(num_seqs, max_ranges, 2)` (the tensor #38794 stopped rebuilding on every layer).
# This page draws the mask rule, shows the kernel and checks it against a plain-torch reference on
# this machine, then compares it with FlexAttention and masked SDPA where a GPU result is recorded,
# and places those runs on their GPU's roofline.

# %% tags=["remove-input"]
from labkit.report import answers
answers.prefix_attention()

# %% tags=["parameters"]
device = "auto"
size = "quick"

# %% tags=["remove-input"]
from labkit.viz.notebook import setup_notebook, declare_sources
setup_notebook()

# %% [markdown]
# ## The rule: image tokens see their whole image, text stays causal
#
# For a sequence of `kv_len` keys whose queries are its last `q_len` positions, with inclusive
# image ranges `(s_i, e_i)` and an optional sliding window `W`:
#
# `allowed[q, k] = ((k <= q) and (W == 0 or q - k < W)) or any_i(s_i < e_i and s_i <= q <= e_i and s_i <= k <= e_i)`
#
# A query inside an image sees every earlier token (subject to the window) **and all tokens of its
# own image, later ones included**; ranges override the window. Blue pairs below are allowed by the
# causal rule, orange ones only by an image range: a prompt of 24 tokens with two images, without a
# window and under a sliding window (slider). Then a few other prompts (menu): a chunked prefill
# sees its earlier keys in full; a decode query is never inside an image, so its row is plain causal.

# %%
from labkit.viz.lab.mask import plot_mask_examples, plot_mask_window_slider
plot_mask_window_slider(24, 24, [(2, 7), (12, 17)], windows=(0, 3, 5, 8, 12))

# %%
plot_mask_examples()

# %% [markdown]
# ## The kernel, checked against its reference here
#
# `labkit.attn.prefix_attention.prefix_attention` takes the packed variable-length layout (prefill,
# chunked-prefill and decode rows in one launch; grouped-query heads). Each program owns a block of
# queries times the query heads of one KV head, so K/V tiles are read once per group. It reduces the
# ranges to one key interval per query and bounds its key loop per tile: text tiles stop at the
# causal limit, tiles with image queries run to the end of their images, and tiles below the window
# are skipped. Interior tiles where every pair is allowed skip the mask.
#
# Below, this run checks the kernel on a small batch (a prefill with two images, a chunked prefill,
# a decode row; 4 query heads over 2 KV heads, window 12) against the plain-torch reference (float64
# on a CPU), as `torch.allclose` would with the tolerance printed. Without a GPU it runs under the
# Triton interpreter: the numbers are **interpreted**, a correctness check, not a speed. A kernel
# that misses prints FAILED, and the report marks this page failed.

# %%
import inspect
from labkit.attn import prefix_attention as kernel
from labkit.attn.bench_attn import kernel_checks, run_bench
from labkit.device import resolve_device
from labkit.viz.notebook import fold
from labkit.bench import format_table
fold("the kernel's source (labkit/attn/prefix_attention.py: one key tile, then the program)",
     inspect.getsource(kernel._attend_tile.fn), inspect.getsource(kernel._prefix_attn_fwd.fn))

# %%
device = resolve_device(device)
rows, source = run_bench(["tiny"], ["triton_prefix", "sdpa_mask"], device=device)
declare_sources(source)
print(*kernel_checks(rows), sep="\n")
format_table(rows, columns=["case", "variant", "total_q", "num_heads", "num_kv_heads", "max_abs_err", "rel_err"],
             caption=f"this run on {device} ({source})")

# %% [markdown]
# ## Recorded on a GPU: the kernel against SDPA with a mask and FlexAttention
#
# The run the answer above reads. The benchmark (`labkit bench attn`, bf16) models Gemma-3-4B
# attention: 8 query heads, 4 KV heads, head size 256, over a prompt of 32 images x 256 soft tokens
# plus text (8,616 tokens): a local layer (window 1024) and a global layer prefill, and 128 decode
# rows over ~8.6k keys. TFLOP/s count only allowed pairs (`4 x head_dim x heads x pairs`).
# FlexAttention runs compiled with a BlockMask of the same rule; SDPA gets an explicit boolean
# mask. Masks and BlockMasks are built outside the timed region.

# %%
from labkit.attn.bench_attn import tile_sweep
from labkit.report.answers.gpu import ATTN_HEADERS, attention_table
from labkit.results import ATTN_BENCH, find_all, results_rows
from labkit.viz.lab.mask import plot_attn_bench
recorded = find_all(ATTN_BENCH, source="measured-gpu")  # one per GPU machine, this machine's first
res = recorded[0] if recorded else None
if res is not None:
    declare_sources(res.source)
(format_table(attention_table(res.rows), rename=ATTN_HEADERS, time_unit="ms",
              caption=f"recorded on {res.slug} ({res.machine.get('gpu_name')}, {res.source}, {res.size} size), median per call")
 if res else print("No GPU result recorded yet: run `labkit bench attn --size full` on a GPU."))

# %%
plot_attn_bench(results_rows([res] if res else []), title=f"prefix-LM attention, bf16, recorded on {res.slug if res else 'no GPU'}")

# %% [markdown]
# The kernel's default tile shape was picked from a sweep recorded in the same result:

# %%
fold("the tile-shape sweep: every tile the kernel was timed with, per case",
     format_table(tile_sweep(res.rows if res else []), columns=["case", "tile", "median_ms", "tflops", "max_abs_err"],
                  max_rows=50))

# %% [markdown]
# ## On the roofline: decode is memory-bound, prefill compute-bound
#
# A kernel is read against its GPU's roofline: it can go no faster than the GPU's peak compute,
# nor than its peak memory bandwidth times the FLOPs it does per byte it moves (its arithmetic
# intensity). The ridge point, peak compute over peak bandwidth, splits the memory-bound cases
# from the compute-bound ones. The peaks are datasheet figures (dense bf16 tensor cores, HBM),
# from a table with its sources (`labkit/gpu_peaks.json`). Each recorded case's FLOPs and
# bytes follow from its shapes: FLOPs as above; bytes as the traffic no kernel can avoid (Q read
# and the output written once, K and V read once for every key some query may attend to), so
# the intensity is an upper bound and the share of the roof a lower bound
# (`labkit.viz.lab.roofline`). A decode row has one query, so per byte of K and V it reads it does
# only `num_heads / num_kv_heads` FLOPs (grouped-query heads share K and V): it can only be
# memory-bound, while a prefill over thousands of tokens lands far right of the ridge.

# %%
from labkit.viz.lab.roofline import describe, plot_roofline, roofline_points, roofline_table
roof = roofline_points(results_rows(recorded))
plot_roofline(roof)

# %%
fold("each run on the roofline, and the peaks with their sources", describe(roof),
     format_table(roofline_table(roof)) if roof.points else None)

# %% [markdown]
# ## Try it live
# The recorded GPU run, without a kernel: the menu picks the case; bars are median ms per call per
# implementation (log scale). In JupyterLab on a GPU, the panel below it times any shape on your
# GPU and places it on the roofline with the recorded runs.

# %%
from labkit.viz.explore import plot_explorer
plot_explorer([dict(r, what=r["variant"].replace("_", " ")) for r in (res.rows if res else []) if "[" not in r["variant"]],
              x="what", y="median_ms", menu="case", start={"case": "decode"}, unit="ms",
              title=f"prefix-LM attention per call, bf16, recorded on {res.slug if res else 'no GPU'}",
              y_title="median ms per call", highlight=("triton prefix",))

# %%
from labkit.widgets.roofline import make_roofline_widget
make_roofline_widget(device, recorded=roof)
