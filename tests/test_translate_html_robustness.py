"""HTML translation (transformer/translate/html.py) on malformed and generated pages: nothing lost
(no text, no tag), every tag kept in order and nested, any string safe (properties checked with
hypothesis); fake translators only (no model). The hand-written cases for well-formed pages are in
test_translate_html.py."""

from collections import Counter
from html.parser import HTMLParser

import pytest
from html_helpers import Recorder, count_by_name, nested, reverse_words, tags, upper
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer.errors import UserError
from transformer.translate.html import MAX_HTML_DEPTH, html_sentences, translate_html


# --- Malformed pages ---------------------------------------------------------------------


def test_malformed_html_loses_no_text():
    page = "<div><p>Unclosed <b>bold text<p>Next para</div></span>stray end<li>Item a<li>Item b</ul> tail & more < less"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Unclosed bold text", "Next para", "stray end", "Item a", "Item b", "tail & more < less"]
    assert count_by_name(out) == count_by_name(page)
    assert out == ("<div><p>UNCLOSED <b>BOLD TEXT<p>NEXT PARA</div></span>STRAY END<li>ITEM A<li>ITEM B</ul>"
                   " TAIL &amp; MORE &lt; LESS")


def test_unclosed_kept_elements_end_at_their_parent():
    page = "<div><p>Use <code>foo</p><p>Then this.</p></div><div><pre>raw</div><p>After.</p>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Use foo", "Then this.", "After."]
    assert out == "<div><p>USE <code>foo</p><p>THEN THIS.</p></div><div><pre>raw</div><p>AFTER.</p>"


def test_broken_markup_and_odd_references():
    page = "<p>A &#; b &foo; c &amp d</> e <!x> f. <a href='x'>Link</p> <b unclosed"
    out = translate_html(page, upper)
    assert count_by_name(out) == count_by_name(page)
    assert translate_html(page, lambda ss: list(ss)) == page
    assert "LINK" in out


def test_wrong_number_of_translations_is_an_error():
    with pytest.raises(ValueError):
        translate_html("<p>One. Two.</p>", lambda ss: ["UN."])
    with pytest.raises(TypeError):
        translate_html(b"<p>x</p>", upper)


# --- Properties ---------------------------------------------------------------------------

WORDS = ["cat", "dog", "the", "sleeps", "a", "runs", "Dr.", "M.", "3.5", "x", "é", "très", "über", "z.B."]
TEXT_BITS = WORDS + [". ", ", ", "! ", "? ", " ", "  ", "\n", "\t", "&amp;", "&nbsp;", "&lt;", "&#233;", "&eacute;", "…"]
JUNK = ["<", "&", ">", "</b>", "</p>", "<i>", "</>", "<!>", "&#;", "&zz;", "<b", "\"", "'", "</ span>"]
ATTRS = ["", ' class="k"', " href='/a?b=1&amp;c=2'", " title=Hello", ' data-x="a > b"', " lang=fr  ", " translate=no"]

text = st.lists(st.sampled_from(TEXT_BITS), min_size=1, max_size=8).flatmap(
    lambda bits: st.sampled_from([" ".join(bits), "".join(bits)]))


def element(children, names):
    return st.tuples(st.sampled_from(names), st.sampled_from(ATTRS), children).map(
        lambda t: f"<{t[0]}{t[1]}>{t[2]}</{t[0]}>")


def documents(malformed):
    """HTML-ish pages: text with entities, inline and block elements (attributes in all quotings),
    kept elements, comments, a doctype; with ``malformed``, stray and unclosed tags and bare < & >."""
    points = st.sampled_from(["<br>", "<br/>", '<img src="a.png" alt="A cat">', "<!-- c -->", "<wbr>"])
    kept = st.sampled_from(["<script>if (a < b) { x = '<p>t</p>'; }</script>", "<style>p { color: red }</style>",
                            "<textarea>some text</textarea>", "<pre> keep <b>me</b> \n</pre>",
                            "<code>x.y()</code>", "<kbd>Ctrl</kbd>"])
    junk = st.sampled_from(JUNK) if malformed else points

    def content(depth):
        options = [text, text, text, points, kept, junk]
        if depth < 3:
            options += [element(st.deferred(lambda: content(depth + 1)), ["b", "i", "a", "em", "strong", "span"]),
                        element(st.deferred(lambda: content(depth + 1)), ["p", "div", "li", "td", "h1"])]
        return st.lists(st.one_of(*options), min_size=1, max_size=5).map("".join)

    return st.tuples(st.sampled_from(["", "<!DOCTYPE html>\n"]), content(0)).map("".join)


