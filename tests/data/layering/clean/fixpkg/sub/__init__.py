"""Layer 2 subpackage re-exporting its leaf."""
from . import leaf
from .leaf import grow
