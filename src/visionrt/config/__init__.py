"""Run configuration: defaults < YAML file < `--set key=value`, validated with one-line errors."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from visionrt.backends import BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions, nested_key
from visionrt.config.serve import ServeOptions
from visionrt.config.sizes import SizedDetector, parse_size_key, size_key
from visionrt.config.values import coerce
from visionrt.errors import ConfigError
from visionrt.fuse.shapes import parse_analytics
from visionrt.postprocess import PostprocessOptions
from visionrt.sinks.files import SourceFiles
from visionrt.sources import SourceOptions


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Where results go: `dir` for the files, which sinks, and the per-second telemetry file."""

    dir: str = "out"
    video: bool = True
    jsonl: bool = True
    telemetry: str = ""
    mot: bool = False  # MOTChallenge text per source (needs pipeline.tracking.enabled)
    coco: bool = False  # COCO results JSON per source (<name>.coco.json)
    csv: bool = False  # CSV per source, a row per detection (<name>.csv)
    codec: str = "libx264"
    # x264 speed/size trade: veryfast ~4 ms of CPU per 768×576 frame, ultrafast ~2 ms at 3× size.
    preset: str = "veryfast"
    # Prometheus metrics at http://metrics_host:metrics_port/metrics while the run lasts (0: off);
    # localhost unless the user opens it up on purpose, and then only with a token (also read
    # from VISIONRT_METRICS_TOKEN) that every scrape sends.
    metrics_port: int = 0
    metrics_host: str = "127.0.0.1"
    metrics_token: str = ""
    # With motion gating, the annotated video also shows where the frame moved and the windows
    # the detector ran on (thin, under the detections): to see what gating did, not for viewers.
    draw_regions: bool = False
    # An earlier run's outputs in `dir` (its summary.json and what it lists, unfinished files,
    # files of this run's names) refuse the run; `overwrite` removes them first.
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(
                f"output.metrics_port: expected 0 (off) or 1 to 65535, got {self.metrics_port}"
            )


@dataclass(frozen=True, slots=True)
class DepthConfig(DepthOptions):
    """The depth model as the pipeline runs it (DepthOptions), and its outputs: `video` writes a
    colourised depth MP4 per source; `maps` writes every depth map as `png` (16-bit) or `npy`
    files ("" none)."""

    video: bool = True
    maps: str = ""

    def __post_init__(self) -> None:
        super(DepthConfig, self).__post_init__()
        if self.maps not in ("", "png", "npy"):
            raise ConfigError(f"depth.maps: expected png, npy or nothing, got '{self.maps}'")


PROCESSES = "processes"  # cluster.address: worker processes of this machine, no Ray


