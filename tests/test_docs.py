"""The documentation: the site builds with --strict (a broken link or anchor, or a page left out
of the nav, fails), its reference pages are what the code defines (every flag of every command,
every config key), and the README stays a landing page whose links lead somewhere."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402 (scripts/ is not a package)
import results_table  # noqa: E402


def test_the_site_builds_with_strict_checks(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="MkDocs (visionrt[docs], installed by `make test`)")
    pytest.importorskip("material", reason="mkdocs-material (visionrt[docs])")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "commands" / "index.html").is_file()


def test_the_reference_pages_are_what_the_code_defines() -> None:
    for path, text in docs_reference.pages().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is out of date: run scripts/docs_reference.py"
        )


def _sections(page: str) -> dict[str, str]:
    """A reference page's text under each `## ` heading."""
    parts = re.split(r"^## ", page, flags=re.MULTILINE)
    return {part.splitlines()[0]: part for part in parts[1:]}


def test_every_flag_of_every_command_is_in_the_reference() -> None:
    page = (ROOT / "docs" / "reference" / "commands.md").read_text(encoding="utf-8")
    sections = _sections(page)
    group = docs_reference.cli_command()
    assert set(group.commands) >= {"run", "serve", "tune", "bench", "profile", "doctor", "export"}
    for name, command in group.commands.items():
        section = sections.get(f"`visionrt {name}`")
        assert section is not None, f"no section for visionrt {name}"
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            for flag in [*param.opts, *param.secondary_opts]:
                assert f"`{flag}`" in section, f"visionrt {name} {flag} is not in the reference"


def test_every_config_key_is_in_the_reference() -> None:
    from visionrt.config import RunConfig

    page = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")

    def keys_of(section: Any, prefix: str) -> list[str]:
        hints = typing.get_type_hints(section)
        keys = []
        for field in dataclasses.fields(section):
            inner = dataclasses.is_dataclass(hints[field.name])
            if prefix or not inner:  # a top-level section is a heading, not a row
                keys.append(prefix + field.name)
            if inner:
                keys += keys_of(hints[field.name], f"{prefix}{field.name}.")
        return keys

    keys = keys_of(RunConfig, "")
    assert "pipeline.tracking.match_iou" in keys
    assert len(keys) > 80
    missing = [key for key in keys if f"| `{key}` |" not in page]
    assert missing == []


def test_every_config_key_in_the_reference_says_what_it_means() -> None:
    """Every row of the config page's key tables has a meaning, the attribute docstring under
    its field (docs_reference.meanings): a key added without one fails here."""
    page = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    rows = [
        re.split(r"(?<!\\)\|", line)[1:-1]
        for title, text in _sections(page).items()
        if not title.startswith("Keys of before")
        for line in text.splitlines()
        if line.startswith("| `")
    ]
    assert len(rows) > 100
    assert {len(row) for row in rows} == {4}  # key, type, default, meaning
    assert [row[0].strip() for row in rows if not row[3].strip()] == []


def _choices() -> list[tuple[type, str]]:
    """Keys whose value is one of a few words, each refused otherwise with "expected A, B or C,
    got …"."""
    from visionrt.backends import BackendOptions
    from visionrt.config.pipeline import DepthOptions
    from visionrt.fuse.track_options import TrackingOptions
    from visionrt.postprocess import PostprocessOptions
    from visionrt.preprocess.motion import MotionOptions
    from visionrt.sources import SourceOptions

    return [
        (SourceOptions, "mode"),
        (SourceOptions, "workers"),
        (SourceOptions, "pixels"),
        (BackendOptions, "device"),
        (BackendOptions, "precision"),
        (PostprocessOptions, "head"),
        (TrackingOptions, "tracker"),
        (MotionOptions, "mode"),
        (DepthOptions, "on_nonfinite"),
    ]


def _names_each(meaning: str, words: list[str]) -> list[str]:
    """The `words` that `meaning` does not name (as whole words)."""
    return [word for word in words if not re.search(rf"\b{re.escape(word)}\b", meaning)]


@pytest.mark.parametrize(("options", "key"), _choices(), ids=lambda v: getattr(v, "__name__", v))
def test_a_meaning_names_every_value_its_key_allows(options: type, key: str) -> None:
    """The words a key's meaning lists are those its validation allows, read from the error a
    wrong value gets (a value added to the code and not to the meaning fails here)."""
    from visionrt.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        options(**{key: "?"})
    expected = str(refused.value).split("expected ", 1)[1].split(", got")[0]
    words = re.split(r", | or ", re.sub(r"^one of |\s*\(.*?\)", "", expected).strip())
    assert len(words) >= 2, expected
    assert _names_each(docs_reference.meanings(options)[key], words) == []


def test_the_backend_key_names_every_backend() -> None:
    from visionrt.backends.registry import ROWS
    from visionrt.config import RunConfig

    names = ["auto", *(row.name for row in ROWS)]
    assert _names_each(docs_reference.meanings(RunConfig)["backend"], names) == []


def test_the_readme_is_a_landing_page_whose_links_lead_somewhere() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local, "the README links into the docs"
    assert [link for link in local if not (ROOT / link).exists()] == []


def test_todays_figures_are_what_the_result_files_say() -> None:
    """README's and docs/benchmarks.md's first table is made from docs/results/ (a figure
    changed there and not regenerated fails here)."""
    made = results_table.table()
    for page in results_table.PAGES:
        text = page.read_text(encoding="utf-8")
        assert results_table.with_table(text, made) == text, f"{page.name}: run results_table.py"
    assert made.count("\n| ") == 1 + len(results_table.ROWS)  # the header and a row each


def test_every_key_of_the_summary_and_a_telemetry_line_is_in_the_outputs_page() -> None:
    from visionrt.telemetry import RunSummary, Telemetry

    page = (ROOT / "docs" / "reference" / "outputs.md").read_text(encoding="utf-8")
    summary = RunSummary(0, 0, {}, 0.0, 0.0, {}, {}, 0.0, 0.0).to_json()
    line = Telemetry().snapshot()
    keys = [*summary, *line, "gpu"]  # `gpu` in a line only where NVML sees a GPU
    assert [key for key in keys if f"`{key}`" not in page] == []
