"""`visionrt` entry point: subcommands, and the mapping of errors to one line and an exit code."""

from __future__ import annotations

import functools
import logging
import sys
from typing import NoReturn

from visionrt.cli.signals import STARTUP, install_early

if __name__ == "__main__":  # `python -m visionrt.cli.main`: signals before typer imports
    install_early()

import typer

from visionrt.errors import VisionRTError
from visionrt.export.tensorrt import building

app = typer.Typer(
    name="visionrt",
    help="Real-time computer vision: run detectors on videos, cameras and streams, fast.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@functools.cache  # once per process: tests call main() many times
def _register_optional() -> None:
    """The subcommands, each in a module of its own: imported only once the signal handlers
    are in place (the runtimes take seconds to import)."""
    from visionrt.cli import bench, demo, doctor, export, profile, serve, tune
    from visionrt.cli.run import run_command

    app.command("run", help=run_command.__doc__)(run_command)
    for module in (bench, doctor, export, profile, serve, tune):
        module.register(app)
    demo.register(app, main)  # the demo runs whole command lines: it is handed this entry


def main(argv: list[str] | None = None) -> None:
    """Run the command line; every error ends in one `visionrt: error: ...` line and its exit
    code (2 usage and config, 3 source, 4 model, 5 backend, 6 output, 130 interrupted)."""
    args = sys.argv[1:] if argv is None else list(argv)
    previous = STARTUP.handlers()
    try:
        # Inside the try: a Ctrl-C that comes as the handlers go in is one line, exit 130 (it
        # escaped as a traceback, killed by SIGINT, once in a full test run).
        STARTUP.install()
        _register_optional()
        # Not standalone: typer would print usage errors as a framed paragraph; we print one line.
        # A command that loads a TensorRT model with no engine built builds one, saying so (the
        # library builds none unasked).
        with building(_say):
            code = app(args=args or ["--help"], prog_name="visionrt", standalone_mode=False)
    except VisionRTError as err:
        if STARTUP.received and err.exit_code != 130:  # a signal a library turned into an error
            _fail(STARTUP.message(), 130)
        _fail(str(err), err.exit_code)
    except typer.TyperException as err:  # a usage error: an unknown flag, a value not a number
        _fail(_usage_message(err), err.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        _fail(STARTUP.message() if STARTUP.received else "interrupted", 130)
    except Exception as err:
        # A command's own handler raises KeyboardInterrupt where the signal lands: inside an
        # import of a native module that becomes "ImportError: initialization failed" (tune,
        # SIGTERM during `import openvino`, once in a loaded full test run). Still a signal.
        if not _caused_by_interrupt(err):
            raise
        _fail(STARTUP.message() if STARTUP.received else "interrupted", 130)
    finally:
        STARTUP.restore(previous)  # in-process callers (tests) get their own handlers back
        _forget_interrupts_handled()
    if code == 130:  # typer's answer to Ctrl-C outside the run
        _fail(STARTUP.message() if STARTUP.received else "interrupted", 130)
    code = code if isinstance(code, int) else 0
    if argv is None and _call_in_flight():  # the process's own command line, its work done
        logging.shutdown()  # what exit would still do: the log files' last lines
        STARTUP.exit_now(code)
    if code:
        sys.exit(code)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _call_in_flight() -> bool:
    """Whether a runtime call still runs on a daemon thread (the live audit's lane, starved on
    a loaded machine past its run's close): finalizing the interpreter under it aborts inside
    the runtime ("terminate called without an active exception", SIGABRT) after the outputs
    were written."""
    audit = sys.modules.get("visionrt.accuracy.audit")
    return audit is not None and bool(audit.lane_running())


def _caused_by_interrupt(err: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the exceptions `err` was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _forget_interrupts_handled() -> None:
    """Keep the exit code chosen when a Ctrl-C was handled. CPython marks a KeyboardInterrupt
    that left code compiled from a string (`exec`/`eval` of a str: dataclasses, namedtuple and
    typing make their functions so, while the commands import) as unhandled even when it was
    caught later, and then ends the process by SIGINT after its exit code was chosen (-2 rather
    than 130: Py_RunMain's exit_sigint). The mark is cleared as such code starts: running some
    clears it. One that escapes `main` is marked again by the interpreter's top level."""
    exec("")


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
    if STARTUP.abandoned:  # a start-up still in native code: no interpreter shutdown under it
        STARTUP.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
