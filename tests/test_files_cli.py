"""``transformer translate --input FILE`` for the file formats (transformer/translate/files_cli.py),
on a tiny random model: its translations are nonsense, so these tests check what the command
keeps (timings, code, URLs, the archive), what it refuses, and which path it takes."""

from __future__ import annotations

import io
import re
import zipfile

import pytest

from office_helpers import docx_bytes, paragraph, run


FAST = ["--greedy", "--max-len-b", "2", "--no-progress"]

SRT = ("1\n00:00:01,000 --> 00:00:03,500\n<i>Il pleut fort,\nnous restons.</i>\n\n"
       "2\n00:00:04,000 --> 00:00:05,000\nLe chat dort.\n")
MARKDOWN = """\
# Le chat

Il pleut **fort**, nous [restons](https://example.com/x_y) à la maison.

```sh
echo "le code reste"
```

- Le chien `dort` ici.
"""


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


def test_srt_file_keeps_numbers_and_timings(run_dir, tmp_path, cli):
    source, output = tmp_path / "film.srt", tmp_path / "film.en.srt"
    source.write_text(SRT)
    status, out, err = cli("translate", run_dir, "--input", source, "--output", output, *FAST)
    assert status == 0, err
    assert out == "" and "translated" in err and f"{source}" in err
    result = output.read_text()
    for kept in ["1\n00:00:01,000 --> 00:00:03,500\n<i>", "</i>\n\n2\n00:00:04,000 --> 00:00:05,000\n"]:
        assert kept in result
    assert result != SRT  # translated
    status, out, err = cli("translate", run_dir, "--input", source, *FAST)  # a text format: standard output
    assert status == 0 and out == result


def test_markdown_file_keeps_code_and_urls(run_dir, tmp_path, cli):
    source, output = tmp_path / "README.md", tmp_path / "README.en.md"
    source.write_text(MARKDOWN)
    status, _, err = cli("translate", run_dir, "--input", source, "--output", output, *FAST)
    assert status == 0, err
    result = output.read_text()
    assert result.startswith("# ") and "](https://example.com/x_y)" in result and "`dort`" in result
    assert '```sh\necho "le code reste"\n```\n' in result and re.search(r"^- ", result, re.M)
    assert result != MARKDOWN


def test_docx_file_is_written_whole_and_atomically(run_dir, tmp_path, cli):
    source, output = tmp_path / "rapport.docx", tmp_path / "rapport.en.docx"
    source.write_bytes(docx_bytes(paragraph(run("Il pleut fort."), run("Nous restons.", "<w:b/>"))))
    status, _, err = cli("translate", run_dir, "--input", source, "--output", output, *FAST)
    assert status == 0, err
    with zipfile.ZipFile(io.BytesIO(output.read_bytes())) as archive:
        document = archive.read("word/document.xml").decode()
        assert archive.read("word/media/image1.png") == zipfile.ZipFile(source).read("word/media/image1.png")
    assert "<w:b/>" in document and "Il pleut fort." not in document
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no work file left behind
    status, _, err = cli("translate", run_dir, "--input", source, *FAST, terminal=True)
    assert status == 2 and "a .docx file is a binary file: give --output FILE" in err and err.count("\n") == 1


def test_refusals_come_before_the_model_and_name_the_problem(run_dir, tmp_path, cli):
    source = tmp_path / "film.srt"
    source.write_text(SRT)
    (tmp_path / "exists.srt").write_text("keep me")
    (tmp_path / "bad.srt").write_text("1\n00:00:01 --> 00:00:02,000\nHi\n")
    cases = [
        (["--input", source, "--resume", "--output", tmp_path / "new.srt"], "--resume is for plain text"),
        (["--input", source, "--output", tmp_path / "exists.srt"], "exists: give --overwrite to replace it"),
        (["--input", source, "--output", source, "--overwrite"], "is the --input file"),
        (["--input", source, "--n-best", "2"], "--n-best, --json, --scores and --segment lines are for plain text"),
        (["--input", tmp_path / "bad.srt"], "bad.srt: line 2: not a timing line"),
        (["--format", "srt", "Bonjour."], "--format srt translates a file"),
    ]
    for args, message in cases:
        status, _, err = cli("translate", tmp_path / "no-such-run", *args, *FAST)  # no model is needed to refuse
        assert status == 2 and message in err and err.count("\n") == 1, (args, err)
    assert (tmp_path / "exists.srt").read_text() == "keep me"


def test_text_and_explicit_html_keep_their_paths(run_dir, tmp_path, cli):
    text = tmp_path / "notes.txt"
    text.write_text("Il pleut.\n\nLe chat dort.\n")
    _, by_name, _ = cli("translate", run_dir, "--input", text, *FAST)
    _, as_text, _ = cli("translate", run_dir, "--input", text, "--format", "text", *FAST)
    assert by_name == as_text and by_name.count("\n") == 3
    page = tmp_path / "page.html"
    page.write_text('<html lang="fr"><body><p>Il pleut.</p></body></html>')
    status, as_file, err = cli("translate", run_dir, "--input", page, *FAST)  # the file format: lang set
    assert status == 0, err
    assert as_file.startswith('<html lang="en">')
    status, explicit, _ = cli("translate", run_dir, "--input", page, "--format", "html", *FAST)  # as before
    assert status == 0 and explicit.startswith('<html lang="fr">')


def test_standard_input_with_a_format(run_dir, cli):
    status, out, err = cli("translate", run_dir, "--format", "srt", *FAST, input=SRT)
    assert status == 0, err
    assert out.startswith("1\n00:00:01,000 --> 00:00:03,500\n") and "standard input" in err