def visible_text(page):
    """The text of a well-formed ``page`` outside the elements kept as written."""
    kept, void = {"script", "style", "textarea", "pre", "code", "kbd"}, {"br", "img", "wbr"}

    class Text(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.stack, self.text = [], []

        def handle_starttag(self, tag, attrs):
            if tag not in void:
                self.stack.append(tag in kept or ("translate", "no") in attrs)

        def handle_startendtag(self, tag, attrs):
            pass

        def handle_endtag(self, tag):
            self.stack.pop()

        def handle_data(self, data):
            if not any(self.stack):
                self.text.append(data)

    parser = Text()
    parser.feed(page)
    parser.close()
    return " ".join(parser.text)


PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(documents(malformed=True))
def test_identity_translator_gives_back_the_page(page):
    assert translate_html(page, lambda ss: list(ss)) == page


@PROPERTY
@given(documents(malformed=True), st.sampled_from(["upper", "reverse", "shorter", "longer", "empty"]))
def test_every_tag_kept_in_order(page, kind):
    fn = {
        "upper": str.upper,
        "reverse": reverse_words,
        "shorter": lambda s: " ".join(s.split()[: max(1, len(s.split()) // 2)]).upper(),
        "longer": lambda s: " ".join(w.upper() + " z" for w in s.split()),
        "empty": lambda s: "",
    }[kind]
    recorder = Recorder(fn)
    out = translate_html(page, recorder)
    assert tags(out) == tags(page)
    assert recorder.sentences == html_sentences(page)
    assert len(recorder.calls) <= 1


@PROPERTY
@given(st.booleans().flatmap(lambda bad: st.tuples(st.just(bad), documents(bad))), st.randoms(use_true_random=False))
def test_any_alignment_keeps_every_tag_and_the_nesting(case, random):
    malformed, page = case

    def align(sources, targets):
        return [[random.randrange(-1, len(s.split())) for _ in t.split()] for s, t in zip(sources, targets)]

    out = translate_html(page, lambda ss: [reverse_words(s).upper() for s in ss], align=align)
    assert count_by_name(out) == count_by_name(page)
    if not malformed:
        assert nested(out) and nested(page)


@PROPERTY
@given(documents(malformed=False))
def test_no_sentence_lost(page):
    recorder = Recorder()
    out = translate_html(page, recorder)
    # Every letter of the visible text was translated (upper-cased) ...
    assert not any(c.islower() for c in visible_text(out)), visible_text(out)
    # ... and was sent: every letter of the visible text is in the sentences sent.
    sent = Counter(c for s in recorder.sentences for c in s if c.isalpha())
    seen = Counter(c for c in visible_text(page) if c.isalpha())
    assert seen - sent == Counter()


PIECES = list("<>/&;#!?-=\"' \n\tabpi\u00e9x0[]") + [
    "<p>", "<b>", "</b>", "<!--", "-->", "<script>", "</script>", "&amp;", "<pre>", "<code>", " a ", ". B"]


@PROPERTY
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_any_string_is_safe(page):
    assert translate_html(page, lambda ss: list(ss)) == page
    out = translate_html(page, upper)
    assert tags(out) == tags(page)


# --- Deep nesting: a limit that refuses, linear time below it ------------------------------


def test_a_page_nested_past_the_limit_is_refused():
    depth = MAX_HTML_DEPTH + 1
    page = "<p>" + "<b>" * depth + "Le chat." + "</b>" * depth + "</p>"
    for call in (lambda: html_sentences(page), lambda: translate_html(page, upper)):
        with pytest.raises(UserError, match=f"more than {MAX_HTML_DEPTH:,} elements open at once"):
            call()


def test_omitted_end_tags_do_not_pile_up_to_the_limit():
    # Paragraphs, list items and table cells whose end tag the page leaves out end where the next
    # one starts, as HTML says: a long page written so is read, not refused.
    count = MAX_HTML_DEPTH + 10
    for page in ("<body>" + "<p>Le chat." * count + "</body>",
                 "<ul>" + "<li>Le chat." * count + "</ul>",
                 "<table>" + "<tr><td>Le chat.<td>Le chien." * (count // 2) + "</table>",
                 "<dl>" + "<dt>Le chat.<dd>Le chien." * (count // 2) + "</dl>"):
        assert html_sentences(page).count("Le chat.") == page.count("Le chat.")


def test_tags_nested_deep_inside_a_sentence_are_placed_by_alignment():
    # The alignment's layout walks the nesting with a stack of its own, not Python's.
    depth = 3000
    page = "<p>Le " + "<b>" * depth + "chat" + "</b>" * depth + " mange.</p>"

    def align(sources, translations):
        return [list(range(len(t.split()))) for t in translations]

    out = translate_html(page, upper, align=align)
    assert out == "<p>LE " + "<b>" * depth + "CHAT" + "</b>" * depth + " MANGE.</p>"


def test_a_long_chain_of_kept_elements_is_one_element():
    count = 20_000
    chain = "+".join(f"<kbd>K{i}</kbd>" for i in range(count))
    page = f"<p>Press {chain} now.</p>"
    assert html_sentences(page) == [f"Press {'+'.join(f'K{i}' for i in range(count))} now."]
    assert translate_html(page, upper) == f"<p>PRESS {chain} NOW.</p>"
