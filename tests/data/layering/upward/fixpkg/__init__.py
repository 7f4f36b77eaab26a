from .top import T

VERSION = "1"
