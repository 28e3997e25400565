"""The translation memory's files: TMX 1.4b (a CAT tool's export in tests/data/cat_tool.tmx,
inline markup, read as a stream, refused when broken, hostile or oversized) and TSV; exports
imported again give the same entries."""

from __future__ import annotations

import io
import socket
import tracemalloc
from pathlib import Path

import pytest

from transformer.memory import TMFormatError, TranslationMemory
from transformer.memory.tmx import TMXUnit, pick, read_tmx, write_tmx
from transformer.memory.tsv import tsv_pairs

DATA = Path(__file__).resolve().parent / "data"
CAT_TOOL = DATA / "cat_tool.tmx"


@pytest.fixture
def tm(tmp_path):
    with TranslationMemory(tmp_path / "memory.db") as memory:
        yield memory


def tmx(body: str, doctype: str = "") -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n{doctype}<tmx version="1.4">\n<header srclang="en" '
            f'creationtool="t" creationtoolversion="1" segtype="sentence" o-tmf="t" adminlang="en" '
            f'datatype="plaintext"/>\n<body>\n{body}</body>\n</tmx>\n')


def unit(source: str, target: str) -> str:
    return f'<tu><tuv xml:lang="en"><seg>{source}</seg></tuv><tuv xml:lang="fr"><seg>{target}</seg></tuv></tu>\n'


# ------------------------------------------------------------------------------------ reading TMX
def test_a_cat_tool_memory_is_read_with_its_markup_reduced_to_text():
    units = list(read_tmx(CAT_TOOL))
    assert [u.tuid for u in units] == ["1", "2", "3", "4", "5", "6"]
    first = units[0]
    assert list(first.segments) == ["en-US", "fr-FR", "de-DE"] and first.line == 12
    assert first.segments["en-US"] == "Press Save to keep your changes."
    assert first.segments["de-DE"] == "Drücken Sie Speichern, um Ihre Änderungen zu behalten."
    assert units[1].segments == {"en-US": "Click  to open the Settings page.",
                                 "fr-FR": "Cliquez sur  pour ouvrir la page Paramètres."}
    assert units[2].segments == {"en-US": "See the help & the FAQ.", "fr-FR": "Voir l\u2019aide & la FAQ."}
    assert units[3].segments["en-US"] == "The file was\n        saved."


def test_a_cat_tool_memory_imports_by_language(tm):
    report = tm.import_tmx(CAT_TOOL, "en", "fr")
    assert (report.units, report.added, report.skipped, report.state) == (6, 4, 2, "complete")  # tu 4: no fr, tu 6: empty
    assert [(e.source, e.target) for e in tm.entries()] == [
        ("Press Save to keep your changes.", "Appuyez sur Enregistrer pour garder vos modifications."),
        ("Click  to open the Settings page.", "Cliquez sur  pour ouvrir la page Paramètres."),
        ("See the help & the FAQ.", "Voir l\u2019aide & la FAQ."),
        ("Choose a colour.", "Choisissez une couleur."),  # en-GB and fr-CA: the regional variants of en and fr
    ]
    assert tm.lookup("Click to open the Settings page.", "en", "fr").target.startswith("Cliquez")
    german = tm.import_tmx(CAT_TOOL, "en-US", "de-DE")
    assert german.added == 2
    assert tm.lookup("The file was saved.", "en-us", "de-de").target == "Die Datei wurde gespeichert."
    assert tm.import_tmx(CAT_TOOL, "en-GB", "fr-FR").added == 0  # no unit has both


def test_pick_prefers_the_exact_variant():
    segments = {"en-GB": "colour", "en-US": "color", "fr": "couleur"}
    assert pick(segments, "en-us") == "color"
    assert pick(segments, "en") == "colour"
    assert pick(segments, "fr-FR") is None and pick(segments, "de") is None


def test_a_utf16_memory_reads_as_its_utf8_original(tmp_path):
    utf16 = tmp_path / "utf16.tmx"
    text = CAT_TOOL.read_text(encoding="utf-8").replace('encoding="UTF-8"', 'encoding="UTF-16"')
    utf16.write_bytes(text.encode("utf-16"))  # with its byte-order mark, as CAT tools write it
    assert [u.segments for u in read_tmx(utf16)] == [u.segments for u in read_tmx(CAT_TOOL)]


def test_tmx_is_read_as_a_stream(tmp_path):
    big = tmp_path / "big.tmx"
    big.write_text(tmx("".join(unit(f"Sentence {i} " + "word " * 80, f"Phrase {i}") for i in range(8_000))),
                   encoding="utf-8")
    assert big.stat().st_size > 3_500_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in read_tmx(big))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 8_000 and peak < 1_500_000


