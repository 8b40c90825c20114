"""The lab: real SSH hosts on the local machine for cargoship's tests and demo."""

from .lab import Lab, LabError, down_all
from .spec import DEFAULT_VERSIONS, FAST_NODES, HostSpec, LabHost, Timing

__all__ = ["DEFAULT_VERSIONS", "FAST_NODES", "HostSpec", "Lab", "LabError", "LabHost", "Timing",
           "down_all"]
