"""Progress shown while an artifact is made: a rich bar on stderr when enabled, a no-op when not."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any


class Progress:
    """A rich progress bar on stderr when enabled; a no-op otherwise."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._bar: Any = None

    @contextmanager
    def bar(self) -> Iterator[Progress]:
        if not self.enabled:
            yield self
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        columns = (
            "{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True), transient=True) as self._bar:
            yield self
        self._bar = None

    def task(self, description: str, total: int) -> Callable[..., None]:
        """A callback that advances a new task by one per call (any arguments ignored)."""
        if self._bar is None:
            return lambda *_: None
        task_id = self._bar.add_task(description, total=total)
        return lambda *_: self._bar.advance(task_id)

    def status(self, text: str) -> Any:
        if not self.enabled:
            return nullcontext()
        from rich.console import Console

        return Console(stderr=True).status(text)
