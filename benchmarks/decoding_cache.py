"""The decoder cache and the batch budget on the CPU: what the static paths cost or save there.

The GPU's decoding path (``transformer/cuda/decoding_steps.py``, CUDA graphs) is measured on a
GPU by the GPU benchmarks; the CPU takes two of the same changes, and this script checks that
they do not make it slower:

* the decoder cache: ``static_cache=True`` (keys and values allocated once per batch, a beam
  reorder copying the positions stored; ``transformer/decoding/steps.py``), against the model's
  own cache (``static_cache=False``: buffers doubling as they fill, a reorder copying the whole
  buffer);
* the batch budget: decoder rows x output positions (``CPU_BATCH_TOKENS``, at most
  ``MAX_BATCH_ROWS`` rows), against the earlier padded source tokens x beams (12,000).

Multi30k test_2016_flickr sentences (``--sentences``, default 300) are translated greedily and
with beam 4 by a ``Translator`` (the CPU engine's kernels on, as by default) in each variant; the
variants alternate within each round (``--rounds``, after an untimed one; the fastest and the
median reported), in one process, on one thread (``--threads``). What is timed is the process's
CPU time, not the wall clock: the development machines' 2 cores are shared by several busy
processes, and a wall clock counts the waits for a core (it varied by 25% between rounds of the
same variant); read the ratios. With ``--run-dir`` the model is a trained run's; without, a
model of the Multi30k run's shape (d_model 256, 3 + 3 layers, a joint BPE of 8,000 learned on
5,000 training pairs) with random weights, its ``</s>`` logit set for each strategy so that the
outputs are about as long as their sources on average. Every variant must give the default's
translations (checked).

    python benchmarks/decoding_cache.py --from ../shared/data
    python benchmarks/decoding_cache.py --from ../shared/data --sentences 40 --rounds 1   # a check
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from pathlib import Path

import torch

from transformer.config import ModelConfig
from transformer.corpus.registry import corpus_pairs, fetch
from transformer.decoding import DecodeConfig
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate import translator as translator_module
from transformer.translate.translator import Translator

OLD_BUDGET = 12_000  # padded source tokens x beams per batch, the earlier CPU budget


def by_source_tokens(self: Translator, todo: list[int], src_ids: list[list[int]]) -> list[list[int]]:
    """The earlier batching: a batch's padded source tokens x beams within ``OLD_BUDGET``."""
    width = self._width()
    batches: list[list[int]] = []
    current: list[int] = []
    for i in sorted(todo, key=lambda i: len(src_ids[i])):
        if current and (len(current) + 1) * len(src_ids[i]) * width > OLD_BUDGET:
            batches.append(current)
            current = []
        current.append(i)
    return batches + [current] if current else batches


VARIANTS = {  # name: (static cache, batching)
    "static cache, rows x positions (default)": (True, None),
    "growing cache, rows x positions": (False, None),
    "static cache, source tokens x beams": (True, by_source_tokens),
    "growing cache, source tokens x beams (before)": (False, by_source_tokens),
}


def random_model(vocab: Vocabularies) -> Transformer:
    """The Multi30k run's shape with random weights."""
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size, d_model=256,
                      n_heads=4, d_ff=1024, n_encoder_layers=3, n_decoder_layers=3, share_embeddings=True,
                      tie_output=False, output_bias=True)
    return Transformer(cfg).eval().requires_grad_(False)


