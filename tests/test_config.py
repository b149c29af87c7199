"""Run configuration: coercion of every option type with one-line errors, and precedence
defaults < plan < YAML < --set < flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from visionrt.config import load_config
from visionrt.errors import ConfigError


@pytest.mark.parametrize(
    ("override", "check"),
    [
        ("output.video=false", lambda c: c.output.video is False),  # bool
        ("source.max_frames=7", lambda c: c.source.max_frames == 7),  # int
        ("postprocess.conf=1", lambda c: c.postprocess.conf == 1.0),  # int → float
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
