"""Glossary files and the matching of their terms in source sentences
(``transformer/translate/glossary.py``)."""

from __future__ import annotations

import random

import pytest

from transformer.translate.glossary import Glossary, GlossaryError, Term


def write(tmp_path, content: str | bytes, name: str = "terms.tsv"):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def error_of(tmp_path, content: str | bytes) -> str:
    with pytest.raises(GlossaryError) as caught:
        Glossary.load(write(tmp_path, content))
    message = str(caught.value)
    assert "\n" not in message
    return message


def sources(glossary: Glossary, sentence: str) -> list[str]:
    return [term.source for term in glossary.matches(sentence)]


# ---------------------------------------------------------------------------------------------
# The file


def test_a_file_with_comments_blank_lines_and_padded_columns(tmp_path):
    path = write(tmp_path, "# a glossary\n\nAuftrag\torder\n   \n  # indented comment\n"
                           "  New York \t  New York City  \nZugspitze\tZugspitze")  # no final line break
    glossary = Glossary.load(path)
    assert glossary.terms == (Term("Auftrag", "order", 3), Term("New York", "New York City", 6),
                              Term("Zugspitze", "Zugspitze", 7))
    assert len(glossary) == 3 and glossary and glossary.name == str(path)
    assert list(glossary) == list(glossary.terms)


def test_crlf_line_ends(tmp_path):
    glossary = Glossary.load(write(tmp_path, "# comment\r\nAuftrag\torder\r\n\r\nVertrag\tcontract\r\n"))
    assert glossary.terms == (Term("Auftrag", "order", 2), Term("Vertrag", "contract", 4))


def test_a_byte_order_mark_is_dropped(tmp_path):
    glossary = Glossary.load(write(tmp_path, b"\xef\xbb\xbfAuftrag\torder\n"))
    assert glossary.terms == (Term("Auftrag", "order", 1),)
    assert sources(glossary, "Der Auftrag") == ["Auftrag"]


def test_an_empty_glossary_is_allowed_and_matches_nothing(tmp_path):
    for content in ("", "# only a comment\n\n   \n"):
        glossary = Glossary.load(write(tmp_path, content))
        assert len(glossary) == 0 and not glossary
        assert glossary.matches("Der Auftrag") == []
    assert not Glossary.from_pairs({})


def test_the_same_pair_twice_is_kept_once(tmp_path):
    glossary = Glossary.load(write(tmp_path, "Auftrag\torder\nVertrag\tcontract\nAuftrag\torder\nAUFTRAG\torder\n"))
    assert glossary.terms == (Term("Auftrag", "order", 1), Term("Vertrag", "contract", 2))


@pytest.mark.parametrize("content, line, expected", [
    ("Auftrag\torder\nVertrag\n", 2, "expected 2 tab-separated columns (source, target), found 1"),
    ("Auftrag\torder\tnoun\n", 1, "expected 2 tab-separated columns (source, target), found 3"),
    ("Auftrag\torder\t\n", 1, "found 3"),
    ("# c\n\torder\n", 2, "empty source term"),
    ("a\tb\n  \t order\n", 2, "empty source term"),
    ("a\tb\nc\td\nAuftrag\t\n", 3, "empty target term"),
    ("Auftrag\t   \r\n", 1, "empty target term"),
])
def test_bad_lines_are_refused_naming_the_line(tmp_path, content, line, expected):
    message = error_of(tmp_path, content)
    assert message.startswith(f"{tmp_path / 'terms.tsv'}:{line}: ")
    assert expected in message


def test_invalid_utf8_names_its_line(tmp_path):
    message = error_of(tmp_path, "Auftrag\torder\n# Kommentar\n".encode() + b"Gr\xf6\xdfe\tsize\nx\ty\n")
    assert message == f"{tmp_path / 'terms.tsv'}:3: not valid UTF-8"


