"""`visionrt` entry point: subcommands, and the mapping of errors to one line and an exit code."""

from __future__ import annotations

import functools
import importlib
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from visionrt.cli.signals import STARTUP, install_early

if __name__ == "__main__":  # `python -m visionrt.cli.main`: signals before typer imports
    install_early()

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from visionrt.errors import VisionRTError
from visionrt.export.tensorrt import building

# Each command's module, and its line in `visionrt --help`. A module is imported only when its
# command runs or shows its own help: the runtimes behind them take seconds to import, and the
# list of commands needs none of them.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("visionrt.cli.run", "Run a detector (and depth) over videos, cameras and streams."),
    "bench": ("visionrt.cli.bench", "Measure model-only and end-to-end FPS of backend variants."),
    "doctor": ("visionrt.cli.doctor", "Check the system: CPU, GPU, runtimes, assets, settings."),
    "export": ("visionrt.cli.export", "Export a model to FP16/INT8 ONNX, OpenVINO IR or TensorRT."),
    "profile": ("visionrt.cli.profile", "Run the pipeline and say where the time goes."),
    "serve": ("visionrt.cli.serve", "Serve cameras until stopped, with a web view and events."),
    "tune": ("visionrt.cli.tune", "Find this machine's fastest configuration and cache its plan."),
    "demo": ("visionrt.cli.demo", "The demo (`make demo`): a run on this machine's tuned plan."),
}


class Commands(TyperGroup):
    """The subcommands of COMMANDS, each loaded on first use: the list that --help shows, and
    the "did you mean" of a mistyped name, load none. Types are typer's own click's, which
    typer keeps private: `Any` here."""

    listing = False  # while the group's own help is written

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Typer reads the names from it (a typo's suggestions). Click types the attribute as a
        # mutable mapping; nothing adds commands to this group, so a read-only one serves.
        self.commands = _Loaded()  # type: ignore[assignment]

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if self.listing and cmd_name in COMMANDS:
            return TyperCommand(cmd_name, short_help=COMMANDS[cmd_name][1])
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


class _Loaded(Mapping[str, Any]):
    """COMMANDS by name, each command loaded as it is looked up."""

    def __getitem__(self, name: str) -> Any:
        if name not in COMMANDS:
            raise KeyError(name)
        return _load(name)

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


app = typer.Typer(
    name="visionrt",
    cls=Commands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def visionrt() -> None:
    """Real-time computer vision: run detectors on videos, cameras and streams, fast."""


@functools.cache  # once per process: tests call main() many times
def _load(name: str) -> Any:
    """The command `name` as its module registers it. Imported here, once the signal handlers
    are in place: a Ctrl-C during the import is one line and exit 130."""
    module = importlib.import_module(COMMANDS[name][0])
    single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    if name == "demo":  # the demo runs whole command lines: it is handed this entry
        module.register(single, main)
    else:
        module.register(single)
    return typer.main.get_command(single)


def main(argv: list[str] | None = None) -> None:
    """Run the command line; every error ends in one `visionrt: error: ...` line and its exit
    code (2 usage and config, 3 source, 4 model, 5 backend, 6 output, 130 interrupted)."""
    args = sys.argv[1:] if argv is None else list(argv)
    previous = STARTUP.handlers()
    try:
        # Inside the try: a Ctrl-C that comes as the handlers go in is one line, exit 130 (it
        # escaped as a traceback, killed by SIGINT, once in a full test run).
        STARTUP.install()
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
