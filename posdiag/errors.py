"""The one exception hierarchy of posdiag.

Every error a user can cause (bad file, bad parameter, bad data) is a :class:`PosdiagError`.
The CLI turns it into a single ``Error: ...`` line and its ``exit_code``; library users catch it.
"""

from __future__ import annotations

__all__ = ["PosdiagError", "PosdiagWarning"]


class PosdiagError(Exception):
    """Root of all user-facing errors; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class PosdiagWarning(UserWarning):
    """Numerical facts the user should see but that do not stop the analysis."""
