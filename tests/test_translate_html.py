"""HTML translation (transformer/translate/html.py) on hand-written pages: text translated, markup
kept byte for byte, inline tags kept inside their sentence; blocks and sentences, inline tags,
what is kept as written. Fake translators only (no model). Malformed pages and the properties
over generated pages are in test_translate_html_robustness.py."""

import pytest
from html_helpers import Recorder, count_by_name, nested, reverse_words, tags, upper

from transformer.translate.html import html_sentences, translate_html


# --- Blocks and sentences ---------------------------------------------------------------


def test_blocks_are_translated_separately():
    page = (
        "<h1>Main title</h1>\n<div>A division</div>\n<p>First paragraph.</p>\n"
        "<ul><li>One item</li><li>Other item</li></ul>\n"
        "<table><tr><td>Cell one</td><td>Cell two</td></tr></table>"
    )
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.calls == [
        ["Main title", "A division", "First paragraph.", "One item", "Other item", "Cell one", "Cell two"]
    ]
    assert out == page.replace("Main title", "MAIN TITLE").replace("A division", "A DIVISION").replace(
        "First paragraph.", "FIRST PARAGRAPH.").replace("One item", "ONE ITEM").replace(
        "Other item", "OTHER ITEM").replace("Cell one", "CELL ONE").replace("Cell two", "CELL TWO")


def test_one_call_with_every_sentence_once():
    page = "<p>First one. Second one.</p><p>Dr. Smith came. He left!</p><li>No final punctuation"
    recorder = Recorder()
    translate_html(page, recorder, lang="en")
    assert len(recorder.calls) == 1
    assert recorder.sentences == ["First one.", "Second one.", "Dr. Smith came.", "He left!", "No final punctuation"]
    assert html_sentences(page, lang="en") == recorder.sentences


def test_source_line_breaks_are_spaces_and_br_is_a_boundary():
    page = "<p>This sentence is\n   wrapped in the source.</p><p>Line one<br>line two<br/>\nline three</p>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["This sentence is wrapped in the source.", "Line one", "line two", "line three"]
    assert out == ("<p>THIS SENTENCE IS WRAPPED IN THE SOURCE.</p>"
                   "<p>LINE ONE<br>LINE TWO<br/>\nLINE THREE</p>")


def test_whitespace_between_sentences_is_kept():
    page = "<p>\n  One here.   Two here.\n</p>"
    assert translate_html(page, upper) == "<p>\n  ONE HERE.   TWO HERE.\n</p>"


def test_sentences_without_letters_are_not_translated():
    page = "<p>2024</p><nav>Home | About</nav><p> — </p>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Home | About"]
    assert out == "<p>2024</p><nav>HOME | ABOUT</nav><p> — </p>"


def test_no_text_no_call_and_byte_identical():
    page = '<!DOCTYPE html>\n<html lang="fr"><head><meta charset=utf-8><script>x = "<p>a</p>"</script></head>\n<body> <img src="a.png" alt="Un chat"> <!-- c --> </body></html>'

    def fail(_):
        raise AssertionError("translate called")

    assert translate_html(page, fail) == page
    assert translate_html("", fail) == ""


# --- Inline tags -------------------------------------------------------------------------


def test_inline_tags_stay_in_their_sentence():
    page = '<p>This is <b>very</b> <i>important <a href="/x" class="k">news</a></i>. Next one.</p>'
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["This is very important news.", "Next one."]
    assert out == '<p>THIS IS <b>VERY</b> <i>IMPORTANT <a href="/x" class="k">NEWS</a></i>. NEXT ONE.</p>'


def test_inline_tags_follow_the_proportion_of_the_words():
    # 6 source words, 3 target words: the bold word (3rd of 6) goes to the 2nd of 3.
    page = "<p>one two <b>three</b> four five six</p>"
    out = translate_html(page, lambda ss: ["UN DEUX TROIS"])
    assert out == "<p>UN <b>DEUX</b> TROIS</p>"
    # A tag inside the sentence stays inside it, even for a one-word tail.
    out = translate_html("<p>one two three four <b>five</b></p>", lambda ss: ["X Y"])
    assert out == "<p>X <b>Y</b></p>"
    out = translate_html("<p>one <b>two</b> three four five six</p>", lambda ss: ["X Y Z"])
    assert out == "<p>X <b>Y</b> Z</p>"


def test_tags_at_sentence_edges_stay_outside():
    page = "<p><b>Whole bold sentence.</b> <i>Another one.</i></p>"
    assert translate_html(page, upper) == "<p><b>WHOLE BOLD SENTENCE.</b> <i>ANOTHER ONE.</i></p>"


def test_a_tag_across_two_sentences():
    page = "<p>First <b>one. Second</b> one.</p>"
    out = translate_html(page, upper)
    assert out == "<p>FIRST <b>ONE. SECOND</b> ONE.</p>"
    out = translate_html(page, lambda ss: [reverse_words(s) for s in ss])
    assert count_by_name(out) == count_by_name(page) and nested(out)


