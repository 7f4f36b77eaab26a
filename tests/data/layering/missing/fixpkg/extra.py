from .a import A
