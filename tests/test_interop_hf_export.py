"""Export to Hugging Face: a directory transformers loads as a MarianMTModel with equal logits, both ways.

* Marian -> ours -> Marian: the exported model's logits equal the original MarianMTModel's.
* ours -> Marian -> ours: a Marian import re-imported from its export has the same logits.
* a model trained here with the paper's switches (interleaved sinusoids, ReLU, no output bias,
  a BPE tokenizer) -> MarianMTModel: equal logits, via the exact residual-axis permutation.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from interop_helpers import built_marian, sentences, write_run_dir  # noqa: E402

from transformer.run.model import load_model  # noqa: E402
from transformer.cli import main  # noqa: E402
from transformer.interop import InteropError, export_hf, import_hf  # noqa: E402
from transformer.interop.marian import to_concat_layout  # noqa: E402
from transformer.text import Vocabularies  # noqa: E402


def _batch(vocab, n=6, seed=11):
    texts = [f for f, _ in sentences(n, seed=seed)]
    ids = vocab.src.encode_batch(texts)
    src = torch.full((n, max(map(len, ids))), vocab.src.pad_id)
    for row, s in enumerate(ids):
        src[row, : len(s)] = torch.tensor(s)
    mask = src != vocab.src.pad_id
    tgt = torch.randint(0, vocab.tgt.vocab_size, (n, 8), generator=torch.Generator().manual_seed(seed))
    tgt[:, 0] = vocab.tgt.bos_id
    return src, mask, tgt


def _hf_logits(directory, src, mask, tgt):
    from transformers import MarianMTModel

    hf = MarianMTModel.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        return hf(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt).logits


def test_marian_round_trip(tmp_path_factory):
    from transformers import MarianTokenizer

    root = tmp_path_factory.mktemp("hf")
    directory, hf_model, tok = built_marian(root)
    run = import_hf(directory, root / "run")
    out = export_hf(run, root / "exported")
    texts = [f for f, _ in sentences(6, seed=11)] + [">>en<< je suis étudiant"]
    exported_tok = MarianTokenizer.from_pretrained(str(out))
    assert exported_tok(texts)["input_ids"] == tok(texts)["input_ids"]
    src, mask, tgt = _batch(Vocabularies.load(run))
    with torch.no_grad():
        expected = hf_model(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt).logits
    torch.testing.assert_close(_hf_logits(out, src, mask, tgt), expected, atol=1e-5, rtol=1e-5)
    # ... and back: importing the export gives our first model's logits.
    again = import_hf(out, root / "run-again")
    with torch.no_grad():
        torch.testing.assert_close(load_model(again)(src, tgt, mask), load_model(run)(src, tgt, mask), atol=1e-5, rtol=1e-5)


def test_paper_model_exports_with_equal_logits(tmp_path):
    run = write_run_dir(tmp_path / "run", steps=20)
    model, vocab = load_model(run), Vocabularies.load(run)
    assert (model.config.sinusoid_layout, model.config.activation, model.config.output_bias) == ("interleaved", "relu", False)
    assert main(["export", str(run), "--format", "hf", str(tmp_path / "hf")]) == 0
    src, mask, tgt = _batch(vocab)
    with torch.no_grad():
        expected = model(src, tgt, mask)
    torch.testing.assert_close(_hf_logits(tmp_path / "hf", src, mask, tgt), expected, atol=1e-5, rtol=1e-5)
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert hf_tok("je suis étudiant", add_special_tokens=False)["input_ids"] == vocab.src.encode("je suis étudiant")


def test_concat_layout_is_the_same_function(tmp_path):
    model = load_model(write_run_dir(tmp_path / "run", steps=0, norm_first=True))
    permuted = to_concat_layout(model)
    assert permuted.config.sinusoid_layout == "concat"
    src = torch.randint(4, model.config.src_vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    tgt = src[:, :5].flip(1)
    with torch.no_grad():
        torch.testing.assert_close(permuted(src, tgt), model(src, tgt), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(model.encoder.embed.tokens.weight, permuted.encoder.embed.tokens.weight)


@pytest.mark.parametrize("overrides, message", [
    (dict(norm_first=True), "pre-LN model"),
    (dict(positional="learned", max_positions=64), "learned positions"),
])
def test_unrepresentable_models_are_refused(tmp_path, capsys, overrides, message):
    run = write_run_dir(tmp_path / "run", steps=0, **overrides)
    with pytest.raises(InteropError, match=message):
        export_hf(run, tmp_path / "hf")
    assert main(["export", str(run), "--format", "hf", str(tmp_path / "hf")]) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
