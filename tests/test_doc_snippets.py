"""The commands and snippets of README.md and docs/ run as written (#47), so the docs cannot
drift from the code: every fenced bash, sh, python, yaml and json block, in page order.

- bash/sh and python blocks run in a folder of their page's own, the blocks of one page one
  after another in the same folder (a block that writes run.yaml feeds the next), with the
  venv's bin/ first on PATH and a `.venv` link to it there (the docs type both `visionrt …`
  and `.venv/bin/visionrt …`), and the files the docs name as your own (PLACEHOLDERS) made
  there: videos are a short clip of the demo video, models the demo model. Each must exit 0.
- yaml blocks are configuration shown for reading: each loads with the project's loader, as a
  `--config` file does. json blocks parse.
- A comment right above a block says what the harness is to do instead, and why:
    <!-- snippet: not run — needs a camera -->      skipped, the reason in pytest's summary
    <!-- snippet: exit 2 — a missing video -->       runs, and must exit with that code
    <!-- snippet: YAML only — Prometheus' config --> parsed as YAML, not as a visionrt config
  A YAML file a skipped block writes with `cat > NAME.yaml <<'YAML'` is still loaded.
Blocks without a language (program output, diagrams) are not snippets.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"bash": "bash", "sh": "bash", "python": "python"}
LANGUAGES = {*RUN, "yaml", "json"}
# The files the docs name as the reader's own, made in every page's folder.
PLACEHOLDERS = {
    "video": [
        "my_video.mp4",  # README, guides
        "front.mp4",  # README: three cameras
        "left.mp4",
        "right.mp4",
        "cam1.mp4",  # cluster.md: cam*.mp4
        "cam2.mp4",
        "vtest.avi",  # python.md
    ],
    "model": ["my_yolov8.onnx", "model.onnx"],
}
# Frames of the demo video in the clip every placeholder video is: a run of the FP32 reference
# costs about a second a frame on 2 busy cores, and the pages run some twenty commands.
CLIP_FRAMES = 8
BLOCK_SECONDS = 300  # a block that runs longer has hung (a service, a camera that never ends)
TAIL = 2500

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[ \t]*$")
MARK = re.compile(r"^\s*<!--\s*snippet:\s*(?P<text>.*?)\s*-->\s*$")
MARK_TEXT = re.compile(
    r"^(?P<kind>not run|YAML only|exit (?P<code>\d+))(?:\s+[—-]+\s+(?P<reason>\S.*))?$"
)
HEREDOC = re.compile(
    r"cat > (?P<file>\S+\.ya?ml) <<-?'?(?P<end>\w+)'?\n(?P<body>.*?)\n[ \t]*(?P=end)\n", re.S
)


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced code block of a page."""

    page: str  # the page's path from the repository root
    line: int  # the opening fence's line, from 1
    language: str
    text: str
    mark: str  # the snippet comment's text right above the fence, "" where none
    mark_line: int  # its line, 0 where none

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown page, in order, each with the mark above it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = path.relative_to(ROOT).as_posix()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        close = f"{opened['indent']}```"
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != close:
            end += 1
        above = next((n for n in range(index - 1, -1, -1) if lines[n].strip()), -1)
        mark = MARK.match(lines[above]) if above >= 0 else None
        blocks.append(
            Block(
                page,
                index + 1,
                opened["language"],
                textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n",
                mark["text"] if mark else "",
                above + 1 if mark else 0,
            )
        )
        index = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in read_blocks(page)]
SNIPPETS = [block for block in BLOCKS if block.language in LANGUAGES]


def _mark(block: Block) -> tuple[str, int, str]:
    """(kind, expected exit code, reason) of a block's mark: kind "" where it has none."""
    if not block.mark:
        return "", 0, ""
    said = MARK_TEXT.match(block.mark)
    assert said, f"{block.where}: a snippet mark it does not know: {block.mark!r}"
    return said["kind"].split()[0], int(said["code"] or 0), said["reason"] or ""


def test_the_pages_have_snippets_and_every_mark_is_known() -> None:
    """The parse finds the pages' blocks (a broken parse would pass by running nothing), and
    every `snippet:` comment is a known mark right above a block, a skip saying why."""
    assert {block.language for block in SNIPPETS} >= {"bash", "python", "yaml", "json"}
    commands = [block for block in SNIPPETS if block.language in RUN]
    assert len(commands) > 40
    assert len([block for block in commands if not block.mark.startswith("not run")]) > 15
    for block in BLOCKS:
        kind, _, reason = _mark(block)
        assert kind != "not" or reason, f"{block.where}: 'not run' without a reason"
        assert not block.mark or block.language in (RUN if kind != "YAML" else {"yaml"}), (
            f"{block.where}: mark {block.mark!r} on a {block.language or 'plain'} block"
        )
    placed = {(block.page, block.mark_line) for block in BLOCKS if block.mark}
    for path in PAGES:
        page = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MARK.match(line) and (page, number) not in placed:
                pytest.fail(f"{page}:{number}: a snippet mark with no block under it")