def test_punctuation_stays_outside_the_tag():
    page = '<p>See (<b>this</b>), "<i>that</i>" and <a href=x>here</a>.</p>'
    assert translate_html(page, upper) == '<p>SEE (<b>THIS</b>), "<i>THAT</i>" AND <a href=x>HERE</a>.</p>'


def test_reordering_translator_keeps_every_tag_nested():
    page = '<p>The <b>red <i>car</i></b> and the <a href="#">blue <em>bike</em></a> are here.</p>'
    out = translate_html(page, lambda ss: [reverse_words(s) for s in ss])
    assert count_by_name(out) == count_by_name(page)
    assert tags(out) == tags(page)  # proportional placement keeps the tag order
    assert nested(out)


def test_alignment_moves_tags_with_their_words():
    # The reversing translator with the matching alignment: each tag follows its word.
    def align(sources, targets):
        return [[len(s.split()) - 1 - j for j in range(len(t.split()))] for s, t in zip(sources, targets)]

    page = "<p>A <b>b <i>c</i></b>, d <a href=x>e</a> f.</p>"
    out = translate_html(page, lambda ss: [reverse_words(s) for s in ss], align=align)
    assert out == "<p>f. <a href=x>e</a> d <b><i>c</i>, b</b> A</p>"
    assert count_by_name(out) == count_by_name(page) and nested(out)


def test_alignment_that_says_nothing_falls_back_to_proportion():
    page = "<p>one two <b>three</b> four five six</p>"
    out = translate_html(page, lambda ss: ["UN DEUX TROIS"], align=lambda s, t: [[None, -1, None]])
    assert out == "<p>UN <b>DEUX</b> TROIS</p>"
    with pytest.raises(ValueError):
        translate_html(page, lambda ss: ["UN DEUX TROIS"], align=lambda s, t: [[0]])


def test_tags_that_do_not_nest_in_the_sentence_keep_their_order_with_an_aligner():
    page = "<p>one <b>two <i>three</b> four</i> five.</p>"
    out = translate_html(page, upper, align=lambda s, t: [list(range(len(x.split()))) for x in t])
    assert tags(out) == tags(page)
    assert out == "<p>ONE <b>TWO <i>THREE</b> FOUR</i> FIVE.</p>"


def test_inline_points_images_and_comments():
    page = '<p>A cat <img src="cat.png" alt="a cat"> sleeps<!-- note --> here.</p>'
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["A cat sleeps here."]
    assert out == '<p>A CAT <img src="cat.png" alt="a cat"> SLEEPS<!-- note --> HERE.</p>'


def test_empty_translation_keeps_every_tag():
    page = "<p>Some <b>bold</b> and <i>italic</i> words.</p>"
    out = translate_html(page, lambda ss: [""])
    assert count_by_name(out) == count_by_name(page) and nested(out)


# --- Kept as written ---------------------------------------------------------------------


def test_script_style_pre_textarea_untouched():
    script = '<script type="text/javascript">\nif (a < b && c > d) { document.write("<p>Hello world.</p>"); }\n</script>'
    style = "<style>\np::before { content: 'Hello world.'; }\n</style>"
    pre = "<pre>\n  Hello   <b>world</b>.\n  &lt;tag&gt; &amp; more\n</pre>"
    textarea = "<textarea name=t>Type your text here.</textarea>"
    page = f"<html><head>{script}{style}</head><body>{pre}<p>Translate me.</p>{textarea}</body></html>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Translate me."]
    for kept in (script, style, pre, textarea):
        assert kept in out
    assert out == page.replace("Translate me.", "TRANSLATE ME.")


def test_inline_code_is_kept_and_its_sentence_is_whole():
    page = "<p>Run <code>make install</code> to build it.</p><p>Press <kbd>Ctrl</kbd>+<kbd>C</kbd> now.</p>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Run make install to build it.", "Press Ctrl+C now."]
    assert out == "<p>RUN <code>make install</code> TO BUILD IT.</p><p>PRESS <kbd>Ctrl</kbd>+<kbd>C</kbd> NOW.</p>"


def test_inline_code_found_in_the_translation_replaces_it():
    page = "<p>Call <code>x.y()</code>, then stop.</p>"
    out = translate_html(page, lambda ss: ["Ensuite, appelez x.y(), puis arrêtez."])
    assert out == "<p>Ensuite, appelez <code>x.y()</code>, puis arrêtez.</p>"


def test_inline_code_inside_a_word():
    page = "<p>Two <code>Foo</code>s were made.</p>"
    assert translate_html(page, upper) == "<p>TWO <code>Foo</code>S WERE MADE.</p>"
    out = translate_html(page, lambda ss: ["Deux Foos furent faits."])
    assert out == "<p>Deux <code>Foo</code>s furent faits.</p>"


def test_kept_element_starting_with_a_no_break_space():
    page = "<p><b translate=no>&nbsp; Acme</b>Corp sells.</p>"
    out = translate_html(page, upper)
    assert tags(out) == tags(page)
    assert out == "<p><b translate=no>&nbsp; Acme</b>CORP SELLS.</p>"


