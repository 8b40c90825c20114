"""How long to pause before checking again for something that is on its way (pods gone,
an engine up, a node Ready).

A twentieth of the time waited so far, between a floor and a cap: a change that takes a
couple of seconds is seen within ~0.1 s of happening, one that takes minutes costs at
most one check per `cap`. A fixed interval had to choose between the two: at 2 s it added
a second per drained node on average; at 0.1 s it would ask ten times a second for
minutes.
"""

from __future__ import annotations

FLOOR = 0.1


def pause(waited: float, cap: float, floor: float = FLOOR) -> float:
    return max(min(floor, cap), min(cap, waited / 20))
