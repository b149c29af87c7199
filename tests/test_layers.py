"""The package's layers, held by a test: stage packages import only shared values, `tasks`
composes stages, and only the layers built on top import across."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "visionrt"
SHARED = {"types", "errors", "model", "model_reshape", "model_batch", "hardware"}
STAGES = {"sources", "preprocess", "backends", "postprocess", "sinks"}
ALLOWED: dict[str, set[str]] = {
    **{stage: SHARED | {stage} for stage in STAGES},
    "telemetry": SHARED | {"telemetry"},
    "tasks": SHARED | STAGES | {"tasks"},
    # Plans sit under the pipeline that takes them: they name backends' options and the letterbox
    # geometry they were proven on, nothing above.
    "plans": SHARED | {"backends", "preprocess", "plans"},
    # Shared values import nothing above them.
    "types": {"errors"},
    "errors": set(),
    "model": {"errors", "types"},
    "model_reshape": {"errors", "model"},
    "model_batch": {"errors", "model", "model_reshape"},
    "hardware": {"errors"},
}


def _imports(path: Path) -> set[str]:
    """Top-level visionrt subpackages/modules imported anywhere in `path` (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "visionrt" and len(parts) > 1:
                found.add(parts[1])
    return found


def _layer(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_it_may(layer: str) -> None:
    files = sorted(PACKAGE.glob(f"{layer}/**/*.py")) or [PACKAGE / f"{layer}.py"]
    files = [f for f in files if f.is_file()]
    if not files:
        pytest.skip(f"visionrt.{layer} does not exist yet")
    wrong = {
        f"{f.relative_to(PACKAGE)} imports visionrt.{name}"
        for f in files
        for name in _imports(f) - ALLOWED[layer]
    }
    assert not wrong, sorted(wrong)


def test_the_contract_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from visionrt.pipeline import Pipeline\n", encoding="utf-8")
    assert _imports(module) == {"pipeline"}
