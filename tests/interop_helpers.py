"""Builders shared by the interoperability tests: a tiny Marian model made locally, no download.

A unigram SentencePiece model per language is trained on a few hundred sentences of the
built-in corpus; the Marian vocabulary (``vocab.json``) numbers ``</s>``, ``<unk>``, a language
code, the pieces of both models and ``<pad>`` last, as opus-mt vocabularies do. The
``MarianMTModel`` is randomly initialised (with a random ``final_logits_bias``) and trained for a
few seconds, so its outputs depend on the source, vary in length and end with ``</s>``.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path

import torch

from transformer.corpus.builtin import generate_pairs as generate_written_pairs

generate_pairs = functools.partial(generate_written_pairs, written_share=0)  # the plain corpus: tiny models learn it in a few steps

N_SENTENCES = 300


def sentences(n: int = N_SENTENCES, seed: int = 0) -> list[tuple[str, str]]:
    return generate_pairs(n, seed=seed)


def train_spm(texts: list[str], vocab_size: int) -> bytes:
    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size,
                                   model_type="unigram", minloglevel=2, num_threads=1)
    return proto.getvalue()


def write_marian_tokenizer(out: Path, *, vocab_size: int = 120, separate: bool = False) -> None:
    """``source.spm``, ``target.spm``, ``vocab.json`` (+ ``target_vocab.json``) and ``tokenizer_config.json``."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    pairs = sentences()
    out.mkdir(parents=True, exist_ok=True)
    protos = {"source.spm": train_spm([f for f, _ in pairs], vocab_size),
              "target.spm": train_spm([e for _, e in pairs], vocab_size)}
    vocabs = {}
    for name, proto in protos.items():
        (out / name).write_bytes(proto)
        sp = spm.SentencePieceProcessor(model_proto=proto)
        vocabs[name] = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]

    def numbered(pieces: list[str]) -> dict[str, int]:
        order = ["</s>", "<unk>", ">>en<<", *dict.fromkeys(pieces), "<pad>"]
        return {p: i for i, p in enumerate(order)}

    if separate:
        (out / "vocab.json").write_text(json.dumps(numbered(vocabs["source.spm"])), encoding="utf-8")
        (out / "target_vocab.json").write_text(json.dumps(numbered(vocabs["target.spm"])), encoding="utf-8")
    else:
        joint = numbered(vocabs["source.spm"] + vocabs["target.spm"])
        (out / "vocab.json").write_text(json.dumps(joint), encoding="utf-8")
    tok = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"),
                          target_vocab_file=str(out / "target_vocab.json") if separate else None,
                          separate_vocabs=separate, source_lang="fr", target_lang="en")
    tok.save_pretrained(str(out))


def _one_thread(build):
    """Run ``build`` on one torch thread: a tiny model trains several times faster so (more threads
    mostly wait on each other, the more so on a busy machine), and what it learns no longer
    depends on the machine's core count."""
    @functools.wraps(build)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return build(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)
    return wrapper


