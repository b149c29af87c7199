"""The package's layers and its import cycles, held by the import contract in pyproject.toml
(`[tool.importlinter]`, run with `lint-imports`): stages and models import only shared values,
`tasks` composes them, only the pipeline and what is built on it import across, no cycles."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter missing: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "visionrt"
CONFIG = ROOT / "pyproject.toml"
LINT = [sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()"]


def _lint(config: Path, cwd: Path, *args: str, path: Path | None = None) -> tuple[int, str]:
    """`lint-imports` on `config`, visionrt imported from `path` (the real package by default);
    its exit code and output."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    run = subprocess.run(
        [*LINT, "--no-cache", *args, str(config)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.returncode, run.stdout + run.stderr


def _contracts() -> list[dict[str, object]]:
    settings = tomllib.loads(CONFIG.read_text(encoding="utf-8"))["tool"]["importlinter"]
    return settings["contracts"]  # type: ignore[no-any-return]


def _top_level_names() -> set[str]:
    return {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }


def test_the_import_contract_holds() -> None:
    code, output = _lint(CONFIG, ROOT)
    assert code == 0, output
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in output, output


def test_every_top_level_module_has_its_place() -> None:
    """A new package or module must be put in a layer, or among those built on top: the
    contract only holds for what it names."""
    named: set[str] = set()
    for contract in _contracts():
        for key in ("layers", "source_modules", "forbidden_modules"):
            for entry in contract.get(key, []):  # type: ignore[attr-defined]
                for module in str(entry).replace(":", "|").split("|"):
                    named.add(module.strip().strip("()").removeprefix("visionrt."))
    assert sorted(_top_level_names() - named) == []


def _stub_package(root: Path, extra: dict[str, str]) -> Path:
    """An empty visionrt with the real one's top-level modules and packages, plus `extra`
    (relative path → source); returns the folder to import it from."""
    stub = root / "visionrt"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("", encoding="utf-8")
    for name in _top_level_names():
        if (PACKAGE / name).is_dir():
            (stub / name).mkdir()
            (stub / name / "__init__.py").write_text("", encoding="utf-8")
        else:
            (stub / f"{name}.py").write_text("", encoding="utf-8")
    for relative, source in extra.items():
        (stub / relative).write_text(source, encoding="utf-8")
    return root


# Each rule, broken by one import a module could plausibly gain (lazily, in a function, too).
BREAKS = {
    "a backend reshaping the model itself": (
        {"backends/onnxruntime.py": "from visionrt.models import resolve_model\n"},
        "layers",
        "visionrt.backends.onnxruntime -> visionrt.models",
    ),
    "a stage reaching the pipeline lazily": (
        {"postprocess/yolo.py": "def f():\n    from visionrt.pipeline import Pipeline\n"},
        "on-top",
        "visionrt.postprocess.yolo -> visionrt.pipeline",
    ),
    "a shared value importing a stage": (
        {"types.py": "import visionrt.backends\n"},
        "layers",
        "visionrt.types -> visionrt.backends",
    ),
    "a plan importing a sink": (
        {"plans/store.py": "from visionrt.sinks import base\n"},
        "plans",
        "visionrt.plans.store -> visionrt.sinks",
    ),
    "two modules of a package importing each other": (
        {
            "sources/video.py": "from visionrt.sources import images\n",
            "sources/images.py": "from visionrt.sources import video\n",
        },
        "cycles",
        "No cycles are allowed in visionrt.sources",
    ),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_the_contract_can_fail(case: str, tmp_path: Path) -> None:
    files, contract, named = BREAKS[case]
    clean = _stub_package(tmp_path / "clean", {})
    code, output = _lint(CONFIG, tmp_path, "--contract", contract, path=clean)
    assert code == 0, f"the empty package should keep '{contract}':\n{output}"
    broken = _stub_package(tmp_path / "broken", files)
    code, output = _lint(CONFIG, tmp_path, "--contract", contract, path=broken)
    assert code == 1, output
    assert "1 broken" in output
    assert named in output
