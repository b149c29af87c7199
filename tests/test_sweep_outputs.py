"""Issue #47's sweep, items 9 and 10: outputs that fail only as they are written (a full disk:
/dev/full) end in one line and exit 6, not a traceback after the work; and lines that named
flags a command lacks, or said the wrong thing, now name what is wrong and what to do."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write_tiny_depth_model, write_tiny_detector, write_video
from test_sweep_messages import cli_with_stderr as _cli

from visionrt.errors import SinkError

FULL = Path("/dev/full")  # every write: ENOSPC
NO_SPACE = os.strerror(errno.ENOSPC)
needs_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("outputs")
    return {
        "video": write_video(root / "small.mp4", frames=4),
        "model": write_tiny_detector(root / "tiny.onnx", [(32, 32, 20, 10, 0.9, 0.0)]),
    }


def _full(tmp_path: Path, name: str) -> Path:
    """A file name in `tmp_path` that stands for /dev/full: writable at the start (the checks
    before the work pass), full as the bytes are written."""
    link = tmp_path / name
    link.symlink_to(FULL)
    return link


# -- 9. an output file on a full disk -------------------------------------------------------

# argv (VIDEO, MODEL, OUT replaced; FULL the name standing for /dev/full), the flag named.
FULL_CASES = [
    ("bench VIDEO -m MODEL --variant null --runs 1 --calls 1 --max-frames 2 --json FULL",
     "--json"),
    ("bench VIDEO -m MODEL --variant null --runs 1 --calls 1 --max-frames 2 --report FULL",
     "--report"),
    ("bench VIDEO -m MODEL --variant null --calls 3 --find-batch 1 --json FULL", "--json"),
    ("profile VIDEO -m MODEL --backend null --max-frames 2 --no-video --no-plan -o OUT"
     " --trace FULL", "--trace"),
    ("export MODEL --to onnx-fp16 --no-fidelity --out OUT --json FULL", "--json"),
]  # fmt: skip


@needs_full
@pytest.mark.parametrize(("argv", "flag"), FULL_CASES, ids=[c[0][:40] for c in FULL_CASES])
def test_an_output_file_on_a_full_disk_is_one_line_after_the_work(
    argv: str, flag: str, media: dict[str, Path], tmp_path: Path, capsys
) -> None:
    full = _full(tmp_path, "out.html" if flag == "--report" else "out.json")
    names = {
        "VIDEO": media["video"],
        "MODEL": media["model"],
        "OUT": tmp_path / "out",
        "FULL": full,
    }
    args = [str(names.get(part, part)) for part in argv.split()]
    code, error, _ = _cli(args, capsys)
    assert error == f"visionrt: error: cannot write {flag} {full}: {NO_SPACE}"
    assert code == 6
    # The report's page failed first: no images of it beside, no partial file left.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file() and p != full) == []


@needs_full
def test_a_report_or_trace_the_library_writes_names_the_full_file(tmp_path: Path) -> None:
    from visionrt.bench.profile import Profile, write_trace
    from visionrt.bench.report import ReportPoint, write_report

    full = _full(tmp_path, "report.html")
    point = ReportPoint("a", 10.0, 20.0, stages={"infer": 5.0})
    with pytest.raises(SinkError) as raised:
        write_report([point], full, "tune")  # as `tune --report` does
    assert str(raised.value) == f"cannot write report {full}: {NO_SPACE}"
    profile = Profile(fps=0.0, frames=0, seconds=0.0, stage_ms={}, busy={}, queues=[],
                      cpu_by_thread={})  # fmt: skip
    with pytest.raises(SinkError) as raised:
        write_trace(profile, full)
    assert str(raised.value) == f"cannot write trace {full}: {NO_SPACE}"


def test_an_output_file_is_written_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.sinks.base import write_output

    path = write_output(tmp_path / "a" / "out.json", "[1]")
    assert path.read_text() == "[1]"
    write_bytes = Path.write_bytes

    def half_then_full(self: Path, data: bytes) -> int:
        write_bytes(self, data[:1])
        raise OSError(errno.ENOSPC, NO_SPACE, str(self))

    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    with pytest.raises(SinkError) as raised:
        write_output(path, b"[1, 2]", "--json")
    assert str(raised.value) == f"cannot write --json {path}: {NO_SPACE}"
    assert path.read_text() == "[1]"  # the earlier file, not half of the new one
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.json"]


def test_an_export_that_fills_the_disk_is_one_line_and_leaves_no_artifact(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.models import cache

    def full(folder: Path, report: Any) -> None:  # the last file the export writes
        raise OSError(errno.ENOSPC, NO_SPACE)

    monkeypatch.setattr(cache, "write_report", full)
    out = tmp_path / "artifacts"
    args = ["export", str(media["model"]), "--to", "onnx-fp16", "--no-fidelity", "--out", str(out)]
    code, error, _ = _cli(args, capsys)
    assert error == f"visionrt: error: cannot write the artifact in {out}: {NO_SPACE}"
    assert code == 6
    assert list(out.iterdir()) == []  # the staging folder is gone; nothing looks finished


@needs_full
@pytest.mark.parametrize("argv", [["doctor", "--json"]], ids=["doctor --json"])
def test_json_on_a_full_standard_output_is_one_line(argv: list[str]) -> None:
    with FULL.open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "visionrt.cli.main", *argv],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert done.stderr.splitlines() == [
        f"visionrt: error: cannot write --json to standard output: {NO_SPACE}"
    ]
    assert done.returncode == 6


# -- 10. lines that named flags a command lacks, or said the wrong thing ---------------------


def test_metrics_beyond_this_machine_name_the_settings_run_reads(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.cli import run

    def must_not_start(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model loaded before the metrics host was checked")

    monkeypatch.setattr(run, "start_pipeline", must_not_start)
    monkeypatch.delenv("VISIONRT_METRICS_TOKEN", raising=False)
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--backend", "null", "-q"]
    args += ["--out", str(tmp_path / "out"), "--set", "output.metrics_host=0.0.0.0"]
    code, error, _ = _cli([*args, "--set", "output.metrics_port=9464"], capsys)
    assert code == 2
    assert "output.metrics_host 0.0.0.0: serving metrics beyond this machine needs a token" in error
    assert "--set output.metrics_token=TOKEN" in error
    assert "VISIONRT_METRICS_TOKEN" in error
    assert "--metrics-token" not in error  # run has no such flag
    assert "--metrics-host" not in error


@pytest.mark.parametrize("command", ["run", "profile"])
def test_an_out_that_is_a_device_is_not_a_folder(
    command: str, media: dict[str, Path], capsys
) -> None:
    if not Path("/dev/null").exists():
        pytest.skip("no /dev/null on this system")
    args = [command, str(media["video"]), "-m", str(media["model"]), "--backend", "null"]
    code, error, _ = _cli([*args, "--no-video", "--out", "/dev/null"], capsys)
    assert error.endswith(": /dev/null is not a folder"), error
    assert "File exists" not in error
    assert code == 6


def test_check_writable_says_a_device_is_not_a_folder() -> None:
    from visionrt.sinks.base import check_writable

    with pytest.raises(SinkError, match=r"^cannot write --out /dev/null: it is not a folder$"):
        check_writable(Path("/dev/null"), "--out", folder=True)


def test_a_pipeline_takes_one_source_given_as_a_string(media: dict[str, Path]) -> None:
    from visionrt import Pipeline

    for given in (str(media["video"]), media["video"]):
        pipeline = Pipeline(given, media["model"], "null")  # type: ignore[arg-type]
        try:
            assert len(pipeline.sources) == 1
            assert pipeline.names == ["small"]
            assert sum(1 for _ in pipeline) == 4
        finally:
            pipeline.close()


def _plan_with_a_lost_artifact(model: Path, root: Path, depth: bool = False) -> tuple[Path, Path]:
    from visionrt.paths import file_sha256
    from visionrt.plans import Plan
    from visionrt.plans.store import machine_fingerprint, plan_path

    artifact = root.parent / "deleted" / "model.xml"  # never made: deleted since the tune
    tuned: dict[str, Any] = {"source_model": str(model), "source_sha256": file_sha256(model)}
    if depth:
        tuned["task"] = "depth"
    plan = Plan(run={"model": str(artifact), "backend": "openvino", "inference": {}},
                tuned={**tuned, "fingerprint": machine_fingerprint()})  # fmt: skip
    return plan.save(plan_path(model, machine_fingerprint(), root)), artifact


def test_a_plan_whose_artifact_is_gone_says_so_and_what_to_run(tmp_path: Path) -> None:
    from visionrt.plans import PlanRequest, use_plan

    model = write_tiny_detector(tmp_path / "detector.onnx", [(32, 32, 20, 10, 0.9, 0.0)])
    root = tmp_path / "plans"
    plan_file, artifact = _plan_with_a_lost_artifact(model, root)
    use = use_plan(PlanRequest(model=model), root=root)
    assert use.sections is None  # the run goes on with the FP32 reference, as before
    assert f"plan {plan_file.name} set aside: its artifact {artifact} is missing" in use.note
    assert "`visionrt tune` again" in use.note
    assert "no tuned plan" not in use.note
    # With the plan file gone too: nothing was tuned.
    plan_file.unlink()
    assert use_plan(PlanRequest(model=model), root=root).note.startswith("no tuned plan for")


def test_a_depth_plan_whose_artifact_is_gone_says_so(tmp_path: Path) -> None:
    from visionrt.plans.resolve import use_depth_plan

    model = write_tiny_depth_model(tmp_path / "depth.onnx")
    root = tmp_path / "plans"
    plan_file, artifact = _plan_with_a_lost_artifact(model, root, depth=True)
    use = use_depth_plan(model, (), None, root)
    assert f"depth plan {plan_file.name} set aside: its artifact {artifact} is missing" in use.note
    assert "`visionrt tune --depth depth.onnx` again" in use.note
    assert "no tuned depth plan" not in use.note


def test_a_full_disk_names_the_video_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyAV's error text repeats the file's path after the reason; the line says it once."""
    import numpy as np

    from visionrt.sinks import VideoSink
    from visionrt.sinks.base import partial_path
    from visionrt.sinks.encoder import Encoder
    from visionrt.types import Detections, Frame, FrameResult

    path = tmp_path / "out.mp4"
    partial = partial_path(path)
    sink = VideoSink(path, fps=25)
    image = np.zeros((48, 64, 3), np.uint8)
    frame = Frame(source_id=0, index=0, pixels=image, timestamp=0.0, captured_at=0.0)
    sink.write(FrameResult(frame, Detections.empty(), {}))
    container = sink._container

    class FullAtClose:
        def __getattr__(self, name: str) -> Any:
            return getattr(container, name)

        def close(self) -> None:
            container.close()
            raise OSError(errno.ENOSPC, NO_SPACE, str(partial))  # as PyAV raises it

    monkeypatch.setattr(sink, "_container", FullAtClose())
    with pytest.raises(SinkError) as raised:
        sink.close()
    assert str(raised.value) == f"cannot finalize {path}: {NO_SPACE}"

    class FullStream:
        def encode(self, frame: Any) -> Any:
            raise OSError(errno.ENOSPC, NO_SPACE, str(partial))

    class Container:
        def mux(self, packets: Any) -> None:
            pass

    encoder = Encoder(Container(), FullStream(), str(partial))
    encoder.put(image)
    with pytest.raises(SinkError) as raised:
        encoder.finish()
    assert str(raised.value) == f"cannot write {partial}: {NO_SPACE}"


def test_a_summary_that_could_not_be_written_is_not_said_written(
    media: dict[str, Path], tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    from visionrt.pipeline import outputs

    def full(summary: Any, path: Path) -> None:
        raise SinkError(f"cannot write {path}: {NO_SPACE}")

    monkeypatch.setattr(outputs, "write_summary", full)
    monkeypatch.setenv("COLUMNS", "1000")  # each "wrote" line on one line
    out = tmp_path / "out"
    args = ["run", str(media["video"]), "-m", str(media["model"]), "--backend", "null"]
    code, error, stderr = _cli([*args, "--no-video", "--out", str(out)], capsys)
    assert error == f"visionrt: error: cannot write {out / 'summary.json'}: {NO_SPACE}"
    assert code == 6
    assert f"wrote {out / 'small.jsonl'}" in stderr
    assert "summary.json" not in stderr.replace(error, "")
