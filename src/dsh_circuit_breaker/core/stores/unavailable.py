"""Kept apart from `base` so that raising it does not import `typing`."""


class StoreUnavailable(RuntimeError):
    """The store could not be reached within its budget; the breaker fails open (or closed)."""