def test_utf16_is_refused_with_how_to_convert(tmp_path):
    message = error_of(tmp_path, "Auftrag\torder\n".encode("utf-16"))
    assert message.startswith(f"{tmp_path / 'terms.tsv'}:1: not valid UTF-8") and "iconv -f UTF-16" in message


def test_two_targets_for_one_source_name_both_lines(tmp_path):
    message = error_of(tmp_path, "Auftrag\torder\nVertrag\tcontract\n\nAuftrag\tcommission\n")
    assert message == (f"{tmp_path / 'terms.tsv'}:4: the source term 'Auftrag' has two targets: "
                       "'order' (line 1) and 'commission' (line 4)")
    # Sources that fold alike are one source; the message shows how the first line wrote it.
    message = error_of(tmp_path, "STRASSE\tstreet\nStraße\troad\n")
    assert message == (f"{tmp_path / 'terms.tsv'}:2: the source term 'Straße' has two targets: "
                       "'street' (line 1, written 'STRASSE') and 'road' (line 2)")


def test_the_same_target_differently_written_is_another_target(tmp_path):
    assert "two targets" in error_of(tmp_path, "Auftrag\torder\nAuftrag\tOrder\n")


def test_a_missing_file_or_a_directory_is_a_clear_error(tmp_path):
    with pytest.raises(GlossaryError, match=r"terms\.tsv: no such glossary file$"):
        Glossary.load(tmp_path / "terms.tsv")
    with pytest.raises(GlossaryError, match="is a directory, not a glossary file$"):
        Glossary.load(tmp_path)


# ---------------------------------------------------------------------------------------------
# Pairs given in code


def test_pairs_from_a_dict_or_an_iterable():
    from_dict = Glossary.from_pairs({" Auftrag ": "order", "New York": " New York City"})
    assert from_dict.terms == (Term("Auftrag", "order", None), Term("New York", "New York City", None))
    from_pairs = Glossary.from_pairs(iter([("Auftrag", "order"), ["New York", "New York City"]]), name="mine")
    assert from_pairs.terms == from_dict.terms and from_pairs.name == "mine"


@pytest.mark.parametrize("pairs, expected", [
    ([("a", "b"), ("c", "")], "glossary: pair 2: empty target term"),
    ([("a", "b"), ("  ", "x")], "glossary: pair 2: empty source term"),
    ([("a", "b", "c")], "glossary: pair 1: expected a (source, target) pair, got 3 items"),
    (["ab"], "glossary: pair 1: expected a (source, target) pair, got 'ab'"),
    ([("a", 1)], "glossary: pair 1: the target term is a int, not a string"),
    ([("a\tb", "c")], "glossary: pair 1: the source term 'a\\tb' holds a tab or a line break"),
    ([("a", "b\nc")], "glossary: pair 1: the target term 'b\\nc' holds a tab or a line break"),
    ([("Auftrag", "order"), ("auftrag", "commission")],
     "glossary: the source term 'auftrag' has two targets: 'order' (written 'Auftrag') and 'commission'"),
])
def test_bad_pairs_are_refused_naming_the_pair(pairs, expected):
    with pytest.raises(GlossaryError) as caught:
        Glossary.from_pairs(pairs)
    assert str(caught.value) == expected


def test_a_string_is_not_pairs():
    with pytest.raises(TypeError, match="not a string"):
        Glossary.from_pairs("Auftrag\torder")


def test_terms_given_directly_are_checked_too():
    assert Glossary([Term("Auftrag", "order", 1), Term("auftrag", "order", 2)]).terms == (Term("Auftrag", "order", 1),)
    with pytest.raises(GlossaryError, match=r"^glossary:3: empty source term$"):
        Glossary([Term(" ", "x", 3)])
    with pytest.raises(GlossaryError, match=r"^mine: empty target term$"):
        Glossary([Term("x", "")], name="mine")


# ---------------------------------------------------------------------------------------------
# Matching


