"""The translation memory's refusals: each a :class:`~transformer.errors.UserError` with a
one-line message that names the file and the problem."""

from __future__ import annotations

from transformer.errors import UserError


class TMError(UserError):
    """A translation memory that cannot be opened, read or written as asked (a file that is not
    a memory, a newer schema, a read-only place, an unknown entry, text that cannot be stored)."""


class TMBusyError(TMError):
    """Another process held the memory's write lock for longer than the timeout: trying again
    later may succeed (a server answers it 503 rather than 4xx)."""


class TMFormatError(TMError):
    """A TMX or TSV file that cannot be imported, or a pair given in code that cannot be stored;
    the message names the file and the line (``memory.tmx:12: ...``) or the pair (``pair 3: ...``)."""