def refused(tm: TranslationMemory, path: Path, text: str, message: str) -> TMFormatError:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TMFormatError, match=message) as caught:
        tm.import_tmx(path, "en", "fr", batch=2)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(path))
    assert tm.stats().total == 0  # what came before the problem is taken out again
    return caught.value


def test_broken_or_foreign_xml_is_refused_with_its_line(tm, tmp_path):
    many = "".join(unit(f"Good {i}.", f"Bon {i}.") for i in range(5))
    refused(tm, tmp_path / "broken.tmx", tmx(many + "<tu><tuv xml:lang='en'><seg>open</tuv></tu>\n"),
            r"broken.tmx:10: not well-formed XML \(mismatched tag, column \d+\)")
    refused(tm, tmp_path / "empty.tmx", "", r"empty.tmx:1: not well-formed XML \(no element found")
    refused(tm, tmp_path / "page.tmx", "<html><body>hi</body></html>", r"page.tmx:1: not a TMX file: its root element is <html>")
    refused(tm, tmp_path / "nolang.tmx", tmx("<tu><tuv><seg>x</seg></tuv></tu>\n"), r"nolang.tmx:5: a <tuv> without a language")
    refused(tm, tmp_path / "entity.tmx", tmx(unit("&nbsp;", "x")), r"entity.tmx:5: not well-formed XML \(undefined entity")
    assert [r.state for r in tm.imports()] == ["failed"] * 5
    with pytest.raises(TMFormatError, match="no such TMX file"):
        tm.import_tmx(tmp_path / "missing.tmx", "en", "fr")
    with pytest.raises(TMFormatError, match="is a folder"):
        tm.import_tmx(tmp_path, "en", "fr")


