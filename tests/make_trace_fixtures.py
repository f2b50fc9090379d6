"""Make the trimmed real-trace fixtures of ``tests/data`` from the shared trace collection.

    python tests/make_trace_fixtures.py [SHARED_DIR]   # default: ../shared/traces beside the repository

Each fixture keeps the top-level fields and every metadata event (``ph: "M"``) of its source and
a choice of its events, whose contents are never changed (``tests/data/README.md`` says what
each keeps and why). A *window* keeps the host events that start inside it, the device events
launched by a kept runtime call (and, for device events whose launch is not in the file at all,
those that start inside the window), the other events that start inside it, and flow events
whose two ends are both kept. The files are written with ``json.dumps`` and gzip (level 9,
``mtime=0``), so the same source gives the same bytes.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
FLOW_PHASES = ("s", "f", "t")


def read(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(doc: dict, events: list, name: str) -> Path:
    out = dict(doc, traceEvents=events)
    path = DATA / name
    path.write_bytes(gzip.compress(json.dumps(out).encode(), compresslevel=9, mtime=0))
    return path


def _corr(e: dict):
    a = e.get("args")
    return a.get("correlation") if isinstance(a, dict) else None


def window(events: list, t0: float, t1: float) -> list:
    """The events of the window ``[t0, t1)`` (us), as the module docstring says."""
    launched = {_corr(e) for e in events if e.get("cat") in RUNTIME_CATS and _corr(e) is not None}
    kept_corr = {_corr(e) for e in events if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS
                 and t0 <= e["ts"] < t1 and _corr(e) is not None}
    kept = []
    for e in events:
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M":
            kept.append(e)
        elif ph == "X" and cat in DEVICE_CATS:
            c = _corr(e)
            if c in kept_corr or (c not in launched and t0 <= e["ts"] < t1):
                kept.append(e)
        elif ph in FLOW_PHASES:
            kept.append(e)  # filtered below, once both ends are known
        elif "ts" in e and t0 <= e["ts"] < t1:
            kept.append(e)
    return _whole_flows(kept, kept_corr, t0, t1)


def _whole_flows(events: list, kept_corr: set, t0: float, t1: float) -> list:
    """Keep a flow event when both ends of its flow are kept: a launch-to-device flow (its id is the
    correlation id) when its runtime call is kept, any other flow when both ends lie in the window."""
    ends: dict = {}
    for e in events:
        if e.get("ph") in FLOW_PHASES:
            ends.setdefault((e.get("cat"), e.get("id")), []).append(e)
    keep = set()
    for (cat, fid), es in ends.items():
        phs = {e["ph"] for e in es}
        if "s" not in phs or "f" not in phs:
            continue
        if cat in ("ac2g", "async_cpu_to_gpu") and fid in kept_corr or all(t0 <= e["ts"] < t1 for e in es):
            keep.update(id(e) for e in es)
    return [e for e in events if e.get("ph") not in FLOW_PHASES or id(e) in keep]


def step_spans(events: list) -> list:
    return sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                  and str(e.get("name", "")).startswith("ProfilerStep#"))


def make(shared: Path) -> list[Path]:
    out = []
    # rank 3 of an A100 training run: 5 ms either side of its last step's start, every stream, and
    # the last two ProfilerStep spans (HTA's rule "work launched before the last step" needs two)
    doc = read(shared / "hta-trace-diff-control-a100-rank3.pt.trace.json.gz")
    ev = doc["traceEvents"]
    t_last = step_spans(ev)[-1][0]
    two = [e for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
           and e["ts"] >= step_spans(ev)[-2][0]]
    kept = window(ev, t_last - 5000.0, t_last + 5000.0)
    out.append(write(doc, [e for e in ev if e in two and e not in kept] + kept,
                     "hta-trace-diff-control-a100-rank3.last-step-start.pt.trace.json.gz"))
    # V100 with sub-microsecond timestamps: the first 8 ms of ProfilerStep#102
    doc = read(shared / "hta-ns-resolution-v100-rank0.pt.trace.json.gz")
    ev = doc["traceEvents"]
    t0 = step_spans(ev)[1][0]
    out.append(write(doc, window(ev, t0, t0 + 8000.0), "hta-ns-resolution-v100-rank0.8ms.pt.trace.json.gz"))
    # H100 LLM inference (HF transformers): 4 ms from 20 ms into its one step
    doc = read(shared / "tracelens-h100-qwen1.5-0.5b-chat-inference.pt.trace.json.gz")
    ev = doc["traceEvents"]
    t0 = step_spans(ev)[0][0] + 20000.0
    out.append(write(doc, window(ev, t0, t0 + 4000.0), "tracelens-h100-qwen1.5-0.5b-chat-inference.4ms.pt.trace.json.gz"))
    # dense back-to-back launches without ProfilerStep: the 15 ms from 1 ms before its first kernel
    doc = read(shared / "param-linear-kineto-rtx2080ti.pt.trace.json.gz")
    ev = doc["traceEvents"]
    t0 = min(e["ts"] for e in ev if e.get("cat") == "kernel") - 1000.0
    out.append(write(doc, window(ev, t0, t0 + 15000.0), "param-linear-kineto-rtx2080ti.15ms.pt.trace.json.gz"))
    # H100 video model inference with Python frames: 8 ms from 1 ms before its one pageable HtoD copy
    doc = read(shared / "tracelens-h100-timesformer-k400-inference.pt.trace.json.gz")
    ev = doc["traceEvents"]
    copy = next(e for e in ev if e.get("name") == "Memcpy HtoD (Pageable -> Device)")
    launch = next(e for e in ev if e.get("cat") in RUNTIME_CATS and _corr(e) == _corr(copy))
    t0 = launch["ts"] - 1000.0
    out.append(write(doc, window(ev, t0, t0 + 8000.0), "tracelens-h100-timesformer-k400-inference.8ms.pt.trace.json.gz"))
    # vLLM on a GB10: all ten step markers, the model runner's phase frames and every memcpy
    # with the runtime call that issued it (what the step and copy-count tests read)
    doc = read(shared / "nvllm-vllm-qwen3.5-27b-nvfp4-flashinfer-gb10-rank0.pt.trace.json.gz")
    ev = doc["traceEvents"]
    copies = {_corr(e) for e in ev if e.get("cat") == "gpu_memcpy"}
    keep = []
    for e in ev:
        name, cat = str(e.get("name", "")), e.get("cat")
        if (e.get("ph") == "M" or (cat == "user_annotation" and name.startswith("execute_context"))
                or (cat == "python_function" and "vllm/v1/worker/gpu_model_runner.py" in name)
                or cat == "gpu_memcpy" or (cat in RUNTIME_CATS and _corr(e) in copies)):
            keep.append(e)
    out.append(write(doc, keep, "nvllm-gb10-ten-steps.markers-and-copies.pt.trace.json.gz"))
    return out


def main(argv: list[str]) -> int:
    shared = Path(argv[0]) if argv else HERE.parents[1] / "shared" / "traces"
    if not shared.is_dir():
        print(f"make_trace_fixtures: no shared trace collection at {shared}", file=sys.stderr)
        return 2
    for p in make(shared):
        n = len(read(p)["traceEvents"])
        print(f"wrote {p.relative_to(HERE.parent)}: {n} events, {p.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
