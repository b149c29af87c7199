"""A command's results on standard output, written through at once: a full disk behind a
redirect (`--json > /dev/full`) is one line and exit 6, not a traceback."""

from __future__ import annotations

import os
import sys

from visionrt.errors import SinkError
from visionrt.sinks.base import reason


def print_out(text: str, what: str = "--json") -> None:
    """Print `text` and a line end, flushed, or raise a SinkError naming `what`. What could not
    be written is dropped with the stream: the interpreter would flush it again as it exits,
    and fail with a traceback of its own."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as err:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (kept to the exit)
        raise SinkError(f"cannot write {what} to standard output: {reason(err)}") from err
