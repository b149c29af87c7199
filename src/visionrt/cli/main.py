"""`visionrt` entry point: subcommands, and the mapping of errors to one line and an exit code."""

from __future__ import annotations

import sys

import typer

from visionrt.cli.run import run_command
from visionrt.errors import VisionRTError

app = typer.Typer(
    name="visionrt",
    help="Real-time computer vision: run detectors on videos, cameras and streams, fast.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("run", help=run_command.__doc__)(run_command)


def _register_optional() -> None:
    """Subcommands that live in modules of their own."""
    from visionrt.cli import bench, doctor, export, profile, tune

    for module in (bench, doctor, export, profile, tune):
        module.register(app)


def main(argv: list[str] | None = None) -> None:
    _register_optional()
    try:
        app(args=argv)  # standalone: usage errors print typer's one-paragraph message and exit 2
    except VisionRTError as err:
        print(f"visionrt: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        print("visionrt: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
