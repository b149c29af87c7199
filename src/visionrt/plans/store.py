"""Plan files: the configuration `tune` chose, as a run-config YAML with what was measured and
the machine it was measured on; cached per (model content, machine) so a plain `run` finds it."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from visionrt import hardware
from visionrt.errors import ConfigError, SinkError
from visionrt.paths import cache_root, file_sha256
from visionrt.preprocess.depth import MAX_DEPTH_EVERY
from visionrt.yaml_text import load_yaml

# CPU features that change which configuration is fastest; other flags do not matter here.
RELEVANT_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16",
                     "amx_int8")  # fmt: skip
RUNTIMES = ("onnxruntime", "openvino", "torch", "tensorrt")
RUN_KEYS = ("model", "backend", "inference")
# A plan's optional `live:` section: the inference settings that win for live sources (lowest
# latency), layered over `inference` when a run is live; the rest is the throughput winner.
LIVE_KEY = "live"
# A plan's optional `pipeline:` section: the pipeline options `tune` learnt pay on the video
# (motion gating), layered under the run's own (`plans.gating`).
PIPELINE_KEY = "pipeline"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def machine_fingerprint() -> dict[str, Any]:
    """What a plan's figures depend on: the CPU, its core count and the runtime versions."""
    features = hardware.cpu_features()
    return {
        "cpu": hardware.cpu_model() or platform.processor() or platform.machine(),
        "cpus": os.cpu_count() or 0,
        "features": [f for f in RELEVANT_FEATURES if f in features],
        "runtimes": {name: v for name in RUNTIMES if (v := _version(name))},
        "visionrt": _version("visionrt"),
    }