def test_case_insensitive_after_nfkc_and_case_folding():
    glossary = Glossary.from_pairs({"Auftrag": "order", "STRASSE": "street", "file": "Datei"})
    assert sources(glossary, "DER AUFTRAG") == ["Auftrag"]
    assert sources(glossary, "der auftrag") == ["Auftrag"]
    assert sources(glossary, "die Straße") == ["STRASSE"]           # ß folds to ss
    assert sources(glossary, "a ﬁle") == ["file"]                    # the ligature is NFKC's fi
    assert sources(glossary, "ＡＵＦＴＲＡＧ") == ["Auftrag"]         # full-width letters
    assert sources(Glossary.from_pairs({"Café": "coffee"}), "Cafe") == []  # accents count
    assert sources(Glossary.from_pairs({"Café": "coffee"}), "CAFE\u0301") == ["Café"]  # é in two code points


@pytest.mark.parametrize("sentence, found", [
    ("Der Auftrag.", True), ("(Auftrag)", True), ("Auftrag-Nummer", True), ("Auftrag's", True),
    ("«Auftrag»", True), ("Auftrag", True), ("Auftrag,Vertrag", True), ("1.Auftrag", True),
    ("Aufträge", False), ("Auftraggeber", False), ("Großauftrag", False), ("Auftrag_2", False),
    ("Auftrag2", False), ("2Auftrag", False), ("Auftrag\u0301", False),
])
def test_whole_words_only(sentence, found):
    glossary = Glossary.from_pairs({"Auftrag": "order"})
    assert sources(glossary, sentence) == (["Auftrag"] if found else [])


def test_punctuation_next_to_a_term():
    glossary = Glossary.from_pairs({"Zugspitze": "Zugspitze"})
    for sentence in ("Zugspitze.", "die Zugspitze!", "Zugspitze?!", "„Zugspitze“", "Zugspitze…", "Zugspitze:"):
        assert sources(glossary, sentence) == ["Zugspitze"], sentence


def test_terms_with_punctuation_inside_and_at_their_ends():
    glossary = Glossary.from_pairs({"e-mail": "E-Mail", "C++": "C++", ".NET": ".NET", "U.S.": "USA"})
    assert sources(glossary, "Send an e-mail.") == ["e-mail"]
    assert sources(glossary, "Send an e - mail.") == []
    assert sources(glossary, "I write C++, not C.") == ["C++"]
    assert sources(glossary, "C++x") == []                # a letter right after the term
    assert sources(glossary, "We use .NET today") == [".NET"]
    assert sources(glossary, "We use ASP.NET today") == []  # a letter right before it
    assert sources(glossary, "the U.S. army") == ["U.S."]


def test_multi_word_terms_match_any_whitespace():
    glossary = Glossary.from_pairs({"New York": "New York"})
    for sentence in ("in New York.", "in new  york", "in NEW\tYORK", "in New\nYork", "in New\u00a0York",
                     "in New \u2003 York"):
        assert sources(glossary, sentence) == ["New York"], repr(sentence)
    for sentence in ("in NewYork", "in New-York", "in New Yorker", "in Newer York"):
        assert sources(glossary, sentence) == [], sentence
    spaced = Glossary.from_pairs({"  New    York ": "x"})  # the file's spaces are any whitespace too
    assert sources(spaced, "New York") == ["New    York"]


def test_overlapping_matches_the_longest_wins():
    glossary = Glossary.from_pairs({"York": "York", "New York": "New York", "New York Times": "NYT",
                                    "Times": "Zeiten"})
    assert sources(glossary, "The New York Times") == ["New York Times"]
    assert sources(glossary, "New York at times") == ["New York", "Times"]
    # A match that loses in one place is still found in another.
    assert sources(glossary, "The New York Times in York") == ["New York Times", "York"]