@_one_thread
def write_marian_model(out: Path, *, seed: int = 0, separate: bool = False, activation: str = "swish",
                       bin_weights: bool = False, steps: int = 120):
    """A tiny ``MarianMTModel`` + its tokenizer saved in ``out``; returns ``(model, tokenizer)``.

    The model is trained for ``steps`` Adam steps on the sentences (a few seconds), so its outputs
    vary in length and end with ``</s>``; its ``final_logits_bias`` is random (and not trained).
    """
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    write_marian_tokenizer(out, separate=separate)
    tok = MarianTokenizer.from_pretrained(str(out))
    src_size = len(json.loads((out / "vocab.json").read_text()))
    tgt_size = len(json.loads((out / "target_vocab.json").read_text())) if separate else src_size
    pad = tgt_size - 1
    cfg = MarianConfig(vocab_size=src_size, decoder_vocab_size=tgt_size, d_model=32, encoder_layers=2, decoder_layers=2,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                       activation_function=activation, max_position_embeddings=128, scale_embedding=True,
                       share_encoder_decoder_embeddings=not separate, pad_token_id=pad, eos_token_id=0,
                       decoder_start_token_id=pad, forced_eos_token_id=None, dropout=0.0)
    torch.manual_seed(seed)
    model = MarianMTModel(cfg)
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.1)
    # 3e-3: at 1e-2 the tiny model's training is chaotic, and on some CPUs and thread counts it
    # collapsed to one output for every sentence (the reduction order decides which run you get)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    pairs = sentences()
    for step in range(steps):
        chunk = pairs[(step * 32) % len(pairs):][:32]
        batch = tok([f for f, _ in chunk], text_target=[e for _, e in chunk], return_tensors="pt", padding=True)
        batch["labels"][batch["labels"] == pad] = -100
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(str(out))
    if bin_weights:  # the older pickle format: a state dict saved with torch.save
        from safetensors.torch import load_file

        torch.save(load_file(str(out / "model.safetensors")), out / "pytorch_model.bin")
        (out / "model.safetensors").unlink()
    return model, tok


_BUILT: dict[tuple, tuple[Path, object, object]] = {}


def built_marian(tmp_root: Path, **options) -> tuple[Path, object, object]:
    """``write_marian_model`` into ``tmp_root``, once per set of options and test session."""
    key = tuple(sorted(options.items()))
    if key not in _BUILT:
        out = tmp_root / ("marian-" + "-".join(f"{k}={v}" for k, v in key) if key else "marian")
        model, tok = write_marian_model(out, **options)
        _BUILT[key] = (out, model, tok)
    return _BUILT[key]


def strip_generated(row: list[int], *, eos_id: int, pad_id: int) -> list[int]:
    """A ``generate()`` row without its start token, cut before ``</s>`` (padding dropped)."""
    row = row[1:]
    row = row[: row.index(eos_id)] if eos_id in row else row
    return [t for t in row if t != pad_id]


@_one_thread
def write_run_dir(out: Path, *, seed: int = 0, steps: int = 120, joint: bool = True, **overrides) -> Path:
    """One of our run directories: a BPE tokenizer (joint, or one per side with ``joint=False``) and a
    tiny Transformer trained for ``steps`` steps.

    ``overrides`` change the ``tiny`` preset (e.g. ``norm_first=True``, ``positional="learned"``);
    the defaults are the paper's switches (interleaved sinusoids, ReLU, tied embeddings, no output bias).
    """
    from transformer.run.model import save_model
    from transformer.config import preset
    from transformer.data import make_batch
    from transformer.model import Transformer
    from transformer.text import BPETokenizer, Vocabularies

    pairs = sentences()
    if joint:
        vocab = Vocabularies.train(pairs, vocab_size=400)
    else:  # two sizes, so that a source/target mix-up cannot pass unnoticed
        vocab = Vocabularies(BPETokenizer.train([f for f, _ in pairs], vocab_size=400),
                             BPETokenizer.train([e for _, e in pairs], vocab_size=360))
    torch.manual_seed(seed)
    overrides.setdefault("share_embeddings", joint)  # equal sizes alone would make the preset share them
    model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size,
                               **overrides))
    examples = list(zip(vocab.src.encode_batch([f for f, _ in pairs]), vocab.tgt.encode_batch([e for _, e in pairs])))
    # 3e-3: at 1e-2 the tiny model's training is chaotic, and on some CPUs and thread counts it
    # collapsed to one output for every sentence (the reduction order decides which run you get)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        b = make_batch(examples[(step * 32) % len(examples):][:32], pad_id=vocab.src.pad_id, bos_id=vocab.tgt.bos_id,
                       eos_id=vocab.tgt.eos_id)
        logits = model(b.src, b.tgt_in, b.src_mask)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=vocab.tgt.pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    save_model(model.eval(), out)
    vocab.save(out)
    return out
