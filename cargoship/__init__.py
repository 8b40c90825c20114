"""cargoship: the command line that ties planner and executor together."""

from planner import __version__

__all__ = ["__version__"]
