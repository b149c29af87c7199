"""YAML as visionrt reads it, everywhere it is read (configs, `--set`, plans): the words users
type stay words, a key given twice is refused, an alias bomb is refused before it expands, and a
plan whose values have the wrong type is named in one line with the fix (issue #47, items 3, 5,
6 and 7)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from visionrt.config.load import load_config
from visionrt.errors import ConfigError, SinkError
from visionrt.paths import file_sha256
from visionrt.plans.store import Plan, cached_plan, machine_fingerprint, plan_path
from visionrt.yaml_text import MAX_NODES, load_yaml


def _bomb(levels: int, under: str) -> str:
    """A "billion laughs" document: 9**levels strings once its aliases are expanded, nested
    under the dotted section `under`."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]")
    indent = ""
    head = []
    for part in under.split("."):
        head.append(f"{indent}{part}:")
        indent += "  "
    return "\n".join([*head, *(indent + line for line in lines)]) + "\n"


@pytest.mark.parametrize("under", ["inference.settings", "analytics.door.zones", "pipeline.motion"])
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path, under: str) -> None:
    # 9**7 = 4.8 million strings: read and layered as before, it built every one of them
    # (9**10 took 35–45 s and all memory before a MemoryError).
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(7, under), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"aliases expand past 100,000 values") as caught:
        load_config(path)
    assert str(path) in str(caught.value)


def test_aliases_under_the_bound_still_work() -> None:
    text = "base: &b {conf: 0.4, iou: 0.5}\npostprocess:\n  <<: *b\n  conf: 0.6\nmore: [*b, *b]\n"
    loaded = load_yaml(text, "config x")
    assert loaded["postprocess"] == {"conf": 0.6, "iou": 0.5}  # a merged key may be overridden
    assert loaded["more"] == [{"conf": 0.4, "iou": 0.5}] * 2
    small = _bomb(5, "a")  # 9**5 = 59,049 strings: under the bound
    assert MAX_NODES > 9**5
    assert len(load_yaml(small, "x")["a"]["l4"]) == 9


def test_an_alias_inside_what_it_names_is_refused() -> None:
    with pytest.raises(ConfigError, match="an alias refers to the section that holds it"):
        load_yaml("a: &a [1, *a]\n", "config x")


def test_the_words_of_the_run_guide_mean_what_they_say(tmp_path: Path) -> None:
    """docs/guides/run.md writes `mode: off` and `depth: {on: [cam]}`: YAML 1.1 read them as
    False and True ("expected a string, got False"; "unknown option 'depth.True'")."""
    path = tmp_path / "run.yaml"
    path.write_text(
        "pipeline: {motion: {mode: off}, tracking: {enabled: yes}}\n"
        "depth: {model: d.onnx, on: [cam]}\n",
        encoding="utf-8",
    )
    config = load_config(path)
    assert config.pipeline.motion.mode == "off"
    assert config.pipeline.tracking.enabled is True  # a switch takes yes/no/on/off
    assert config.depth.on == ("cam",)
    assert load_config(None, ["pipeline.motion.mode=off"]).pipeline.motion.mode == "off"
    assert load_config(None, ["pipeline.tracking.enabled=on"]).pipeline.tracking.enabled
    assert load_config(None, ["pipeline.tracking.enabled=true"]).pipeline.tracking.enabled
    assert not load_config(None, ["pipeline.tracking.enabled=No"]).pipeline.tracking.enabled


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("postprocess:\n  conf: 0.9\nsource: {}\npostprocess:\n  iou: 0.5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "key 'postprocess' is given twice (lines 1 and 4)" in message
    assert str(path) in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=r"key 'conf' is given twice \(lines 1 and 1\)"):
        load_config(None, ["postprocess={conf: 0.2, conf: 0.3}"])


def test_not_yaml_is_one_line_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("postprocess: [1,\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"is not valid YAML: .*\(line \d+, column \d+\)"):
        load_config(path)


# -- plans ------------------------------------------------------------------------------------


def _plan(model: Path, artifact: Path) -> Plan:
    return Plan(
        run={
            "model": str(artifact),
            "backend": "onnxruntime",
            "inference": {"device": "cpu", "precision": "fp32", "batch": 1},
        },
        tuned={
            "at": "2026-12-01T10:00:00+00:00",
            "measured": {"fps": 50.0, "fidelity": 0.98},
            "input_hw": [640, 640],
            "source_model": str(model),
            "source_sha256": file_sha256(model),
            "fingerprint": machine_fingerprint(),
        },
    )


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("batch: 1", "inference.batch: expected int, got 'lots'"),
        ("fps: 50.0", "tuned.measured.fps: expected a number, got 'fast'"),
        ("- 640\n  - 640", "tuned.input_hw: expected [height, width]"),
    ],
)
def test_a_plan_with_a_wrong_value_is_named_with_the_fix(
    tmp_path: Path, tiny_model: Path, edit: str, named: str
) -> None:
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    plan = _plan(model, model)
    path = plan.save(plan_path(model, machine_fingerprint(), tmp_path / "plans"))
    text = path.read_text(encoding="utf-8")
    assert edit in text
    bad = {"batch: 1": "batch: lots", "fps: 50.0": "fps: fast", "- 640\n  - 640": "- 640"}[edit]
    path.write_text(text.replace(edit, bad), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        cached_plan(model, tmp_path / "plans")
    message = str(caught.value)
    assert named in message
    assert "`visionrt tune` writes a new one" in message
    assert str(path) in message


def test_a_cached_plan_that_records_another_model_is_not_used(
    tmp_path: Path, tiny_model: Path
) -> None:
    model = tmp_path / "detector.onnx"
    shutil.copy(tiny_model, model)
    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes() + b"\0")
    root = tmp_path / "plans"
    plan = _plan(other, model)  # tuned for `other`, yet filed under `model`'s name
    plan.save(plan_path(model, machine_fingerprint(), root))
    assert cached_plan(model, root) is None
    _plan(model, model).save(plan_path(model, machine_fingerprint(), root))
    found = cached_plan(model, root)
    assert found is not None


def test_a_plan_saved_to_a_device_writes_there_and_leaves_it_a_device(
    tmp_path: Path, tiny_model: Path
) -> None:
    """Renamed over, /dev/full would have become a file (the process runs as root here)."""
    plan = _plan(tiny_model, tiny_model)
    with pytest.raises(SinkError, match=r"cannot write plan /dev/full: No space left on device"):
        plan.save(Path("/dev/full"))
    assert Path("/dev/full").is_char_device()
    assert not Path("/dev/full.partial").exists()
    saved = plan.save(tmp_path / "plan.yaml")
    assert Plan.load(saved).run == plan.run
