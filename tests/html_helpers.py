"""Fake translators and tag inspectors shared by test_translate_html.py and
test_translate_html_robustness.py (HTML translation, transformer/translate/html.py)."""

from collections import Counter
from html.parser import HTMLParser


class Recorder:
    """A fake translator: applies ``fn`` to each sentence and records what it was given."""

    def __init__(self, fn=str.upper):
        self.fn, self.calls = fn, []

    def __call__(self, sentences):
        self.calls.append(list(sentences))
        return [self.fn(s) for s in sentences]

    @property
    def sentences(self):
        return [s for call in self.calls for s in call]


def upper(sentences):
    return [s.upper() for s in sentences]


def reverse_words(sentence):
    return " ".join(reversed(sentence.split()))


class Tags(HTMLParser):
    """Every tag of a page, in order, as written: ("start", raw) and ("end", name)."""

    def __init__(self, page):
        super().__init__(convert_charrefs=True)
        self.tags, self.text = [], []
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append(("start", self.get_starttag_text()))

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag):
        self.tags.append(("end", tag))

    def handle_data(self, data):
        self.text.append(data)


def tags(page):
    return Tags(page).tags


def count_by_name(page):
    return Counter((kind, raw.split()[0].strip("<>/").lower() if kind == "start" else raw) for kind, raw in tags(page))


def nested(page, names=("b", "i", "a", "em", "strong", "span", "u")):
    """Whether the inline tags of ``page`` open and close in a properly nested order."""
    stack = []
    for kind, raw in tags(page):
        name = raw.split()[0].strip("<>/").lower() if kind == "start" else raw
        if name not in names:
            continue
        if kind == "start":
            stack.append(name)
        elif not stack or stack.pop() != name:
            return False
    return not stack
