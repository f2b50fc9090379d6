"""Device-duration profiles: per-op linear costs, runtime host costs and a copy model for the simulated device.

More: docs/reference.md, ``labkit.engine.device.profiles``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from labkit.errors import UsageError
from labkit.fileio import write_json
from labkit.results import REPO_ROOT

PROFILE_SCHEMA = 1
PARAMETRIC_NAME = "parametric"
#: host cost of one CUDA-graph replay (``cudaGraphLaunch`` and the Python around it) when a
#: profile has not recorded one: a round parametric value, labelled so wherever it is used
PARAMETRIC_REPLAY_NS = 10_000.0


def profiles_root() -> Path:
    """The folder holding recorded profiles (``data/profiles``)."""
    return REPO_ROOT / "data" / "profiles"


@dataclass(frozen=True)
class OpCost:
    """Linear device-time model of one op, in nanoseconds."""

    base_ns: float
    per_token_ns: float = 0.0
    per_kv_token_ns: float = 0.0

    def duration_ns(self, tokens: int = 0, kv_tokens: int = 0) -> int:
        """Device duration in ns for ``tokens`` query tokens and ``kv_tokens`` keys read."""
        return max(0, int(round(self.base_ns + self.per_token_ns * tokens + self.per_kv_token_ns * kv_tokens)))


@dataclass(frozen=True)
class CopyCost:
    """Copy engine model: ``latency_ns + nbytes / bytes_per_ns`` (bytes_per_ns == GB/s); ``origin``: its source."""

    latency_ns: float
    bytes_per_ns: float
    origin: str | None = None

    def duration_ns(self, nbytes: int) -> int:
        return int(round(self.latency_ns + nbytes / self.bytes_per_ns))


def copy_cost_from_two_sizes(small_bytes: int, small_ns: float, big_bytes: int, big_ns: float, *,
                             origin: str | None = None) -> CopyCost:
    """The copy model through two timed copies: bandwidth from their difference, latency the intercept.

    ``small_ns``/``big_ns``: time of one copy of ``small_bytes``/``big_bytes`` (host ns, with anything
    that is not the copy itself already taken off). Only the copies enter: the latency is what a copy
    of no bytes would cost, never less than zero.
    """
    if big_bytes <= small_bytes:
        raise ValueError(f"need two copy sizes, the second larger ({small_bytes} B, {big_bytes} B)")
    bw = (big_bytes - small_bytes) / max(float(big_ns) - float(small_ns), 1.0)  # bytes per ns
    return CopyCost(latency_ns=max(float(small_ns) - small_bytes / bw, 0.0), bytes_per_ns=bw, origin=origin)


@dataclass(frozen=True)
class DeviceProfile:
    """Device durations and runtime host costs used by the simulated device.

    ``origin`` says where the numbers come from (``"parametric, not measured"`` or the GPU,
    model and date of the recording); ``path`` is the file it was read from, if any.
    ``launch_overhead_ns`` is HOST time charged per launched op (and per copy call): in a recorded
    profile it is the mini engine's whole eager host cost per op (Python, torch dispatch of the
    op's 1-4 kernels, the launches; host time of one forward / its op count), not device time and
    not a bare ``cudaLaunchKernel``; the simulator replaces the real forward's host work with it.
    ``graph_replay_ns`` is the HOST time of one CUDA-graph replay (recorded with
    ``--write-profile``); None means not recorded, and ``PARAMETRIC_REPLAY_NS`` stands in.
    """

    name: str
    origin: str
    parametric: bool
    ops: Mapping[str, OpCost]
    launch_overhead_ns: float = 5_000.0
    sync_overhead_ns: float = 3_000.0
    event_overhead_ns: float = 2_000.0
    h2d_pageable: CopyCost = CopyCost(latency_ns=4_000.0, bytes_per_ns=8.0)
    h2d_pinned: CopyCost = CopyCost(latency_ns=2_000.0, bytes_per_ns=25.0)
    d2h_pinned: CopyCost = CopyCost(latency_ns=2_000.0, bytes_per_ns=25.0)
    default_op: OpCost = OpCost(base_ns=3_000.0)
    gpu_name: str | None = None
    model: str | None = None
    graph_replay_ns: float | None = None
    path: str | None = field(default=None, compare=False)

    @property
    def replay_overhead_ns(self) -> float:
        """Host ns per graph replay: the recorded value, else ``PARAMETRIC_REPLAY_NS``."""
        return PARAMETRIC_REPLAY_NS if self.graph_replay_ns is None else float(self.graph_replay_ns)

    @property
    def replay_origin(self) -> str:
        """Where the replay cost comes from: ``recorded`` or ``parametric, not measured``."""
        return "parametric, not measured" if self.graph_replay_ns is None else "recorded"

    def op_cost(self, op: str) -> OpCost:
        """Cost model of ``op`` (``default_op`` for names the profile does not know)."""
        return self.ops.get(op, self.default_op)

    def duration_ns(self, op: str, tokens: int = 0, kv_tokens: int = 0) -> int:
        """Device duration (ns) of ``op`` for a step with ``tokens`` query tokens and ``kv_tokens`` keys."""
        return self.op_cost(op).duration_ns(tokens, kv_tokens)

    def label(self) -> str:
        """Short human label: ``profile: h200 (measured on NVIDIA H200)`` / ``parametric, not measured``."""
        return f"profile: {self.name} ({self.origin})"

    def describe(self) -> dict:
        """Flat fields naming the profile, for results params and trace metadata."""
        return {"profile": self.name, "profile_origin": self.origin, "profile_parametric": self.parametric,
                "profile_file": _repo_relative(self.path), "graph_replay_ns": self.replay_overhead_ns,
                "graph_replay_origin": self.replay_origin}

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("path", None)
        d["schema"] = PROFILE_SCHEMA
        return d


def _repo_relative(path: str | None) -> str | None:
    """``path`` relative to the repository when inside it (results never record local folders)."""
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return path


def parametric_profile() -> DeviceProfile:
    """A hand-set profile sized like a Gemma-4-E4B-like decode step on a Hopper GPU (labelled parametric)."""
    ops = {
        "embed": OpCost(4_000, 2.0),
        "input_norm": OpCost(3_000, 1.0),
        "qkv_proj": OpCost(18_000, 40.0),
        "rope": OpCost(3_000, 1.0),
        "kv_write": OpCost(3_000, 1.0),
        "attention": OpCost(10_000, 20.0, 0.02),
        "o_proj": OpCost(12_000, 25.0),
        "post_attn_norm": OpCost(3_000, 1.0),
        "gate_up_proj": OpCost(45_000, 110.0),
        "act_mul": OpCost(4_000, 2.0),
        "down_proj": OpCost(28_000, 60.0),
        "post_mlp_norm": OpCost(3_000, 1.0),
        "final_norm": OpCost(3_000, 1.0),
        "lm_head": OpCost(250_000, 300.0),
        "sample": OpCost(20_000, 10.0),
        "prepare_inputs": OpCost(3_000, 0.5),
        "pad_ranges": OpCost(4_000),
    }
    return DeviceProfile(name=PARAMETRIC_NAME, origin="parametric, not measured", parametric=True, ops=ops)


def _copy_cost(d: Mapping | None, fallback: CopyCost) -> CopyCost:
    if not d:
        return fallback
    origin = d.get("origin")
    return CopyCost(latency_ns=float(d["latency_ns"]), bytes_per_ns=float(d["bytes_per_ns"]),
                    origin=None if origin is None else str(origin))


def profile_from_json(data: Mapping, path: str | None = None) -> DeviceProfile:
    """Validate and build a profile from its JSON object; ``UsageError`` says what is wrong."""
    try:
        if int(data.get("schema", 1)) > PROFILE_SCHEMA:
            raise UsageError(f"profile schema {data['schema']} is newer than this labkit")
        base = parametric_profile()
        ops = {str(k): OpCost(**{kk: float(vv) for kk, vv in v.items()}) for k, v in dict(data["ops"]).items()}
        return DeviceProfile(
            name=str(data["name"]), origin=str(data["origin"]), parametric=bool(data.get("parametric", False)), ops=ops,
            **{k: float(data.get(k, getattr(base, k))) for k in ("launch_overhead_ns", "sync_overhead_ns",
                                                                 "event_overhead_ns")},
            **{k: _copy_cost(data.get(k), getattr(base, k)) for k in ("h2d_pageable", "h2d_pinned", "d2h_pinned")},
            default_op=OpCost(**data["default_op"]) if data.get("default_op") else base.default_op,
            gpu_name=data.get("gpu_name"), model=data.get("model"),
            graph_replay_ns=None if data.get("graph_replay_ns") is None else float(data["graph_replay_ns"]),
            path=path,
        )
    except UsageError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"bad device profile {path or ''}: {type(exc).__name__}: {exc}") from None


def load_profile(name_or_path: str | Path | None = None) -> DeviceProfile:
    """A profile by name (``data/profiles/<name>.json``), by file path, or (None, ``parametric``) the default."""
    if name_or_path is None or str(name_or_path) == PARAMETRIC_NAME:
        return parametric_profile()
    path = Path(name_or_path)
    if not path.suffix:
        path = profiles_root() / f"{name_or_path}.json"
    if not path.is_file():
        known = ", ".join([PARAMETRIC_NAME, *list_profiles()])
        raise UsageError(f"no device profile {str(name_or_path)!r} (known: {known})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read device profile {path}: {exc}") from None
    return profile_from_json(data, str(path))


def list_profiles(root: Path | None = None) -> list[str]:
    """Names of the recorded profiles under ``data/profiles``."""
    root = root or profiles_root()
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


def save_profile(profile: DeviceProfile, path: str | Path) -> Path:
    """Write ``profile`` as JSON to ``path`` atomically."""
    path = Path(path)
    write_json(path, profile.to_json())
    return path


def fit_op_costs(samples: Iterable[tuple[str, int, int, float]]) -> dict[str, OpCost]:
    """Least-squares ``OpCost`` per op from ``(op, tokens, kv_tokens, duration_ns)`` samples (slopes >= 0)."""
    import numpy as np

    by_op: dict[str, list[tuple[int, int, float]]] = {}
    for op, tokens, kv, dur in samples:
        by_op.setdefault(op, []).append((int(tokens), int(kv), float(dur)))
    out = {}
    for op, rows in by_op.items():
        arr = np.asarray(rows, dtype=float)  # (n, 3): tokens, kv_tokens, duration
        cols = [np.ones(len(arr))]
        names = ["base_ns"]
        for j, name in ((0, "per_token_ns"), (1, "per_kv_token_ns")):
            if np.ptp(arr[:, j]) > 0:
                cols.append(arr[:, j])
                names.append(name)
        while True:
            a = np.stack(cols, axis=1)
            coef, *_ = np.linalg.lstsq(a, arr[:, 2], rcond=None)
            neg = [i for i in range(1, len(coef)) if coef[i] < 0]
            if not neg:
                break
            drop = neg[0]
            del cols[drop], names[drop]
        fields = dict(zip(names, (float(c) for c in coef)))
        fields["base_ns"] = max(0.0, fields["base_ns"])
        out[op] = OpCost(**fields)
    return out