def test_code_alone_is_not_translated():
    page = "<ul><li><code>--help</code></li><li><code>ls -la</code></li></ul><pre><code>x = 1</code></pre>"
    recorder = Recorder()
    assert translate_html(page, recorder) == page
    assert recorder.calls == []


def test_translate_no_and_notranslate():
    page = ('<p>Buy <span translate="no">Acme Widget</span> today.</p>'
            '<div class="brand notranslate"><p>Acme Inc.</p></div><p translate=no>Keep me.</p>')
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Buy Acme Widget today."]
    assert out == page.replace("Buy ", "BUY ").replace(" today.", " TODAY.")


def test_attributes_are_byte_identical_and_not_translated():
    page = """<p class='x'  ID=Main data-x="a &amp; b" title="Hello world"><a HREF=/path?a=1&amp;b=2 target=_blank>Click here</a> now.</p>"""
    out = translate_html(page, upper)
    assert out == """<p class='x'  ID=Main data-x="a &amp; b" title="Hello world"><a HREF=/path?a=1&amp;b=2 target=_blank>CLICK HERE</a> NOW.</p>"""


def test_entities_decoded_for_the_model_and_escaped_back():
    page = "<p>Tom &amp; Jerry&nbsp;say &lt;hi&gt; &eacute;t&#233; &#x263A; caf\u00e9.</p>"
    recorder = Recorder()
    out = translate_html(page, recorder)
    assert recorder.sentences == ["Tom & Jerry\u00a0say <hi> été ☺ café."]
    assert out == "<p>TOM &amp; JERRY&nbsp;SAY &lt;HI&gt; ÉTÉ ☺ CAFÉ.</p>"
    # What the model returns is escaped: no markup can come out of a translation.
    out = translate_html("<p>Some text.</p>", lambda ss: ['<script>alert("x")</script> & co'])
    assert out == '<p>&lt;script&gt;alert("x")&lt;/script&gt; &amp; co</p>'
    # Untranslated text keeps its entities as written.
    assert translate_html("<p>&copy; 2024 &amp;&nbsp;1</p>", upper) == "<p>&copy; 2024 &amp;&nbsp;1</p>"


def test_comments_doctype_and_declarations_kept():
    page = ('<?xml version="1.0"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0//EN">\n'
            "<!-- header: do not translate -->\n<p>Hello <!-- inline --> world.</p><![CDATA[ raw ]]>")
    out = translate_html(page, upper)
    assert out == page.replace("Hello <!-- inline --> world.", "HELLO <!-- inline --> WORLD.")


def test_identical_translation_keeps_the_source_bytes():
    page = "<p>Keep <B>THIS</B>&nbsp;&amp;\n THAT.</p>"
    assert translate_html(page, lambda ss: list(ss)) == page


def test_language_crlf_and_what_the_model_returns():
    page = "<p>M. Dupont est arrivé. Mme Martin aussi.</p>\r\n<p>Une ligne\r\ncoupée.</p>"
    recorder = Recorder()
    out = translate_html(page, recorder, lang="fr")
    assert recorder.sentences == ["M. Dupont est arrivé.", "Mme Martin aussi.", "Une ligne coupée."]
    assert out == "<p>M. DUPONT EST ARRIVÉ. MME MARTIN AUSSI.</p>\r\n<p>UNE LIGNE COUPÉE.</p>"
    # Line breaks in a translation become spaces; U+00A0 is written &nbsp;.
    assert translate_html("<p>Some text.</p>", lambda ss: [" un\u00a0deux\ntrois "]) == "<p>un&nbsp;deux trois</p>"


# --- Every element keeps a word --------------------------------------------------------


@pytest.mark.parametrize("page, translation, expected", [
    ('<p>Voir <a href="x">ici</a> et <a href="y">là</a> maintenant.</p>', "See now.",
     '<p><a href="x">See</a> <a href="y">now.</a></p>'),
    ('<p>A <a href="x">b</a> c <a href="y">d</a> e <a href="z">f</a> g.</p>', "x y z.",
     '<p><a href="x">x</a> <a href="y">y</a> <a href="z">z.</a></p>'),
    ('<p>Le <b>chat <i>noir</i></b> et <a href="y">le chien</a> dorment.</p>', "Cats sleep.",
     '<p><b><i>Cats</i></b> <a href="y">sleep.</a></p>'),
])
def test_each_element_keeps_a_word_when_the_translation_has_one_for_each(page, translation, expected):
    """Fewer translated words than the source had, but one for each element side by side: none comes
    back empty (the elements wrap the words at their proportional places, moved apart as needed)."""
    assert translate_html(page, lambda sentences: [translation for _ in sentences]) == expected


def test_with_fewer_words_than_elements_the_tags_are_all_kept():
    """Three links, two words: one link cannot have a word of its own (the limit docs/html.md names),
    yet every tag is there, in order."""
    page = '<p>A <a href="x">b</a> c <a href="y">d</a> e <a href="z">f</a> g.</p>'
    out = translate_html(page, lambda sentences: ["x y." for _ in sentences])
    assert tags(out) == tags(page)
    assert out.count("></a>") == 1
