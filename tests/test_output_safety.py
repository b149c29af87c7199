"""Nothing is lost: two sources never share an output file (names made unique, collisions refused
up front), and two runs never write into one output folder at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_SECONDS, run_cli, until

from visionrt.errors import SinkError
from visionrt.sinks.lock import OutputLock
from visionrt.sources.naming import unique_names


@pytest.mark.parametrize(
    ("names", "given", "expected"),
    [
        (["vtest", "vtest", "vtest-1"], [False, False, True], ["vtest", "vtest-2", "vtest-1"]),
        (["a", "a", "a"], [False, False, False], ["a", "a-1", "a-2"]),
        (["a-1", "a", "a"], [True, False, False], ["a-1", "a", "a-2"]),
    ],
)
def test_default_names_never_take_a_given_one(
    names: list[str], given: list[bool], expected: list[str]
) -> None:
    assert unique_names(names, given) == expected
    assert len(set(unique_names(names, given))) == len(names)


def test_repeated_sources_write_their_own_files(
    small_video: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, err = run_cli(
        ["run", str(small_video), str(small_video), f"small-1={small_video}", "-m",
         str(tiny_model), "--no-plan", "-o", str(out), "-q", "--max-frames", "3"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    names = [s["name"] for s in summary["sources"]]
    assert sorted(names) == ["small", "small-1", "small-2"]
    assert {p.name for p in out.glob("*.mp4")} == {f"{n}.mp4" for n in names}


def test_output_files_that_would_collide_are_refused_up_front(
    small_video: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`a` writes a.depth.mp4 with a depth model, and a source named `a.depth` writes
    a.depth.mp4 too: one would overwrite the other."""
    clip = tmp_path / "a.depth.mp4"
    clip.write_bytes(small_video.read_bytes())
    out = tmp_path / "out"
    code, err = run_cli(
        ["run", f"a={small_video}", str(clip), "-m", str(tiny_model), "--no-plan", "--depth",
         str(tiny_model), "-o", str(out), "-q"],
        capsys,
    )  # fmt: skip
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert "sources 'a' and 'a.depth' would both write a.depth.mp4" in line, line
    assert not out.exists() or not list(out.glob("*.mp4"))


def test_the_lock_names_its_owner_and_is_released(tmp_path: Path) -> None:
    first = OutputLock(tmp_path / "out").acquire()
    with pytest.raises(SinkError, match=r"in use by visionrt run \(pid \d+"):
        # Another open file description of the same lock file: flock refuses it, as it
        # refuses another process.
        OutputLock(tmp_path / "out").acquire()
    first.release()
    with OutputLock(tmp_path / "out"):
        pass


def test_a_second_run_into_the_same_folder_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "VISIONRT_PLANS": str(tmp_path / "plans")}
    command = [sys.executable, "-m", "visionrt.cli.main", "run", "-m", str(tiny_model),
               "--backend", "null", "-o", str(out), "-q", "--mode", "live"]  # fmt: skip
    first = subprocess.Popen(
        [*command, "synthetic:64x48:100000"], stderr=subprocess.PIPE, text=True, env=env
    )
    try:

        def writing() -> bool:
            if (out / "summary.partial.json").exists() or list(out.glob("*.partial.*")):
                return True
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            return False

        until(writing, "the first run started writing")
        second = subprocess.run(
            [*command, "synthetic:64x48:10"],
            capture_output=True,
            text=True,
            env=env,
            timeout=HANG_SECONDS,
        )
        assert second.returncode == 6, second.stderr
        assert f"output folder {out} is in use by visionrt run (pid {first.pid}" in (second.stderr)
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=HANG_SECONDS)
    assert first.returncode == 130, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"]
    assert summary["frames_out"] > 0
    assert (out / "synthetic.mp4").is_file() or list(out.glob("*.mp4"))


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_a_folder_holding_another_runs_outputs_is_refused_or_replaced_when_asked(
    small_video: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #32: a second run into a finished run's folder left its 5-frame JSONL beside the
    first run's 3-frame COCO and CSV. Refused in one line naming them and the flag, the folder
    as it was; with --overwrite the earlier run's outputs are removed first, a file of the
    user's is not."""
    out = tmp_path / "out"
    base = ["run", str(small_video), "-m", str(tiny_model), "--no-plan", "-o", str(out), "-q"]
    code, err = run_cli([*base, "--coco", "--csv", "--max-frames", "3"], capsys)
    assert code == 0, err
    (out / "notes.txt").write_text("the user's own")
    code, err = run_cli([*base, "--max-frames", "5"], capsys)
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"visionrt: error: output folder {out} holds another run's outputs (small.coco.json,"
        " small.csv, small.jsonl, small.mp4, summary.json): give another --out, or --overwrite"
        " to replace them"
    ]
    assert _lines(out / "small.jsonl") == 3
    # A run that fails to start (its model unreadable) removes nothing, asked to or not.
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    broken = ["run", str(small_video), "-m", str(tmp_path / "bad.onnx"), "-o", str(out)]
    code, err = run_cli([*broken, "-q", "--overwrite"], capsys)
    assert code == 4, err
    assert "not a readable ONNX model" in err
    assert _lines(out / "small.jsonl") == 3
    assert (out / "small.coco.json").is_file()
    code, err = run_cli([*base, "--max-frames", "5", "--overwrite"], capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(p.name for p in out.iterdir()) == [
        "notes.txt", "small.jsonl", "small.mp4", "summary.json"
    ]  # fmt: skip
    assert sorted(Path(p).name for p in summary["outputs"]) == [
        "small.jsonl", "small.mp4", "summary.json"
    ]  # fmt: skip
    assert _lines(out / "small.jsonl") == 5


def test_what_a_stopped_run_left_or_a_file_of_this_runs_name_is_not_taken_silently(
    small_video: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "small.partial.jsonl").write_text('{"frame": 0}\n')  # a run killed mid-way
    (out / "small.attempt2.mp4").write_bytes(b"")  # a cluster attempt's
    base = ["run", str(small_video), "-m", str(tiny_model), "--no-plan", "-o", str(out), "-q"]
    code, err = run_cli([*base, "--no-video", "--max-frames", "2"], capsys)
    assert code == 2, err
    assert "(small.attempt2.mp4, small.partial.jsonl)" in err
    # A source in the folder, under the name its output takes: read, then replaced, never
    # removed before the run reads it.
    clip = out / "small.mp4"
    clip.write_bytes(small_video.read_bytes())
    code, err = run_cli([*base[:1], str(clip), *base[2:], "--overwrite"], capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames_out"] == summary["sources"][0]["declared"] > 0
    assert sorted(p.name for p in out.iterdir()) == ["small.jsonl", "small.mp4", "summary.json"]