def set_lengths(translator: Translator, sources: list[str]) -> None:
    """Set the ``</s>`` logit of a random model's output layer so that the translator's outputs are
    about as long as their sources (a bisection on 40 sentences)."""
    sample = sources[:40]
    want = sum(len(ids) for ids in translator.vocab.src.encode_batch(sample)) / len(sample)
    bias = translator.model.output.bias
    low, high = -2.0, 4.0
    for _ in range(7):
        bias[translator.vocab.tgt.eos_id] = (low + high) / 2
        mean = sum(len(h[0].tokens) for h in translator.translate_n_best(sample)) / len(sample)
        low, high = ((low + high) / 2, high) if mean > want else (low, (low + high) / 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="data_dir", default=None, help="local copy of the corpora (e.g. ../shared/data)")
    parser.add_argument("--run-dir", default=None, help="a trained run directory (default: random weights)")
    parser.add_argument("--src-lang", dest="src", default="de")
    parser.add_argument("--tgt-lang", dest="tgt", default="en")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    directory = fetch("multi30k", local_dir=args.data_dir)
    sources = [s for s, _ in corpus_pairs("multi30k", src=args.src, tgt=args.tgt, split="test_2016_flickr",
                                          directory=directory)][: args.sentences]
    if args.run_dir:
        from transformer.run.model import load_model

        model, vocab = load_model(Path(args.run_dir)).requires_grad_(False), Vocabularies.load(Path(args.run_dir))
    else:
        train = corpus_pairs("multi30k", src=args.src, tgt=args.tgt, split="train", directory=directory)[:5000]
        vocab = Vocabularies.train(train, vocab_size=8000, joint=True)
        model = random_model(vocab)
    lengths = [len(ids) for ids in vocab.src.encode_batch(sources)]
    print(f"{len(sources)} sentences of multi30k test_2016_flickr ({args.src}-{args.tgt}, {statistics.mean(lengths):.1f} "
          f"source tokens on average), {'run ' + args.run_dir if args.run_dir else 'random weights'}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)", flush=True)
    plain_decode, plain_batches = translator_module.decode, Translator._length_sorted_batches
    results = {}
    for strategy, decoding in (("greedy", DecodeConfig(strategy="greedy")), ("beam 4", DecodeConfig(beam_size=4))):
        translator = Translator(model, vocab, decoding=decoding)
        if not args.run_dir:
            set_lengths(translator, sources)
        seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
        outputs: dict[str, list[str]] = {}
        for round_ in range(args.rounds + 1):  # the first round untimed (warm-up)
            names = list(VARIANTS)[round_ % len(VARIANTS):] + list(VARIANTS)[: round_ % len(VARIANTS)]
            for name in names:
                static, batching = VARIANTS[name]
                translator_module.decode = functools.partial(plain_decode, static_cache=static)
                Translator._length_sorted_batches = batching or plain_batches
                try:
                    start = time.process_time()
                    outputs[name] = translator.translate(sources)
                    if round_:
                        seconds[name].append(time.process_time() - start)
                finally:
                    translator_module.decode, Translator._length_sorted_batches = plain_decode, plain_batches
        translator.close()
        default = next(iter(VARIANTS))
        words = statistics.mean(len(o.split()) for o in outputs[default])
        bias = "" if args.run_dir else f" (</s> bias {float(model.output.bias[vocab.tgt.eos_id]):.4f})"
        print(f"\n{strategy}: {words:.1f} words an output on average{bias}")
        print("| variant | fastest, CPU s | sentences/s | time / default's | median, CPU s | time / default's | identical |\n"
              "|---|---|---|---|---|---|---|")
        fastest, median = min(seconds[default]), statistics.median(seconds[default])
        results[strategy] = {}
        for name in VARIANTS:
            best, middle = min(seconds[name]), statistics.median(seconds[name])
            same = sum(a == b for a, b in zip(outputs[name], outputs[default]))
            results[strategy][name] = {"fastest": round(best, 3), "median": round(middle, 3),
                                       "sentences_per_second": round(len(sources) / best, 1),
                                       "ratio_fastest": round(best / fastest, 3),
                                       "ratio_median": round(middle / median, 3), "identical": same}
            print(f"| {name} | {best:.2f} | {len(sources) / best:.1f} | {best / fastest:.2f} | {middle:.2f} | "
                  f"{middle / median:.2f} | {same}/{len(sources)} |", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