def test_longest_counts_characters_then_the_leftmost_wins():
    # "alpha-omega beta" has more tokens (4), "beta gammadeltaepsilon" more characters (22 > 16).
    glossary = Glossary.from_pairs({"alpha-omega beta": "A", "beta gammadeltaepsilon": "B"})
    assert sources(glossary, "alpha-omega beta gammadeltaepsilon") == ["beta gammadeltaepsilon"]
    glossary = Glossary.from_pairs({"ab cd": "A", "cd ef": "B"})  # as long: the leftmost
    assert sources(glossary, "ab cd ef") == ["ab cd"]
    assert sources(glossary, "xy cd ef ab cd") == ["cd ef", "ab cd"]


def test_a_term_matching_twice_is_returned_once_in_the_order_of_first_occurrence():
    glossary = Glossary.from_pairs({"Auftrag": "order", "Zugspitze": "Zugspitze", "Vertrag": "contract"})
    assert sources(glossary, "Zugspitze, Auftrag, Zugspitze und Auftrag") == ["Zugspitze", "Auftrag"]
    assert sources(glossary, "Vertrag oder Auftrag? Der Vertrag.") == ["Vertrag", "Auftrag"]


def test_terms_with_the_same_target_are_returned_once():
    glossary = Glossary.from_pairs({"Auto": "car", "Wagen": "car", "Haus": "house"})
    assert sources(glossary, "Ein Haus, ein Wagen, ein Auto") == ["Haus", "Wagen"]


def test_non_latin_scripts():
    glossary = Glossary.from_pairs({"Москва": "Moscow", "ΟΔΟΣ": "street", "हिन्दी": "Hindi",
                                    "हिन": "x", "北京": "Beijing", "東京タワー": "Tokyo Tower",
                                    "ภาษา": "language", "القاهرة": "Cairo"})
    assert sources(glossary, "Я живу в МОСКВЕ.") == []          # another case ending: another word
    assert sources(glossary, "МОСКВА, 1 мая") == ["Москва"]
    assert sources(glossary, "μια οδος") == ["ΟΔΟΣ"]             # final sigma folds to σ
    assert sources(glossary, "मुझे हिन्दी आती है।") == ["हिन्दी"]   # vowel signs are marks of the word
    assert sources(glossary, "في القاهرة.") == ["القاهرة"]
    # Scripts without spaces between words match inside a run of letters.
    assert sources(glossary, "我爱北京天安门。") == ["北京"]
    assert sources(glossary, "東京タワーに行きました") == ["東京タワー"]
    assert sources(glossary, "ภาษาไทย") == ["ภาษา"]
    assert sources(Glossary.from_pairs({"ภา": "x"}), "ภาษา") == ["ภา"]
    assert sources(Glossary.from_pairs({"ก": "x"}), "ก่อน") == []  # not without its tone mark


def test_a_sentence_without_terms_and_an_empty_sentence():
    glossary = Glossary.from_pairs({"Auftrag": "order"})
    assert glossary.matches("Nichts hier.") == [] and glossary.matches("") == [] and glossary.matches("  ") == []


# ---------------------------------------------------------------------------------------------
# Target lengths


def test_check_lengths_names_the_first_term_over_the_limit(tmp_path):
    glossary = Glossary.load(write(tmp_path, "a\tx\nb\tx y z\nc\tx y z w\n"))
    glossary.check_lengths(lambda text: len(text.split()), 4)
    with pytest.raises(GlossaryError) as caught:
        glossary.check_lengths(lambda text: len(text.split()), 2)
    assert str(caught.value) == (f"{tmp_path / 'terms.tsv'}:2: the target term 'x y z' is 3 tokens, "
                                 "longer than the output limit (2)")
    with pytest.raises(GlossaryError, match=r"^glossary: the target term 'x y' \(source 'b'\) is 2 tokens, "
                                            r"longer than the model's limit \(1\)$"):
        Glossary.from_pairs({"a": "x", "b": "x y"}).check_lengths(
            lambda text: len(text.split()), 1, what="the model's limit")


# ---------------------------------------------------------------------------------------------
# A large glossary


