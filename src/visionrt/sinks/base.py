"""The sink contract: results are written to a `.partial` file that becomes final on close."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from visionrt.errors import SinkError
from visionrt.types import FrameResult


def partial_path(final: Path) -> Path:
    """Where a sink writes until it is finalized; the suffix is kept so muxers infer the format."""
    return final.with_name(f"{final.stem}.partial{final.suffix}")


def check_writable(final: Path) -> None:
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        probe = partial_path(final)
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise SinkError(f"cannot write output {final}: {err.strerror or err}") from err


class Sink(ABC):
    """Writes results; `close(complete=True)` finalizes and returns the paths written."""

    @abstractmethod
    def write(self, result: FrameResult) -> None: ...

    @abstractmethod
    def close(self, complete: bool = True) -> list[Path]:
        """Finalize. With `complete=False` (a crash) files keep their `.partial` name."""
