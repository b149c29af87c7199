"""Run configuration: coercion of every option type with one-line errors, and precedence
defaults < plan < YAML < --set < flags."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from visionrt.cli.run_config import flag_values
from visionrt.config import load_config, pipeline_options
from visionrt.config.pipeline import AuditOptions, SloOptions
from visionrt.errors import ConfigError
from visionrt.fuse.track_options import TrackingOptions
from visionrt.preprocess.motion import MotionOptions
from visionrt.preprocess.tile import TileOptions


@pytest.mark.parametrize(
    ("override", "check"),
    [
        ("output.video=false", lambda c: c.output.video is False),  # bool
        ("source.max_frames=7", lambda c: c.source.max_frames == 7),  # int
        ("postprocess.conf=1", lambda c: c.postprocess.conf == 1.0),  # int → float
        ("postprocess.conf=1e-3", lambda c: c.postprocess.conf == 0.001),  # YAML 1.1: a string
        ("pipeline.stale_after=.inf", lambda c: c.pipeline.stale_after == float("inf")),
        ("output.jsonl=no", lambda c: c.output.jsonl is False),  # YAML 1.1 booleans
        ("model=42", lambda c: c.model == "42"),  # number → str
        ("sources=[a.mp4, b.mp4]", lambda c: c.sources == ("a.mp4", "b.mp4")),  # tuple[str, ...]
        ("inference.input_size=[512, 640]", lambda c: c.inference.input_size == (512, 640)),
        ("inference.input_size=null", lambda c: c.inference.input_size is None),  # Optional
        ("postprocess.classes=[0, 2]", lambda c: c.postprocess.classes == (0, 2)),
        (
            "inference.settings={hint: throughput}",
            lambda c: c.inference.settings["hint"] == "throughput",
        ),
        ("backend=null", lambda c: c.backend == "null"),  # YAML's null names the null backend
        ("backend=", lambda c: c.backend == ""),  # empty: the runtime that reads the file
        ("inference.cache_dir=/tmp/c", lambda c: c.inference.cache_dir == Path("/tmp/c")),
        (
            "inference.settings.hint=throughput",
            lambda c: c.inference.settings["hint"] == "throughput",
        ),
        ("inference.settings.nstreams=2", lambda c: c.inference.settings["nstreams"] == "2"),
    ],
)
def test_coercion(override: str, check) -> None:
    assert check(load_config(overrides=[override]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("output.video=maybe", "output.video: expected true or false, got 'maybe'"),
        ("source.max_frames=1.5", "source.max_frames: expected an integer, got 1.5"),
        ("postprocess.conf=high", "postprocess.conf: expected a number, got 'high'"),
        ("postprocess.conf=.nan", "postprocess.conf: expected a number, got nan"),
        ("postprocess.conf=true", "postprocess.conf: expected a number, got True"),
        ("source.max_frames=yes", "source.max_frames: expected an integer, got 'yes'"),
        ("inference.cache_dir=[1]", "inference.cache_dir: expected a path"),
        ("inference.input_size=abc", "inference.input_size: expected 2 values"),
        ("inference.input_size=[a, b]", "inference.input_size: expected an integer, got 'a'"),
        ("postprocess.classes=[0, x]", "postprocess.classes: expected an integer, got 'x'"),
        ("inference.device=cuda:abc", "inference.device: expected one of"),
        ("inference.device='cuda:'", "inference.device: expected one of"),
        ("source..mode=file", "expected section.key"),
        ("source.mode.x=1", "source.mode: expected a string"),
        ("model=[1]", "model: expected a string"),
        ("inference.input_size=[1, 2, 3]", "inference.input_size: expected 2 values"),
        ("inference.settings=5", "expected a mapping"),
        ("inference=5", "inference: expected a section of options"),
        ("nope=1", "unknown option 'nope'"),
        ("postprocess.conf=[1,", "--set postprocess.conf"),
        ("novalue", "expected KEY=VALUE"),
    ],
)
def test_coercion_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(overrides=[override])


def test_precedence(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("postprocess: {conf: 0.3, iou: 0.5}\nsource: {max_frames: 9}\n")
    plan = {"backend": "openvino", "inference": {"precision": "int8"}, "postprocess": {"conf": 0.1}}
    cfg = load_config(
        config,
        ["postprocess.iou=0.6", "source.max_frames=8"],
        {"source": {"max_frames": 7}, "backend": None},
        base=plan,
    )
    assert cfg.backend == "openvino"  # plan; an unset flag (None) does not override it
    assert cfg.inference.precision == "int8"  # plan
    assert cfg.postprocess.conf == 0.3  # YAML over plan
    assert cfg.postprocess.iou == 0.6  # --set over YAML
    assert cfg.source.max_frames == 7  # flag over --set
    assert cfg.inference.threads == 0  # default


def test_defaults() -> None:
    cfg = load_config()
    assert cfg.backend == ""  # the runtime that reads the model file
    assert cfg.inference.precision == "fp32"


def test_a_yaml_null_backend_names_the_null_backend(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("backend: null\n")
    assert load_config(config).backend == "null"
    # Depth's too, in a file and with --set (it was refused: "expected a string, got None").
    config.write_text("depth: {backend: null}\n")
    assert load_config(config).depth.backend == "null"
    assert load_config(overrides=["depth.backend=null"]).depth.backend == "null"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (bytes(range(256)), "is not a text file"),
        (b"- a\n- b\n", "expected a mapping at the top level"),
        (b"a: [1,\n", "is not valid YAML"),
        (b"source: 5\n", "source: expected a section of options"),
        (b"bogus: 1\n", "unknown option 'bogus'"),
    ],
)
def test_bad_config_files(tmp_path: Path, content: bytes, message: str) -> None:
    config = tmp_path / "run.yaml"
    config.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_config(config)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path)  # a folder


def test_mappings_merge_key_by_key_across_layers(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("inference: {settings: {hint: latency}}\nsource: {}\n")
    plan = {"inference": {"settings": {"nstreams": "2"}}, "source": {"max_frames": 9}}
    cfg = load_config(config, ["inference.settings={hint: throughput}"], base=plan)
    assert dict(cfg.inference.settings) == {"nstreams": "2", "hint": "throughput"}
    assert cfg.source.max_frames == 9  # an empty section in the file erases nothing


def test_flags_beat_everything_and_unset_flags_nothing(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("backend: openvino\ninference: {threads: 3}\n")
    flags = {"backend": "null", "inference": {"threads": None, "batch": 2}}
    cfg = load_config(config, ["backend=torch", "inference.batch=4"], flags)
    assert (cfg.backend, cfg.inference.threads, cfg.inference.batch) == ("null", 3, 2)


def test_tasks_list_with_the_sources_each_runs_on(tmp_path: Path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(
        "sources: [rgb=cam0.mp4, slam1=cam1.mp4, slam2=cam2.mp4]\n"
        "tasks:\n"
        "  - {kind: detect, model: yolo.onnx, inference: {precision: int8}}\n"
        "  - {kind: depth, model: depth.onnx, sources: [rgb], short_side: 266}\n",
        encoding="utf-8",
    )
    config = load_config(path)
    assert (config.model, config.inference.precision) == ("yolo.onnx", "int8")
    assert (config.depth.model, config.depth.on, config.depth.short_side) == (
        "depth.onnx",
        ("rgb",),
        266,
    )


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ("[{kind: track}]", r"tasks\[0\]\.kind: expected detect or depth, got 'track'"),
        ("[{kind: detect, model: a.onnx, sources: [rgb]}]", "the detector runs on every source"),
        ("[{kind: depth, model: a}, {kind: depth, model: b}]", "a second depth task"),
        ("{kind: detect}", "tasks: expected a list of mappings"),
        ("[{kind: detect, modle: a.onnx}]", "unknown detect key 'modle'"),
    ],
)
def test_bad_tasks_lists_are_one_line_errors(tmp_path: Path, tasks: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"tasks: {tasks}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_each_pipeline_policy_is_its_own_section(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        "pipeline:\n"
        "  queue_size: 2\n"
        "  tracking: {enabled: true, detect_every: 3, match_iou: 0.3}\n"
        "  slo: {target_ms: 80, sizes: [480, 384]}\n"
        "  tiling: {tile: 640, overlap: 0.25}\n"
        "  motion: {mode: skip, min_area: 0.005}\n"
        "  audit: {share: 0.1, window: 12}\n",
        encoding="utf-8",
    )
    pipeline = load_config(config).pipeline
    assert pipeline.queue_size == 2
    assert pipeline.tracking == TrackingOptions(enabled=True, detect_every=3, match_iou=0.3)
    assert pipeline.slo == SloOptions(target_ms=80.0, sizes=(480, 384))
    assert pipeline.tiling == TileOptions(tile=640, overlap=0.25)
    assert pipeline.motion == MotionOptions(mode="skip", min_area=0.005)
    assert pipeline.audit == AuditOptions(share=0.1, window=12)
    # Each section's own tracker options, with the run's confidence split.
    assert pipeline.tracking.options(0.5, 0.1).match_iou == 0.3


def test_the_flat_pipeline_keys_of_before_set_the_keys_they_name(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        "pipeline: {track: true, detect_every: 3, track_match_iou: 0.3, slo_ms: 80,"
        " slo_sizes: [480, 384], tile: 640, tile_overlap: 0.25, motion: skip,"
        " motion_min_area: 0.005, audit: 0.1, audit_window: 12}\n",
        encoding="utf-8",
    )
    flat = load_config(config).pipeline
    nested = pipeline_options(
        tracking={"enabled": True, "detect_every": 3, "match_iou": 0.3},
        slo={"target_ms": 80, "sizes": [480, 384]},
        tiling={"tile": 640, "overlap": 0.25},
        motion={"mode": "skip", "min_area": 0.005},
        audit={"share": 0.1, "window": 12},
    )
    assert flat == nested
    # Layers mix both: a flat --set over a file's section, a section's key over a flat one.
    regions = ["pipeline.motion=regions", "pipeline.tiling.tile=0"]
    assert load_config(config, regions).pipeline.motion.mode == "regions"
    mixed = load_config(config, ["pipeline.motion.min_area=0.01", "pipeline.track_per_class=true"])
    assert (mixed.pipeline.motion.mode, mixed.pipeline.motion.min_area) == ("skip", 0.01)
    assert mixed.pipeline.tracking.per_class is True
    # The flags reach the section keys.
    assert flag_values(motion="skip", detect_every=2, tile=640, audit=0.1) == {
        "pipeline": {
            "motion": {"mode": "skip"},
            "tracking": {"detect_every": 2},
            "tiling": {"tile": 640},
            "audit": {"share": 0.1},
        }
    }


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("pipeline.tracking.nope=1", "unknown option 'pipeline.tracking.nope': expected one of"
         " pipeline.tracking.detect_every, pipeline.tracking.enabled"),
        ("pipeline.tracking=5", "pipeline.tracking: expected a section of options"),
        ("pipeline.motion.mode=roi", "pipeline.motion.mode (--motion): expected off, skip or"),
        ("pipeline.motion=roi", "pipeline.motion.mode (--motion): expected off, skip or"),
        ("pipeline.tracking.detect_every=2", "frames between detections need tracking"),
        ("pipeline.slo.target_ms=-1", "pipeline.slo.target_ms: expected 0 (off)"),
        ("pipeline.tiling.tile=16", "--tile: expected a whole number of pixels >= 32"),
    ],
)  # fmt: skip
def test_a_bad_section_key_is_one_line_naming_it(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(overrides=[override])
