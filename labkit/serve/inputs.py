"""The recorded inputs of ``labkit bench serve-sim``: which files, read how, and their provenance.

- the census of vLLM's step, ``<this machine>/vllm_step.json`` (host phases per step);
- vLLM's input processing, ``<this machine>/vllm_input.json``: per image the stages a server pays
  for every image it is sent, :data:`INPUT_STAGES`: ``media_decode`` (``ImageMediaIO.load_base64``,
  the JPEG decode the API server does for a base64 image) and ``add_request`` (the whole
  ``add_request`` call: the HF processor, hashing, the processor cache, placeholder expansion;
  the other stage rows are parts of it, or the processor alone, and would count twice);
- the calibrations of the GPU node's host, of the machine that recorded the census and the input
  processing, and of this machine (where the scheduler's calls are measured): two CPU-speed
  factors (:mod:`labkit.serve.host.cpu_speed`), one for the recorded host costs, one for the measured;
- with ``server_host=True``, the real server's per-step host beside the step,
  ``<census machine>/vllm_serve_host.json`` (:mod:`labkit.serve.host.server_host`).

The census machine defaults to :data:`CENSUS_MACHINE`, whose census holds the steps with the
forward off the host.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError

__all__ = ["INPUT_STAGES", "INTAKE_STAGES", "CENSUS_MACHINE", "ServeInputs", "load_inputs", "per_image_input_ns",
           "intake_ns"]

INPUT_STAGES = ("media_decode", "add_request")
#: a request's way in, before its handler starts: the client's serialization of its body (the
#: client, one process, serializes every request's body in turn before sending it) and the API
#: server's parse of it (JSON and the request's validation)
INTAKE_STAGES = ("client_serialize", "request_parse")
#: the machine whose recorded census (with the forward off the host) and input processing are read
CENSUS_MACHINE = "cpu-epyc-2c"
#: the machine whose host the GPU runs' calibration describes, per GPU the comparison can name
GPU_HOST_MACHINE = {"h200": "h200", "h100": "h200"}


@dataclass(frozen=True)
class ServeInputs:
    census: dict
    input_processing: dict
    calibration_gpu_host: dict
    calibration_census: dict
    calibration_here: dict
    paths: dict  #: role -> path
    server_host: dict | None = None

    def provenance(self) -> dict:
        """Per input: path, machine, commit, size, source, created."""
        out = {}
        docs = [("census", self.census), ("input_processing", self.input_processing),
                ("calibration_gpu_host", self.calibration_gpu_host),
                ("calibration_census", self.calibration_census), ("calibration_here", self.calibration_here)]
        if self.server_host is not None:
            docs.append(("server_host", self.server_host))
        for role, doc in docs:
            out[role] = {"path": self.paths[role], "machine": (doc.get("machine") or {}).get("slug"),
                         "labkit_commit": doc.get("labkit_commit"), "size": doc.get("size"),
                         "source": doc.get("source"), "created": doc.get("created"), "name": doc.get("name")}
        return out


def _read(path: Path, name: str) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"serve-sim needs {path} ({name}): {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise UsageError(f"{path} is not a labkit result")
    return doc


def load_inputs(machine: str, gpu: str, *, census_machine: str = CENSUS_MACHINE, root=None,
                server_host: bool = False) -> ServeInputs:
    """The recorded inputs: the census and input processing of ``census_machine``, the
    calibrations of it, of this machine (``machine``: its slug) and of ``gpu``'s host (and with
    ``server_host`` the census machine's ``vllm_serve_host``)."""
    from labkit.results import results_root

    root = Path(root) if root is not None else results_root()
    host = GPU_HOST_MACHINE.get(gpu)
    if host is None:
        raise UsageError(f"unknown GPU {gpu!r}: choose from {', '.join(GPU_HOST_MACHINE)}")
    paths = {"census": root / census_machine / "vllm_step.json",
             "input_processing": root / census_machine / "vllm_input.json",
             "calibration_gpu_host": root / host / "calibration_quick.json",
             "calibration_census": root / census_machine / "calibration.json",
             "calibration_here": root / machine / "calibration.json"}
    if not paths["calibration_gpu_host"].exists() and (root / host / "calibration.json").exists():
        paths["calibration_gpu_host"] = root / host / "calibration.json"
    if server_host:
        paths["server_host"] = root / census_machine / "vllm_serve_host.json"
    docs = {k: _read(p, k) for k, p in paths.items()}
    rel = {k: f"{p.parent.name}/{p.name}" for k, p in paths.items()}  # under the results folder
    return ServeInputs(docs["census"], docs["input_processing"], docs["calibration_gpu_host"],
                       docs["calibration_census"], docs["calibration_here"], rel, docs.get("server_host"))


def per_image_input_ns(doc: dict) -> tuple[float, dict]:
    """ns of input processing per image on the recording machine (sum of :data:`INPUT_STAGES`)."""
    by = {r.get("stage"): r for r in doc.get("rows", [])}
    missing = [s for s in INPUT_STAGES if s not in by or by[s].get("per_image_median_us") is None]
    if missing:
        raise UsageError(f"the input-processing result lacks the stages {', '.join(missing)}")
    parts = {s: float(by[s]["per_image_median_us"]) * 1e3 for s in INPUT_STAGES}
    return sum(parts.values()), {s: {"per_image_ns": v, "where": by[s].get("where")} for s, v in parts.items()}


def intake_ns(doc: dict) -> dict:
    """Per image, ns of :data:`INTAKE_STAGES` on the recording machine (``UsageError`` when the
    input-processing result predates them: record it again with ``labkit bench vllm-input``)."""
    by = {r.get("stage"): r for r in doc.get("rows", [])}
    missing = [s for s in INTAKE_STAGES if s not in by or by[s].get("per_image_median_us") is None]
    if missing:
        raise UsageError(f"the input-processing result lacks the stages {', '.join(missing)} (record it again "
                         f"with labkit bench vllm-input, or pass --api-intake none)")
    return {s: float(by[s]["per_image_median_us"]) * 1e3 for s in INTAKE_STAGES}
