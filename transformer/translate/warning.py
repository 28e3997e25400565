"""The warnings a translation gives when it had to change its input to translate it, or could not
follow a glossary.

Its own module because both the translator (a sentence cut to the model's input limit) and the
document layer (a sentence translated in pieces) give it, and each of them stays apart from the
other.
"""

from __future__ import annotations


class TranslationWarning(UserWarning):
    """Input that was changed to be translatable (e.g. truncated)."""


class TruncationWarning(TranslationWarning):
    """A sentence cut to the model's input limit, with what a message needs to name it where it is
    shown (the command line names the input line, not the sentence's place in a batch).

    Args:
        sentence: the sentence's place in the texts given to the translator, from 1.
        tokens: its length in tokens.
        limit: the tokens translated (the model's input limit).
        keep_eos: whether the last of them is the end-of-source token a source tokenizer appends.
    """

    def __init__(self, sentence: int, tokens: int, limit: int, keep_eos: bool) -> None:
        self.sentence, self.tokens, self.limit, self.keep_eos = sentence, tokens, limit, keep_eos
        super().__init__(self.describe(f"sentence {sentence}"))

    def describe(self, what: str) -> str:
        """The message, naming the sentence as ``what`` (``"sentence 4"``, ``"line 12"``)."""
        kept = f"{self.limit - 1} and the end-of-source token" if self.keep_eos else f"{self.limit}"
        return f"{what} has {self.tokens} tokens; translating its first {kept} (the model's input limit)"


class TermWarning(TranslationWarning):
    """Glossary terms a sentence's translation does not contain: the constrained search reached
    the sentence's length limit before it could produce them.

    Args:
        terms: the glossary's ``Term`` objects that are missing.
        where: the sentence, as the message names it ("sentence 3", "line 12").
    """

    def __init__(self, terms: list, where: str) -> None:
        self.terms, self.where = list(terms), where
        listed = ", ".join(f"{t.source!r} -> {t.target!r}" for t in self.terms)
        super().__init__(f"{where}: the glossary's {listed} could not be placed in the translation within its "
                         "length limit (raise --max-len-b, or check the term)")
