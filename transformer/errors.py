"""The errors a user can fix, apart from bugs.

:class:`UserError` is raised by every check of what the user gave: command-line arguments,
settings, files, run directories, HTTP requests. Its message names the problem and the fix. The
command line prints it as one line with exit status 2 and the server answers it with a 4xx; any
other exception is a bug in this package, shown with its traceback (exit status 1) or answered
500 with an error id while the traceback goes to the server's log.

It derives from ``ValueError`` so that code catching a bad value (``except ValueError``) keeps
catching it; the reverse does not hold: a plain ``ValueError`` is never taken for the user's mistake.

This module imports nothing, so the command line can name these errors before torch loads.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake in what the user gave (arguments, settings, a file, a run directory, a request)."""


class MissingExtraError(UserError):
    """An optional part of the package needs an extra that is not installed.

    ``MissingExtraError("serve", "transformer serve")`` reads: transformer serve needs the 'serve'
    extra, with the command that installs it.
    """

    def __init__(self, extra: str, what: str, package: str | None = None) -> None:
        self.extra = extra
        missing = f" (the '{package}' package is missing)" if package else ""
        super().__init__(f"{what} needs the '{extra}' extra{missing}: install it with "
                         f"pip install -c constraints.txt -e \".[{extra}]\" in a checkout, or "
                         f"pip install \"transformer[{extra}]\"")
