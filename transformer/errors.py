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


# The modules each optional extra of pyproject.toml brings that a command needs, by the names they
# are imported by (with those its packages bring in turn and this package imports itself: fastapi's
# pydantic and starlette). The tensorboard extra is not here: training goes on without it, with a note.
EXTRA_MODULES = {
    "serve": ("fastapi", "uvicorn", "multipart", "python_multipart", "pydantic", "starlette"),
    "interop": ("transformers", "huggingface_hub", "sentencepiece", "ctranslate2", "onnx", "onnxscript", "onnxruntime"),
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` in a checkout, with the tested versions of constraints.txt."""
    return f'pip install -c constraints.txt -e ".[{extra}]"'


class MissingExtraError(UserError):
    """An optional part of the package needs an extra that is not installed.

    ``MissingExtraError("serve", "transformer serve")`` reads: transformer serve needs the 'serve'
    extra, with the command that installs it.
    """

    def __init__(self, extra: str, what: str, package: str | None = None) -> None:
        self.extra = extra
        missing = f" (the '{package}' package is missing)" if package else ""
        super().__init__(f"{what} needs the '{extra}' extra{missing}: install it with "
                         f"{install_hint(extra)} in a checkout, or pip install \"transformer[{extra}]\"")

    @classmethod
    def of(cls, err: ModuleNotFoundError, what: str) -> MissingExtraError | None:
        """The error to show for ``err`` where the module it misses belongs to an extra (see
        ``EXTRA_MODULES``), None where it does not (then it is a bug of this package)."""
        package = (err.name or "").partition(".")[0]
        extra = next((extra for extra, names in EXTRA_MODULES.items() if package in names), None)
        return None if extra is None else cls(extra, what, package)
