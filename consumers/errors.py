"""Re-export of :mod:`projections.errors` (the exception tree lives in the lowest I/O layer)."""

from projections.errors import *  # noqa: F403
from projections.errors import __all__  # noqa: F401
