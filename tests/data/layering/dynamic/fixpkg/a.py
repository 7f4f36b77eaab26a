import importlib
from importlib import import_module


def load(name):
    b = importlib.import_module("fixpkg.b")
    rel = import_module(".b", __package__)
    anything = importlib.import_module(name)
    ok = import_module("json")  # another package: allowed
    return b, rel, anything, ok, __import__("fixpkg")
