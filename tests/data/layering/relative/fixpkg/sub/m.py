import json
import fixpkg.x.z
from ..x import y
from ..x import Thing
from ..x.z import f
from . import n
from fixpkg import VERSION


def g():
    from ... import nothing  # above the top package: ignored
    return json, y, Thing, f, n, VERSION, fixpkg.x.z
