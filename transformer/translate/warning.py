"""The warning a translation gives when it had to change its input to translate it.

Its own module because both the translator (a sentence cut to the model's input limit) and the
document layer (a sentence translated in pieces) give it, and each of them stays apart from the
other.
"""

from __future__ import annotations


class TranslationWarning(UserWarning):
    """Input that was changed to be translatable (e.g. truncated)."""
