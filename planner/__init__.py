"""cargoship planner: reads desired config and live host state, read-only, and reports a plan.

The planner never imports the executor; the executor builds on the planner.
"""

import logging

__version__ = "0.1.0"

log = logging.getLogger("cargoship.planner")
