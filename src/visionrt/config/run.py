"""The run configuration (`RunConfig`): a section per stage, each that stage's options, and the
sections that belong to no stage: where the outputs go, the depth model's outputs, a cluster."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from visionrt.backends import BackendOptions
from visionrt.config.pipeline import DepthOptions, PipelineOptions
from visionrt.config.serve import ServeOptions
from visionrt.config.sizes import SizedDetector
from visionrt.errors import ConfigError
from visionrt.postprocess import PostprocessOptions
from visionrt.sinks.files import SourceFiles
from visionrt.sources import SourceOptions


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """Where results go: the folder for the files, which files each source gets, the
    per-second telemetry file and the metrics served while the run lasts."""

    dir: str = "out"
    """The folder the run's files go to."""
    video: bool = True
    """An annotated MP4 per source (NAME.mp4)."""
    jsonl: bool = True
    """The detections as JSON lines: NAME.jsonl for one source, detections.jsonl for several."""
    telemetry: str = ""
    """A file to write a JSON line of telemetry to each second ("": none)."""
    mot: bool = False
    """MOTChallenge text per source (NAME.mot.txt; needs pipeline.tracking.enabled)."""
    coco: bool = False
    """COCO results JSON per source (NAME.coco.json)."""
    csv: bool = False
    """CSV per source, a row per detection (NAME.csv)."""
    codec: str = "libx264"
    """The FFmpeg encoder of the MP4s (one PyAV can open for writing)."""
    preset: str = "veryfast"
    """libx264's speed/size preset, ultrafast to veryslow: veryfast ~4 ms of CPU per 768×576
    frame, ultrafast ~2 ms at 3× the size."""
    metrics_port: int = 0
    """Serve Prometheus metrics at http://metrics_host:metrics_port/metrics while the run lasts
    (0: off; else 1 to 65535)."""
    metrics_host: str = "127.0.0.1"
    """The address metrics listen on: localhost unless opened up on purpose, and then only with
    a `metrics_token`."""
    metrics_token: str = ""
    """The token every scrape must send ("": VISIONRT_METRICS_TOKEN's); needed beyond
    localhost."""
    draw_regions: bool = False
    """With motion gating, the annotated video also shows where the frame moved and the windows
    the detector ran on (thin, under the detections): to see what gating did, not for viewers."""
    overwrite: bool = False
    """Remove an earlier run's outputs in `dir` first (its summary.json and what it lists,
    unfinished files, files of this run's names); without it they refuse the run."""

    def __post_init__(self) -> None:
        if not 0 <= self.metrics_port <= 65535:
            raise ConfigError(
                f"output.metrics_port: expected 0 (off) or 1 to 65535, got {self.metrics_port}"
            )


@dataclass(frozen=True, slots=True)
class DepthConfig(DepthOptions):
    """The depth model as the pipeline runs it (DepthOptions), and its outputs."""

    video: bool = True
    """A colourised depth MP4 per source the depth model runs on (NAME.depth.mp4)."""
    maps: str = ""
    """Every depth map as a file in NAME.depth/: png (16-bit), npy, or "" (none)."""

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
    """`--ray`: the sources run on several workers, of a Ray cluster or worker processes of
    this machine; a long video file is split into frame ranges that several workers run."""

    address: str = ""
    """local (an embedded Ray on this machine), auto or HOST:PORT (a running cluster),
    processes (worker processes on this machine, no Ray: several pipelines where one process's
    GIL binds), or "" (one process, no cluster)."""
    workers: str = "auto"
    """How many workers: auto (as many as the cluster's CPUs, or GPUs, hold; for processes,
    this machine's cores ÷ `worker_cpus`) or a number above 0."""
    worker_cpus: float = 2.0
    """CPUs per worker, above 0 (2: fewer model loads and more sources batched together than
    1-CPU workers, which ran as fast on one machine once unpinned)."""
    worker_gpus: float = 0.0
    """GPUs per Ray worker (0 or more)."""
    max_attempts: int = 3
    """Tries of a unit of work whose worker died (1 or more)."""
    files_per_worker: int = 4
    """Files an idle worker takes into one Pipeline, batched across them with one model load
    (1 or more)."""
    range_frames: int = 2000
    """A video file longer than its share of the workers is split at keyframes into frame
    ranges of at least this many frames, run by several workers (0: files are never split)."""

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
    """What to read: video files, image files, folders or globs, cameras (/dev/videoN or an
    index), stream URLs, synthetic:WIDTHxHEIGHT:FRAMES; NAME=SOURCE names one (none: the demo
    video)."""
    model: str = ""
    """The detector: an ONNX file, OpenVINO .xml, .pt or TensorRT .engine ("": the demo
    model)."""
    backend: str = ""  # backends.registry
    """The runtime: onnxruntime, openvino, torch, tensorrt, null, or auto (the fastest here for
    the device); "": the one that reads the model file."""
    source: SourceOptions = field(default_factory=SourceOptions)
    inference: BackendOptions = field(default_factory=BackendOptions)
    postprocess: PostprocessOptions = field(default_factory=PostprocessOptions)
    pipeline: PipelineOptions = field(default_factory=PipelineOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    depth: DepthConfig = field(default_factory=DepthConfig)
    analytics: dict[str, Any] = field(default_factory=dict)  # fuse.analytics
    """Zones and lines per source name, in source pixels: {cam: {zones: {door: [[x, y], ...]},
    lines: {gate: [[x1, y1], [x2, y2]]}}}; they need pipeline.tracking.enabled."""
    sizes: dict[str, SizedDetector] = field(default_factory=dict)  # accuracy.geometry
    """Per source frame size "HEIGHTxWIDTH": the detector the sources of that size run instead
    of the run's own (its section below); a plan fills it with what it proved on each size,
    where that differs from what runs on the others."""
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
