"""`visionrt export`: make an optimized artifact of a model, show what was kept and its fidelity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from visionrt.cli.run_config import parse_size
from visionrt.errors import ConfigError
from visionrt.export import TARGETS, ExportResult, export_model
from visionrt.export.depth import DepthFidelityReport
from visionrt.preprocess.depth import PATCH
from visionrt.sinks.base import check_writable, write_output
from visionrt.tasks.depth import MAX_PATCHES, MAX_SHORT_SIDE

# DESIGN.md's default accuracy budget (fidelity mAP50) per precision.
_BUDGET = {"fp16": 0.97, "int8": 0.90}
# A depth artifact's default budget: the share of pixels within 25 % of FP32 (δ<1.25).
_DEPTH_BUDGET = {"int8": 0.90}


def _budget(target: str) -> float | None:
    spec = TARGETS[target]
    return _BUDGET["int8"] if spec.int8 else _BUDGET.get(spec.precision)


def _table(result: ExportResult) -> Table:
    report = result.report
    target = report["target"]
    table = Table(title=f"visionrt export · {target}", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    table.add_row("model", f"{Path(report['model']).name} (sha256 {report['model_sha256'][:12]})")
    table.add_row("runtime", report["runtime"])
    table.add_row("input (h×w)", "×".join(map(str, report["input_hw"])))
    verb = "quantized" if TARGETS[target].int8 else "converted"
    took = f"{verb} in {report['convert_s']:.1f} s ({report['duration_s']:.1f} s in all)"
    table.add_row("cache", "reused a cached artifact" if result.cached else f"built: {took}")
    if "calibration" in report:
        calibration = report["calibration"]
        videos = calibration.get("videos") or [calibration["video"]]
        names = ", ".join(Path(video).name for video in videos)
        table.add_row("calibration", f"{calibration['frames']} frames spread over {names}")
    kept = report.get("kept_in_float") or []
    if kept or TARGETS[target].int8:
        shown = ", ".join(kept[:4]) + (f", … ({len(kept)} in all)" if len(kept) > 4 else "")
        table.add_row("kept in float", shown or report.get("kept_in_float_by_recipe", "nothing"))
    fidelity = result.fidelity
    if isinstance(fidelity, DepthFidelityReport):
        table.add_row("fidelity", _depth_fidelity(fidelity, target))
    elif fidelity is not None:
        budget = _budget(target)
        verdict = ""
        if budget is not None:
            verdict = " · within" if fidelity.map50 >= budget else " · OUTSIDE"
            verdict += f" the default budget (mAP50 ≥ {budget:.2f})"
        table.add_row(
            "fidelity",
            f"mAP50 {fidelity.map50:.3f} · mAP50-95 {fidelity.map50_95:.3f}"
            f" · count match {fidelity.count_match:.1%} over {fidelity.frames} frames{verdict}",
        )
    return table


def _depth_fidelity(fidelity: DepthFidelityReport, target: str) -> str:
    budget = _DEPTH_BUDGET["int8"] if TARGETS[target].int8 else None
    text = (
        f"AbsRel {fidelity.abs_rel:.4f} (worst {fidelity.worst_abs_rel:.4f}) · δ<1.25"
        f" {fidelity.delta1:.2%} (worst {fidelity.worst_delta1:.2%}) over {fidelity.frames}"
        " frames against ONNX Runtime FP32, each aligned by scale and shift"
    )
    if budget is not None:
        text += " · within" if fidelity.delta1 >= budget else " · OUTSIDE"
        text += f" the default budget (δ<1.25 ≥ {budget:.2f})"
    if fidelity.architecture_only:
        text += (
            "\nnote: architecture-only model (random weights): this fidelity says nothing about"
            " real weights"
        )
    return text


def _depth_size(text: str | None) -> int | tuple[int, int] | None:
    """'266' (the short side) or '266x350' (height × width)."""
    if not text:
        return None
    parts = text.lower().split("x")
    if not (len(parts) in (1, 2) and all(part.isascii() and part.isdigit() for part in parts)):
        raise ConfigError(
            f"--depth-size: expected a short side (266) or HEIGHTxWIDTH, got '{text}'"
        )
    sizes = [int(part) for part in parts]
    # The bounds `run` keeps (visionrt.tasks.depth): the ViT's memory grows with the 4th power
    # of the side.
    patches = (sizes[0] // PATCH) * (sizes[-1] // PATCH)
    if min(sizes) > MAX_SHORT_SIDE or (len(sizes) == 2 and patches > MAX_PATCHES):
        raise ConfigError(
            f"--depth-size '{text}': expected a short side of at most {MAX_SHORT_SIDE} and at"
            f" most {MAX_PATCHES} patches of {PATCH} px (the model's memory grows with the 4th"
            " power of the side: ~4 GB at 1036)"
        )
    return sizes[0] if len(sizes) == 1 else (sizes[0], sizes[1])


def export_command(
    to: Annotated[str, typer.Option("--to", help=f"One of: {', '.join(TARGETS)}.")],
    model: Annotated[
        str | None, typer.Argument(help="ONNX model or Ultralytics .pt. Default: the demo model.")
    ] = None,
    calibrate: Annotated[
        list[str] | None,
        typer.Option(
            help="Video for calibration and fidelity (again for more videos: the calibration"
            " frames are shared among them, fidelity is scored on the first). Default: the demo"
            " video."
        ),
    ] = None,
    frames: Annotated[int, typer.Option(help="Calibration frames (INT8 targets).")] = 300,
    imgsz: Annotated[
        str | None, typer.Option(help="Reshape the model to HEIGHTxWIDTH first, e.g. 512x640.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Artifact cache folder. Default: ~/.cache/visionrt/artifacts."),
    ] = None,
    fidelity_frames: Annotated[
        int, typer.Option(help="Frames on which to score against the FP32 reference.")
    ] = 100,
    no_fidelity: Annotated[
        bool, typer.Option("--no-fidelity", help="Skip the fidelity check.")
    ] = False,
    conf: Annotated[float, typer.Option(help="Confidence threshold for fidelity.")] = 0.25,
    depth_size: Annotated[
        str | None,
        typer.Option(
            help="Depth models: input short side (default 518; 266/364 faster), the long side"
            " keeping the video's aspect, or HEIGHTxWIDTH (multiples of 14)."
        ),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the report as JSON here.")
    ] = None,
) -> None:
    """Export a model to FP16/INT8 ONNX, OpenVINO IR (FP32/INT8) or a TensorRT engine, cached;
    a depth model (Depth Anything) to OpenVINO IR (FP32/INT8) at a fixed size."""
    size: Any = None
    if imgsz:
        height, width = parse_size(imgsz)
        size = (height, width)
    if out is not None:
        check_writable(out, "--out", folder=True)
    if json_out is not None:
        check_writable(json_out, "--json")
    result = export_model(
        model,
        to,
        calibrate=calibrate[0] if calibrate and len(calibrate) == 1 else calibrate,
        frames=frames,
        imgsz=size,
        out=out,
        progress=True,
        fidelity_frames=0 if no_fidelity else fidelity_frames,
        conf=conf,
        depth_size=_depth_size(depth_size),
    )
    err = Console(stderr=True, soft_wrap=True)
    if result.cached:
        err.print(f"reusing the cached artifact in {result.path.parent}")
    elif TARGETS[to].int8:
        err.print(f"quantization took {result.report['convert_s']:.1f} s")
    console = Console(soft_wrap=True)
    console.print(_table(result))
    console.print(f"artifact: {result.path}")
    if json_out:
        report = {"path": str(result.path), "cached": result.cached, **result.report}
        write_output(json_out, json.dumps(report, indent=2), "--json")


def register(app: typer.Typer) -> None:
    app.command("export", help=export_command.__doc__)(export_command)
