from .y import Thing
