"""Clean fixture package: the top package re-exports from below."""
from .app import main
from .errors import FixError

__all__ = ["FixError", "main"]