# -- the page's folder ----------------------------------------------------------------------


def _clip(video: Path, path: Path) -> Path:
    """The first CLIP_FRAMES frames of `video`, H.264 in MP4 (what a phone or camera gives)."""
    import av

    with av.open(str(video)) as source, av.open(str(path), mode="w") as clip:
        decoded = source.streams.video[0]
        stream = clip.add_stream("libx264", rate=decoded.average_rate or Fraction(25))
        stream.width, stream.height = decoded.codec_context.width, decoded.codec_context.height
        stream.pix_fmt, stream.options = "yuv420p", {"preset": "ultrafast"}
        for index, frame in enumerate(source.decode(decoded)):
            if index == CLIP_FRAMES:
                break
            clip.mux(stream.encode(frame.reformat(format="yuv420p")))
        clip.mux(stream.encode(None))
    return path


@pytest.fixture(scope="session")
def page_folder(
    tmp_path_factory: pytest.TempPathFactory, demo_video: Path, demo_model: Path
) -> Callable[[str], Path]:
    """A page's folder, made on its first block: `.venv` (the venv running the tests) and the
    placeholders; `.plans` is the page's plan cache (VISIONRT_PLANS: a page that tunes leaves
    no plan to the other pages, nor to the rest of the suite)."""
    clip = _clip(demo_video, tmp_path_factory.mktemp("doc-media") / "clip.mp4")
    folders: dict[str, Path] = {}

    def folder(page: str) -> Path:
        if page not in folders:
            made = tmp_path_factory.mktemp(re.sub(r"\W+", "-", page))
            (made / ".venv").symlink_to(sys.prefix, target_is_directory=True)
            (made / ".plans").mkdir()
            for kind, target in (("video", clip), ("model", demo_model)):
                for name in PLACEHOLDERS[kind]:
                    (made / name).symlink_to(target)
            folders[page] = made
        return folders[page]

    return folder


def _environment(folder: Path) -> dict[str, str]:
    path = os.pathsep.join([str(folder / ".venv" / "bin"), os.environ.get("PATH", "")])
    # No colour codes in what a failure shows; a wide console keeps a table's rows whole.
    plans = str(folder / ".plans")
    return {**os.environ, "PATH": path, "VISIONRT_PLANS": plans, "NO_COLOR": "1", "COLUMNS": "160"}


def _run(block: Block, folder: Path) -> tuple[int, str, str]:
    """Runs a block in `folder` as typed: bash stops at the first command that fails."""
    if RUN[block.language] == "bash":
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
    else:
        script = folder / f".snippet-{block.line}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [str(folder / ".venv" / "bin" / "python"), script.name]
    process = subprocess.Popen(
        command,
        cwd=folder,
        env=_environment(folder),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a block's own children (workers, Ray) end with it on a hang
    )
    try:
        out, err = process.communicate(timeout=BLOCK_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        err += f"\n(still running after {BLOCK_SECONDS} s: killed)"
    return process.returncode, out, err


def _load_config(text: str, folder: Path, where: str) -> None:
    from visionrt.config import load_config

    path = folder / "shown.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_config(path)
    except Exception as err:
        pytest.fail(f"{where}: the YAML does not load as a config: {err}")


def _param(block: Block) -> object:
    """A block as a test case: those that run a command need the demo model and video."""
    slow = [pytest.mark.slow] if block.language in RUN else []
    return pytest.param(block, id=block.where, marks=slow)


@pytest.mark.parametrize("block", [_param(block) for block in SNIPPETS])
def test_snippet(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    kind, code, reason = _mark(block)
    if block.language == "json":
        json.loads(block.text)
        return
    if block.language == "yaml":
        if kind == "YAML":
            yaml.safe_load(block.text)
        else:
            _load_config(block.text, tmp_path, block.where)
        return
    for written in HEREDOC.finditer(block.text):
        _load_config(written["body"] + "\n", tmp_path, f"{block.where} ({written['file']})")
    if kind == "not":
        pytest.skip(f"{block.where}: {reason}")
    page_folder: Callable[[str], Path] = request.getfixturevalue("page_folder")
    returncode, out, err = _run(block, page_folder(block.page))
    assert returncode == code, (
        f"{block.where}: exit {returncode}, the page expects {code}\n"
        f"--- the block ---\n{block.text}"
        f"--- stderr (tail) ---\n{err[-TAIL:]}\n"
        f"--- stdout (tail) ---\n{out[-TAIL // 3 :]}"
    )
