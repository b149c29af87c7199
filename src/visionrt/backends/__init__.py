"""Backends: prepared input arrays → raw model outputs, one runtime per file."""

from visionrt.backends.base import Backend, BackendOptions
from visionrt.backends.registry import ROWS, BackendRow, choose_auto, load_backend

__all__ = ["ROWS", "Backend", "BackendOptions", "BackendRow", "choose_auto", "load_backend"]