def test_a_glossary_of_100000_terms(tmp_path):
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzäöü"

    def word() -> str:
        return "".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))

    # Sources made unique by a numbered last word; a quarter have two or three words.
    entries = [(" ".join([word() for _ in range(rng.choice((0, 0, 1, 2)))] + [f"{word()}{i}"]), f"T{i}")
               for i in range(100_000)]
    path = write(tmp_path, "".join(f"{source}\t{target}\n" for source, target in entries))
    glossary = Glossary.load(path)
    assert len(glossary) == 100_000
    for k in range(1000):
        i = rng.randrange(len(entries))
        source, target = entries[i]
        sentence = f"{word()} {word()} {source.upper()}, {word()} {word()}."
        assert [term.target for term in glossary.matches(sentence)] == [target], sentence
    assert glossary.terms[54_321] == Term(*entries[54_321], 54_322)



# ---------------------------------------------------------------------------------------------
# What a term may hold, and how much a file is read


@pytest.mark.parametrize("target", ["c\x00at", "c\x1bat", "c\x7fat", "c\x85at", "c\u2028at", "c\ud800at"])
def test_control_characters_in_a_term_are_refused(tmp_path, target):
    with pytest.raises(GlossaryError, match=rf"^glossary: pair 1: the target term .* holds the control character "
                                            rf"U\+{ord(target[1]):04X}$"):
        Glossary.from_pairs([("chat", target)])
    if target[1] not in "\u2028\ud800":  # a file cannot hold a lone surrogate, and U+2028 splits no TSV line
        assert error_of(tmp_path, f"chat\t{target}\n").startswith(f"{tmp_path / 'terms.tsv'}:1: the target term")


def test_a_byte_order_mark_at_a_terms_start_is_stripped():
    glossary = Glossary.from_pairs([("\ufeffAuftrag", "order\ufeff"), (" \ufeff Vertrag", "contract")])
    assert glossary.terms == (Term("Auftrag", "order", None), Term("Vertrag", "contract", None))
    assert sources(glossary, "Der Auftrag und der Vertrag.") == ["Auftrag", "Vertrag"]


def test_a_term_longer_than_the_limit_is_refused():
    from transformer.translate.glossary import MAX_TERM_CHARS

    assert len(Glossary.from_pairs([("a" * MAX_TERM_CHARS, "b")])) == 1
    with pytest.raises(GlossaryError, match=rf"^glossary: pair 1: the source term is 1,001 characters, more than "
                                            rf"{MAX_TERM_CHARS:,}$"):
        Glossary.from_pairs([("a" * (MAX_TERM_CHARS + 1), "b")])


def test_one_huge_line_is_refused_after_reading_no_more_than_a_line(tmp_path):
    import tracemalloc

    from transformer.translate import glossary as module

    path = write(tmp_path, "Auftrag\torder\n" + "x" * 20_000_000 + "\tb\n")
    tracemalloc.start()
    try:
        with pytest.raises(GlossaryError, match=rf"terms\.tsv:2: a line of more than {module._MAX_LINE_BYTES:,} bytes"):
            Glossary.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # a line at a time, not the file's 20 MB


def test_only_a_regular_file_of_a_bounded_size_is_read(tmp_path, monkeypatch):
    import os

    from transformer.translate import glossary as module

    fifo = tmp_path / "fifo.tsv"
    os.mkfifo(fifo)
    with pytest.raises(GlossaryError, match="is not a regular file .a FIFO."):
        Glossary.load(fifo)
    with pytest.raises(GlossaryError, match="is not a regular file .a character device."):
        Glossary.load("/dev/zero")
    monkeypatch.setattr(module, "MAX_GLOSSARY_BYTES", 100)
    with pytest.raises(GlossaryError, match=r"terms\.tsv: 140 bytes, more than the 100 a glossary file may have$"):
        Glossary.load(write(tmp_path, "Auftrag\torder\n" * 10))