def check_address(address: str, what: str) -> None:
    """A Ray address `--ray` takes: local, auto, HOST:PORT (or Ray's own ray://HOST:PORT); a
    ConfigError naming `what` otherwise, before Ray is asked (it raises a traceback)."""
    host, _, port = address.rpartition(":")
    if address in ("local", "auto") or address.startswith("ray://"):
        return
    if host and not host.startswith("-") and port.isascii() and port.isdigit():
        return
    # A flag right after --ray (`--ray --no-video`) is taken as its value.
    flag = " (a flag: --ray was given no address)" if address.startswith("-") else ""
    also = ", processes" if what.startswith("cluster.address") else ""
    raise ConfigError(f"{what}: expected local, auto{also} or HOST:PORT, got '{address}'{flag}")


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """`--ray`: the sources run on a Ray cluster. `address` "local" (an embedded Ray on this
    machine), "auto" or "host:port" (a running cluster), "processes" (worker processes on this
    machine, no Ray: several pipelines where one process's GIL binds), "" (one process, no
    cluster);
    `workers` "auto" (as many as the cluster's CPUs, or GPUs, hold) or a number; each worker's
    CPUs (2: fewer model loads and more sources batched together than 1-CPU workers, which
    ran as fast on one machine once unpinned) and GPUs; a unit whose worker died is tried at most
    `max_attempts` times; an idle worker takes up to `files_per_worker` files into one
    Pipeline (batched across them, one model load). A video file longer than its share of
    the workers is split at keyframes into frame ranges run by several workers, none shorter
    than `range_frames` (0: files are never split)."""

    address: str = ""
    workers: str = "auto"
    worker_cpus: float = 2.0
    worker_gpus: float = 0.0
    max_attempts: int = 3
    files_per_worker: int = 4
    range_frames: int = 2000

    def __post_init__(self) -> None:
        if self.address and self.address != PROCESSES:
            check_address(self.address, "cluster.address (--ray)")
        if self.workers != "auto" and not (self.workers.isdigit() and int(self.workers) > 0):
            raise ConfigError(f"cluster.workers: expected auto or a number > 0, got {self.workers}")
        if self.worker_cpus <= 0 or self.worker_gpus < 0:
            raise ConfigError(
                f"cluster.worker_cpus/worker_gpus: expected > 0 and >= 0, got"
                f" {self.worker_cpus}, {self.worker_gpus}"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"cluster.max_attempts: expected >= 1, got {self.max_attempts}")
        if self.range_frames < 0:
            raise ConfigError(
                f"cluster.range_frames: expected >= 0 (0: never split), got {self.range_frames}"
            )
        if self.files_per_worker < 1:
            raise ConfigError(
                f"cluster.files_per_worker: expected >= 1, got {self.files_per_worker}"
            )


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything `visionrt run` needs; each section is the options dataclass of its stage."""

    sources: tuple[str, ...] = ()
    model: str = ""
    backend: str = ""  # "": the runtime that reads the model file (backends.registry)
    source: SourceOptions = field(default_factory=SourceOptions)
    inference: BackendOptions = field(default_factory=BackendOptions)
    postprocess: PostprocessOptions = field(default_factory=PostprocessOptions)
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    depth: DepthConfig = field(default_factory=DepthConfig)
    # Zones and lines per source name (fuse.analytics): {cam: {zones: {door: [[x, y], ...]},
    # lines: {gate: [[x1, y1], [x2, y2]]}}}; they need pipeline.tracking.enabled.
    analytics: dict[str, Any] = field(default_factory=dict)
    # Per source frame size "HEIGHTxWIDTH": the detector (model, backend, inference) the sources
    # of that size run instead of the run's own; a plan fills it with what it proved on each
    # size (accuracy.geometry), where that differs from what runs on the others.
    sizes: dict[str, SizedDetector] = field(default_factory=dict)
    serve: ServeOptions = field(default_factory=ServeOptions)  # `visionrt serve` only
    cluster: ClusterOptions = field(default_factory=ClusterOptions)  # `run --ray`

    def __post_init__(self) -> None:
        if self.output.mot and not self.pipeline.tracking.enabled:
            raise ConfigError("--mot writes tracks: add --track")

    def source_files(self) -> SourceFiles:
        """The files each source gets, from the output and depth sections (depth's only
        with a depth model)."""
        output, depth = self.output, self.depth
        return SourceFiles(
            video=output.video,
            mot=output.mot,
            coco=output.coco,
            csv=output.csv,
            depth_video=bool(depth.model) and depth.video,
            depth_maps=depth.maps if depth.model else "",
            codec=output.codec,
            preset=output.preset,
            draw_regions=output.draw_regions,
        )


def _build(cls: type[Any], values: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if cls is RunConfig and "tasks" in unknown:  # read from a file by _tasks_as_sections
        raise ConfigError(
            "tasks: a list of tasks is read from a --config file; with --set, give its"
            " sections (model, depth.model, depth.on)"
        )
    if unknown:
        # A config file may also hold `tasks:` (read into the sections before this).
        known = sorted({*fields, "tasks"} if cls is RunConfig else fields)
        raise ConfigError(
            f"unknown option '{prefix}{unknown[0]}': expected one of"
            f" {', '.join(prefix + f for f in known)}"
        )
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{prefix}{name}: expected a section of options, got {value!r}")
            kwargs[name] = _build(hint, value, f"{prefix}{name}.")  # type: ignore[arg-type]
        elif cls is RunConfig and name == "sizes":
            kwargs[name] = _sizes(value)
        elif cls is RunConfig and name == "analytics":
            parse_analytics(value)  # its one-line errors, before anything loads
            kwargs[name] = value
        elif cls is ServeOptions and name == "events":  # checked by sinks.events, at start
            if not isinstance(value, dict):
                raise ConfigError(
                    f"serve.events: expected a section (mqtt, webhooks), got {value!r}"
                )
            kwargs[name] = value
        elif cls is RunConfig and name == "backend" and value is None:
            kwargs[name] = "null"  # YAML reads `backend: null` as None; it names the backend
        else:
            kwargs[name] = coerce(f"{prefix}{name}", value, hint)
    return cls(**kwargs)


def _sizes(value: Any) -> dict[str, SizedDetector]:
    """The `sizes` section: per frame size "HEIGHTxWIDTH", a detector with its model."""
    if not isinstance(value, dict):
        raise ConfigError(f"sizes: expected a section of frame sizes, e.g. 480x640, got {value!r}")
    sizes = {}
    for key, detector in value.items():
        size = size_key(parse_size_key(key))
        if not isinstance(detector, dict) or not detector.get("model"):
            raise ConfigError(f"sizes.{key}: expected a section with a model, got {detector!r}")
        sizes[size] = _build(SizedDetector, detector, f"sizes.{key}.")
    return sizes


def _set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    if not isinstance(value, dict):
        key = nested_key(key)  # a flat pipeline key of before, as its section's
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"option '{key}': expected section.key, e.g. postprocess.conf")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"option {key}: '{part}' is not a section")
        node = child
    if value == {} and isinstance(node.get(parts[-1]), dict):
        return  # an empty section merges nothing: it must not erase what a lower layer set
    node[parts[-1]] = value


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
    base: dict[str, Any] | None = None,
) -> RunConfig:
    """Defaults, then `base` (a plan's sections), then the YAML file at `path`, then
    `KEY=VALUE` overrides (values parsed as YAML), then `values` (a nested dict, e.g. explicit
    command-line flags)."""
    return _build(RunConfig, _layers(path, overrides, values, base), "")  # type: ignore[no-any-return]


def pipeline_options(**values: Any) -> PipelineOptions:
    """The `pipeline` section from keys as a config file gives them — sections
    (`tracking={"enabled": True}`) or the flat keys of before (`track=True`) — checked as
    `load_config` checks them."""
    tree: dict[str, Any] = {}
    for key, value in _flatten({"pipeline": values}, keep_empty=True):
        _set_dotted(tree, key, value)
    return _build(PipelineOptions, tree.get("pipeline", {}), "pipeline.")  # type: ignore[no-any-return]


def config_over(base: Mapping[str, Any], given: Mapping[str, Any]) -> RunConfig:
    """`given` (the user's settings as `given_options` reads them) over `base` (a plan's
    sections): what `load_config` makes of the same layers."""
    tree: dict[str, Any] = {}
    for key, value in _flatten(dict(base)):
        _set_dotted(tree, key, value)
    for key, value in _flatten(dict(given), keep_empty=True):
        _set_dotted(tree, key, value)
    return _build(RunConfig, tree, "")  # type: ignore[no-any-return]


def given_options(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What the user set, as a nested dict of the keys given in the file, `--set` and flags —
    defaults left out (`--precision fp32` is a choice even though fp32 is the default)."""
    return _layers(path, overrides, values, None)


def _layers(
    path: str | Path | None,
    overrides: list[str] | None,
    values: dict[str, Any] | None,
    base: dict[str, Any] | None,
) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in _flatten(base or {}):
        _set_dotted(tree, key, value)
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as err:
            raise ConfigError(f"cannot read config {path}: {err.strerror or err}") from err
        except UnicodeDecodeError as err:
            raise ConfigError(f"config {path} is not a text file ({err.reason})") from err
        except yaml.YAMLError as err:
            raise ConfigError(
                f"config {path} is not valid YAML: {str(err).splitlines()[0]}"
            ) from err
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {path}: expected a mapping at the top level")
        loaded = _tasks_as_sections(loaded)
        for key, value in _flatten(loaded, keep_empty=True):
            _set_dotted(tree, key, value)
    for override in overrides or []:
        key, sep, raw = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set '{override}': expected KEY=VALUE, e.g. postprocess.conf=0.4")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as err:
            problem = str(err).splitlines()[0]
            raise ConfigError(
                f"--set {key.strip()}: '{raw}' is not a valid value ({problem})"
            ) from err
        # Mappings merge key by key, as in the YAML file: `--set inference.settings={a: 1}`
        # keeps the other settings a lower layer gave.
        for dotted, leaf in _flatten({key.strip(): value}, keep_empty=True):
            _set_dotted(tree, dotted, leaf)
    for key, value in _flatten(values or {}):
        _set_dotted(tree, key, value)
    return tree


TASK_KINDS = ("detect", "depth")


def _tasks_as_sections(loaded: dict[str, Any]) -> dict[str, Any]:
    """A config's `tasks:` list — each `{kind: detect|depth, model: …, sources: [names], …}` —
    as the sections the run reads: the detector's `model`/`backend`/`inference`, and `depth`
    with `on` = its sources. The detector runs on every source; depth on those listed (all when
    none are)."""
    tasks = loaded.pop("tasks", None)
    if tasks is None:
        return loaded
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise ConfigError(
            "tasks: expected a list of mappings, e.g. - {kind: detect, model: m.onnx}"
        )
    loaded = dict(loaded)
    seen: set[str] = set()
    for index, task in enumerate(tasks):
        task = dict(task)
        kind = task.pop("kind", None)
        if kind not in TASK_KINDS:
            raise ConfigError(f"tasks[{index}].kind: expected detect or depth, got {kind!r}")
        if kind in seen:
            raise ConfigError(f"tasks[{index}]: a second {kind} task (one of each is supported)")
        seen.add(kind)
        sources = task.pop("sources", None) or []
        if not isinstance(sources, list):
            raise ConfigError(f"tasks[{index}].sources: expected a list of source names")
        if kind == "detect":
            if sources:
                raise ConfigError(
                    f"tasks[{index}].sources: the detector runs on every source; leave it out"
                )
            for key in ("model", "backend"):
                if key in task and key in loaded:
                    raise ConfigError(f"tasks[{index}].{key}: also given at the top level")
            unknown = set(task) - {"model", "backend", "inference"}
            if unknown:
                raise ConfigError(f"tasks[{index}]: unknown detect key {sorted(unknown)[0]!r}")
            inference = {**loaded.get("inference", {}), **task.pop("inference", {})}
            loaded.update(task)
            if inference:
                loaded["inference"] = inference
        else:
            loaded["depth"] = {**loaded.get("depth", {}), **task, "on": sources}
    return loaded


def _flatten(
    tree: dict[str, Any], prefix: str = "", keep_empty: bool = False
) -> list[tuple[str, Any]]:
    """Dotted keys and leaf values; None leaves are dropped unless `keep_empty` (a file's own
    `key: null` is a value, an unset flag is not)."""
    flat: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.extend(_flatten(value, f"{prefix}{key}.", keep_empty))
        elif value is not None or keep_empty:
            flat.append((f"{prefix}{key}", value))
    return flat
