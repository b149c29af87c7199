"""`visionrt` entry point: subcommands, and the mapping of errors to one line and an exit code."""

from __future__ import annotations

import functools
import sys
from typing import NoReturn

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


@functools.cache  # once per process: tests call main() many times
def _register_optional() -> None:
    """Subcommands that live in modules of their own."""
    from visionrt.cli import bench, doctor, export, profile, tune

    for module in (bench, doctor, export, profile, tune):
        module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Run the command line; every error ends in one `visionrt: error: ...` line and its exit
    code (2 usage and config, 3 source, 4 model, 5 backend, 6 output, 130 interrupted)."""
    _register_optional()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        # Not standalone: typer would print usage errors as a framed paragraph; we print one line.
        code = app(args=args or ["--help"], prog_name="visionrt", standalone_mode=False)
    except VisionRTError as err:
        _fail(str(err), err.exit_code)
    except typer.TyperException as err:  # a usage error: an unknown flag, a value not a number
        _fail(_usage_message(err), err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _fail("interrupted", 130)
    if code == 130:  # typer's answer to Ctrl-C outside the run
        _fail("interrupted", 130)
    if isinstance(code, int) and code:
        sys.exit(code)


def _usage_message(err: typer.TyperException) -> str:
    message = " ".join(err.format_message().split())
    ctx = getattr(err, "ctx", None)
    if ctx is not None:
        message += f" (see {ctx.command_path} --help)"
    return message


def _fail(message: str, code: int) -> NoReturn:
    # One line even when a runtime's own message spans several.
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"visionrt: error: {line}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
