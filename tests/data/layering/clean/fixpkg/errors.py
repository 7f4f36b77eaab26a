"""Layer 0."""
import json


class FixError(ValueError):
    pass


def dumps(x):
    return json.dumps(x)