def fingerprint_key(fingerprint: dict[str, Any]) -> str:
    text = json.dumps(fingerprint, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_root() -> Path:
    """~/.cache/visionrt/plans, or $VISIONRT_PLANS (tests point it at an empty folder)."""
    default = cache_root() / "plans"
    return Path(os.environ.get("VISIONRT_PLANS") or default)


@dataclass(slots=True)
class Plan:
    """`run` holds the config sections a run needs (model, backend, inference, and optionally
    `live`: inference settings for live sources, and `pipeline`: the motion gating that pays on
    the tune video); `tuned` what was measured (fps, latency,
    fidelity, the reference's figures, the video), on what, and for which model
    (`source_sha256`, `source_model`) with which artifact (`artifact`: its batch, "any" or 1)."""

    run: dict[str, Any]
    tuned: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> dict[str, Any]:
        return dict(self.tuned.get("fingerprint", {}))

    @property
    def time_boxed(self) -> bool:
        """True when the search stopped at its budget: the best measured by then, not
        necessarily the best there is (`visionrt tune` with a larger budget looks further)."""
        return bool((self.tuned.get("budget") or {}).get("reached"))

    @property
    def depth_every(self) -> int:
        """A depth plan's depth on 1 frame in N (1: a plan from before it was measured, or one
        that found no box to measure on)."""
        every = self.tuned.get("every")
        chosen = every.get("chosen", 1) if isinstance(every, dict) else 1
        return chosen if isinstance(chosen, int) and 1 <= chosen <= MAX_DEPTH_EVERY else 1

    def summary_line(self) -> str:
        """One line: what runs, when it was tuned, what it measured."""
        inference = self.run.get("inference", {})
        measured = self.tuned.get("measured", {})
        if self.tuned.get("task") == "depth":
            size = self.tuned.get("input_hw") or ["?", "?"]
            caveat = " (architecture-only model)" if self.tuned.get("architecture_only") else ""
            every = f", depth on 1 frame in {self.depth_every}" if self.depth_every > 1 else ""
            return (
                f"{self.run.get('backend')} {inference.get('precision', 'fp32')}"
                f" {size[0]}×{size[1]}{every}, tuned"
                f" {str(self.tuned.get('at', '?'))[:10]},"
                f" {measured.get('ms', 0):.1f} ms model-only, AbsRel"
                f" {measured.get('abs_rel', 0):.3f}{_against(self.tuned)}{caveat}"
            )
        size = inference.get("input_size") or self.tuned.get("input_hw")
        size_text = f" {size[0]}×{size[1]}" if size else ""
        device = inference.get("device", "cpu")
        where = f" on {device}" if device != "cpu" else ""
        batch = f" batch {inference['batch']}" if inference.get("batch", 1) > 1 else ""
        minutes = (self.tuned.get("budget") or {}).get("minutes")
        within = f" {minutes:g}-min" if isinstance(minutes, int | float) else ""
        boxed = f", time-boxed: the search stopped at its{within} budget" if self.time_boxed else ""
        return (
            f"{self.run.get('backend')}{where} {inference.get('precision', 'fp32')}{size_text}"
            f"{batch},"
            f" tuned {str(self.tuned.get('at', '?'))[:10]},"
            f" {measured.get('fps', 0):.1f} FPS, fidelity {measured.get('fidelity', 0):.3f}{boxed}"
        )

    def to_yaml(self) -> str:
        header = (
            "# visionrt plan, written by `visionrt tune`: `visionrt run --plan THIS_FILE`\n"
            "# reproduces it. Sections as in a run config; `tuned` records what was measured.\n"
        )
        body = {**self.run, "tuned": self.tuned}
        return header + yaml.safe_dump(body, sort_keys=False, allow_unicode=True)

    def save(self, path: Path) -> Path:
        """Write the plan whole or not at all (a `.partial` file renamed), or SinkError; a
        device or pipe standing at `path` is written where it is (renamed over, it would be
        replaced by a file: `tune --plan /dev/stdout` as root)."""
        device = path.exists() and not path.is_file()
        partial = path if device else path.with_name(path.name + ".partial")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(self.to_yaml(), encoding="utf-8")
            if not device:
                partial.replace(path)
        except OSError as err:
            if not device:
                with contextlib.suppress(OSError):
                    partial.unlink(missing_ok=True)
            raise SinkError(f"cannot write plan {path}: {err.strerror or err}") from err
        return path

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ConfigError(f"cannot read plan {path}: {err.strerror or err}") from err
        except UnicodeDecodeError as err:
            raise ConfigError(f"plan {path} is not a text file ({err.reason})") from err
        data = load_yaml(text, f"plan {path}")
        if not isinstance(data, dict) or "backend" not in data or "model" not in data:
            raise ConfigError(f"plan {path}: expected a visionrt plan (model, backend, inference)")
        tuned = data.pop("tuned", {}) or {}
        unknown = sorted(set(data) - {*RUN_KEYS, LIVE_KEY, PIPELINE_KEY})
        if unknown:
            raise ConfigError(f"plan {path}: unknown section '{unknown[0]}'")
        plan = cls(run=data, tuned=tuned)
        problem = plan_problem(plan)
        if problem:
            raise ConfigError(
                f"plan {path}: {problem}; `visionrt tune` writes a new one (or delete the file)"
            )
        return plan


# What a plan's values must be where a run or its summary line reads them: key path → the
# types it may hold. Sections are checked as a config's are when a run layers them
# (config.load), but a summary line is printed first, and a cached plan must never become a
# traceback (issue #47: `inference.batch: lots`, `tuned.measured.fps: fast`).
_NUMBER = (int, float)
_SHAPES: dict[tuple[str, ...], tuple[type, ...]] = {
    ("model",): (str,),
    ("backend",): (str, type(None)),
    ("inference",): (dict,),
    ("inference", "batch"): (int,),
    ("inference", "threads"): (int,),
    ("inference", "precision"): (str,),
    ("inference", "device"): (str,),
    ("inference", "input_size"): (list, type(None)),
    ("inference", "settings"): (dict,),
    (LIVE_KEY,): (dict,),
    (PIPELINE_KEY,): (dict,),
    ("tuned",): (dict,),
    ("tuned", "measured"): (dict,),
    ("tuned", "input_hw"): (list, type(None)),
    ("tuned", "fingerprint"): (dict,),
    ("tuned", "budget"): (dict,),
    ("tuned", "source_sha256"): (str,),
    ("tuned", "source_model"): (str,),
    ("tuned", "task"): (str,),
}


def plan_problem(plan: Plan) -> str:
    """What is wrong with `plan`'s values ("" when nothing): the first key holding the wrong
    type, a size that is not two positive integers, or a measured figure that is no number."""
    tree = {**plan.run, "tuned": plan.tuned}
    for keys, types in _SHAPES.items():
        node = _tree_value(tree, keys)
        if node is _ABSENT:
            continue
        name = ".".join(keys)
        # bool is an int to Python; no key here means a switch.
        if isinstance(node, bool) or not isinstance(node, types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"{name}: expected {expected}, got {node!r}"
        if wrong := _wrong_value(keys[-1], _tree_value(tree, keys)):
            return f"{name}: {wrong}"
    for key, value in (plan.tuned.get("measured") or {}).items():
        if isinstance(value, bool) or not isinstance(value, _NUMBER):
            return f"tuned.measured.{key}: expected a number, got {value!r}"
    return ""


_ABSENT: Any = object()


def _tree_value(tree: dict[str, Any], keys: tuple[str, ...]) -> Any:
    node: Any = tree
    for key in keys:
        node = node.get(key, _ABSENT) if isinstance(node, dict) else _ABSENT
    return node


def _wrong_value(key: str, value: Any) -> str:
    """What is wrong with a value of the right type ("" when nothing)."""
    if key in ("input_size", "input_hw") and value is not None:
        sizes = [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        if len(value) != 2 or len(sizes) != 2:
            return f"expected [height, width], got {value!r}"
    if key in ("batch", "threads") and value < (1 if key == "batch" else 0):
        return f"expected a positive integer, got {value!r}"
    return ""


def plan_path(model: Path, fingerprint: dict[str, Any], root: Path | None = None) -> Path:
    """Where the plan for `model` on this machine is cached: named by the model's content (the
    stem only helps a reader), so a renamed or copied model finds its plan."""
    digest = file_sha256(model)[:16]
    return (root or default_root()) / f"{model.stem}-{digest}-{fingerprint_key(fingerprint)}.yaml"


def cached_plans(
    model: Path, root: Path | None = None, fingerprint: dict[str, Any] | None = None
) -> Iterator[tuple[Plan, Path]]:
    """Each plan cached for `model` (by content) on this machine (same fingerprint; another
    machine's: a cluster's node), and its file, whether its artifact is still there or not."""
    folder = root or default_root()
    if not folder.is_dir():
        return
    sha256 = file_sha256(model)
    key = fingerprint_key(fingerprint or machine_fingerprint())
    for path in sorted(folder.glob(f"*-{sha256[:16]}-{key}.yaml")):
        plan = Plan.load(path)
        # Named for this model, but a plan copied or edited may record another's content.
        tuned_for = plan.tuned.get("source_sha256")
        if not tuned_for or tuned_for == sha256:
            yield plan, path


def cached_plan(
    model: Path, root: Path | None = None, fingerprint: dict[str, Any] | None = None
) -> tuple[Plan, Path] | None:
    """The cached plan for `model` (`cached_plans`) whose artifact is still there."""
    for plan, path in cached_plans(model, root, fingerprint):
        if Path(str(plan.run.get("model", ""))).is_file():
            return plan, path
    return None  # none tuned, or its artifact was deleted: tune again


def fingerprint_differences(plan: Plan, fingerprint: dict[str, Any] | None = None) -> list[str]:
    """How this machine (or the one `fingerprint` describes) differs from the one the plan was
    tuned on (empty: the same)."""
    now, then = fingerprint or machine_fingerprint(), plan.fingerprint
    return [
        f"{key}: tuned on {then.get(key)!r}, this machine {now[key]!r}"
        for key in now
        if then.get(key) != now[key]
    ]


def _against(tuned: dict[str, Any]) -> str:
    """Against what a depth plan's AbsRel is, when its search compared sizes."""
    searched = tuned.get("sizes_searched") or []
    if len(searched) < 2:
        return ""
    return f" against FP32 at {searched[0]} (sizes {', '.join(map(str, searched))} searched)"