def test_billion_laughs_is_refused_at_once(tm, tmp_path):
    entities = ['<!ENTITY lol "lol">'] + [f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 or "")) * 10}">' for i in range(1, 10)]
    doctype = "<!DOCTYPE tmx [\n" + "\n".join(entities) + "\n]>\n"
    tracemalloc.start()
    try:
        refused(tm, tmp_path / "laughs.tmx", tmx(unit("&lol9;", "x"), doctype),
                r"laughs.tmx:3: the file declares an entity \(lol\)")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Refused at its first declaration (line 3), before any of the 3 GB of "lol"s was expanded (expat
    # allocates through Python's allocator, so tracemalloc sees its buffers): memory, not seconds.
    assert peak < 1_000_000, f"{peak} bytes allocated while refusing the file"


def test_external_entities_and_dtds_are_never_fetched(tm, tmp_path):
    """A listening socket that nothing may connect to, and a local file that nothing may read."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET", encoding="utf-8")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        server.setblocking(False)
        port = server.getsockname()[1]
        for name, doctype in (("file", f'<!DOCTYPE tmx [<!ENTITY leak SYSTEM "file://{secret}">]>\n'),
                              ("http", f'<!DOCTYPE tmx [<!ENTITY leak SYSTEM "http://127.0.0.1:{port}/x">]>\n'),
                              ("parameter", f'<!DOCTYPE tmx [<!ENTITY % p SYSTEM "http://127.0.0.1:{port}/p"> %p;]>\n')):
            err = refused(tm, tmp_path / f"{name}.tmx", tmx(unit("&leak; here", "x"), doctype),
                          "the file declares an entity")
            assert "TOP SECRET" not in str(err)
        # A DTD named by the DOCTYPE (as CAT tools write it) is not fetched, and the file reads.
        dtd = tmp_path / "dtd.tmx"
        dtd.write_text(tmx(unit("Fine.", "Bien."), f'<!DOCTYPE tmx SYSTEM "http://127.0.0.1:{port}/tmx14.dtd">\n'),
                       encoding="utf-8")
        assert tm.import_tmx(dtd, "en", "fr").added == 1
        with pytest.raises(BlockingIOError):
            server.accept()  # no connection was ever made
    entries = tm.entries()
    assert [e.source for e in entries] == ["Fine."] and all("SECRET" not in e.source for e in entries)


def test_an_oversized_segment_is_refused_while_it_is_read(tmp_path):
    path = tmp_path / "huge.tmx"
    path.write_text(tmx(unit("short", "court") + unit("x" * 50_000, "y")), encoding="utf-8")
    with TranslationMemory(tmp_path / "memory.db", max_chars=1000) as tm:
        refused(tm, path, path.read_text(encoding="utf-8"), r"huge.tmx:6: a segment longer than 1000 characters")
    # Refused as it grows: a 20 MB segment never fills memory.
    path.write_text(tmx(unit("x" * 20_000_000, "y")), encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(TMFormatError, match="huge.tmx:5: a segment longer than 1000 characters"):
            list(read_tmx(path, max_chars=1000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


# ------------------------------------------------------------------------------------ writing TMX
TRICKY = [
    ("Fish & chips <b>hot</b> \"now\" 'ok'", "Poisson & frites <b>chaud</b> « maintenant »"),
    ("Line one\nline two\r\nline three\twith a tab", "Ligne un\nligne deux\r\nligne trois\tavec tab"),
    ("Emoji 😀 and ]]> and &amp;", "Émoji 😀 et ]]> et &amp;"),
    ("مرحبا بالعالم", "שלום עולם"),
    ("  Leading and trailing spaces  ", "  Espaces  "),
]


def test_a_tmx_export_imports_as_the_same_entries(tm, tmp_path):
    for source, target in TRICKY:
        tm.add(source, target, "en", "fr", status="accepted")
    tm.add("Pending.", "En attente.", "en", "fr")
    tm.add("Other pair.", "Andere Sprache.", "en", "de", status="accepted")
    path = tmp_path / "export.tmx"
    assert tm.export_tmx(path, source_lang="en", target_lang="fr") == len(TRICKY)
    text = path.read_text(encoding="utf-8")
    assert 'srclang="en"' in text and 'creationtool="transformer"' in text and "creationtoolversion=" in text
    assert [u.segments for u in read_tmx(path)] == [{"en": s, "fr": t} for s, t in TRICKY]
    with TranslationMemory(tmp_path / "copy.db") as copy:
        assert copy.import_tmx(path, "en", "fr").added == len(TRICKY)
        assert [(e.source, e.target) for e in copy.entries()] == TRICKY
    everything = tmp_path / "all.tmx"
    assert tm.export_tmx(everything, status=None) == len(TRICKY) + 2
    assert 'srclang="*all*"' in everything.read_text(encoding="utf-8")


def test_write_tmx_writes_dates_and_properties():
    out = io.BytesIO()
    write_tmx(out, [TMXUnit({"en": "a"}, tuid="7", created="2026-11-29T04:07:00.123Z", props={"x-origin": "import"})],
              srclang="en")
    text = out.getvalue().decode("utf-8")
    assert '<tu tuid="7" creationdate="20261129T040700Z">' in text and '<prop type="x-origin">import</prop>' in text


# ------------------------------------------------------------------------------------ TSV
def test_tsv_reads_a_bom_crlf_and_blank_lines(tm, tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(b"\xef\xbb\xbfHello.\tBonjour.\r\n\r\nGood night.\tBonne nuit.\n")
    assert list(tsv_pairs(path)) == [(1, "Hello.", "Bonjour."), (3, "Good night.", "Bonne nuit.")]
    assert tm.import_tsv(path, "en", "fr").added == 2


@pytest.mark.parametrize("content, message", [
    (b"a\tb\nno tab here\n", r":2: 1 column; a line is source<TAB>target"),
    (b"a\tb\n\xff\xfe\tx\n", r":2: not UTF-8 \(byte 1 of the line\)"),
    (b"\xff\xfea\x00\t\x00b\x00", r":1: the file is UTF-16; save it as UTF-8"),
    (b"a\tb\nbell\x07\tx\n", r":2: the source holds a control character"),
    (b"a\t" + b"y" * 200 + b"\n", r":1: the target is longer than 100 characters"),
    (b"a\tb\n" + b"z" * 2000, r":2: a line longer than 803 bytes"),
])
def test_a_bad_tsv_line_is_named(tmp_path, content, message):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(content)
    with TranslationMemory(tmp_path / "memory.db", max_chars=100) as tm:
        with pytest.raises(TMFormatError, match=message):
            tm.import_tsv(path, "en", "fr")
        assert tm.stats().total == 0


def test_a_tsv_export_writes_one_line_per_entry(tm, tmp_path):
    for source, target in TRICKY:
        tm.add(source, target, "en", "fr", status="accepted")
    path = tmp_path / "export.tsv"
    assert tm.export_tsv(path, "en", "fr") == len(TRICKY)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[1] == "Line one line two  line three with a tab\tLigne un ligne deux  ligne trois avec tab"
    with TranslationMemory(tmp_path / "copy.db") as copy:
        copy.import_tsv(path, "en", "fr")
        assert [e.source for e in copy.entries()] == [s.replace("\r", " ").replace("\n", " ").replace("\t", " ")
                                                      for s, _ in TRICKY]
