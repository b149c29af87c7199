"""One rule for a run's outputs, whatever the entry point (issue #47): the Python API writes what
`run` writes, `run_on_ray` writes summary.json and runs the demo model where none is named, and an
earlier run's outputs are refused unless `output.overwrite`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from visionrt.errors import ConfigError, SinkError
from visionrt.pipeline.outputs import OutputFolder, check_output_names
from visionrt.runs import run_configured


def _config(tmp_path: Path, video: Path, model: Path, out: Path, extra: str = "") -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        f"sources: [{video}]\nmodel: {model}\noutput: {{dir: {out}}}\n{extra}", encoding="utf-8"
    )
    return path


def test_the_python_api_writes_what_run_writes_by_the_same_rule(
    tmp_path: Path, small_video: Path, tiny_model: Path
) -> None:
    out = tmp_path / "out"
    config = _config(tmp_path, small_video, tiny_model, out)
    summary = run_configured(config, no_plan=True)
    assert summary.frames_out == 40
    assert sorted(p.name for p in out.iterdir()) == ["small.jsonl", "small.mp4", "summary.json"]
    written = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert written["frames_out"] == 40
    assert str(out / "summary.json") in written["outputs"]
    assert len((out / "small.jsonl").read_text().splitlines()) == 40
    # A second run into the folder is refused, as `run` refuses it, and changes nothing.
    before = (out / "summary.json").stat().st_mtime_ns
    with pytest.raises(ConfigError, match=r"holds another run's outputs .*--overwrite"):
        run_configured(config, no_plan=True)
    assert (out / "summary.json").stat().st_mtime_ns == before
    again = run_configured(config, ["output.overwrite=true", "source.max_frames=5"], no_plan=True)
    assert again.frames_out == 5
    assert json.loads((out / "summary.json").read_text())["frames_out"] == 5


def test_a_folder_is_claimed_by_one_run_at_a_time(tmp_path: Path) -> None:
    from visionrt.config import load_config

    cfg = load_config(None, [f"output.dir={tmp_path / 'out'}", "sources=[a.mp4]"])
    with (
        OutputFolder.for_run(cfg, "the first"),
        pytest.raises(SinkError, match=r"in use by the first"),
    ):
        OutputFolder.for_run(cfg, "the second")
    assert check_output_names(cfg) == ["a.mp4", "a.jsonl", *_partials("a"), "summary.json"]


def _partials(name: str) -> list[str]:
    return [f"{name}.partial.mp4", f"{name}.partial.jsonl"]


def test_run_on_ray_writes_its_summary_and_runs_the_demo_model_where_none_is_named(
    tmp_path: Path, small_video: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/cluster.md's snippet with its YAML (no model): `frames_out` 0, no error and no
    summary.json before."""
    import visionrt.pipeline.plan_run as plan_run
    from visionrt.config import load_config
    from visionrt.distributed import run_on_ray

    monkeypatch.setattr(plan_run, "demo_model_path", lambda: Path(_tiny(tmp_path)))
    out = tmp_path / "out"
    cfg = load_config(
        None,
        [
            f"sources=[{small_video}]",
            f"output.dir={out}",
            "output.video=false",
            "cluster.address=processes",
            "cluster.workers=1",
            "cluster.worker_cpus=1",
        ],
    )
    summary, report = run_on_ray(cfg)
    assert summary.frames_out == 40
    assert not report.failed
    written = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert written["frames_out"] == 40


def _tiny(tmp_path: Path) -> Path:
    from conftest import write_tiny_detector

    path = tmp_path / "demo.onnx"
    if not path.exists():
        write_tiny_detector(path, [(32, 32, 20, 10, 0.9, 0.0)])
    return path
