"""data.mix: corpora mixed by share of sentence pairs, measured in the batches each epoch serves."""

from collections import Counter

import pytest

from transformer.data.mixing import MixedBatches, epoch_counts, parse_mix
from transformer.run.config import RunConfig
from transformer.training.trainer import Trainer

IDS = dict(pad_id=0, bos_id=1, eos_id=2)


def corpus(marker: int, n: int) -> list[tuple[list[int], list[int]]]:
    """``n`` pairs whose first source token says which corpus they come from and the second which pair."""
    return [([marker, 10 + i % 200, 5][: 2 + i % 2], [7] * (1 + i % 5)) for i in range(n)]


def served(batches: MixedBatches, epoch: int, start: int = 0) -> list[tuple[int, ...]]:
    """The pairs (as source-id tuples without padding) served in ``epoch`` from batch ``start`` on."""
    out = []
    for batch in batches.iter_from(epoch, start):
        for row, mask in zip(batch.src.tolist(), batch.src_mask.tolist()):
            out.append(tuple(t for t, real in zip(row, mask) if real))
    return out


def test_parse_mix_normalises_the_weights_and_names_mistakes():
    assert parse_mix("multi30k:4,tatoeba:1") == [("multi30k", 0.8), ("tatoeba", 0.2)]
    assert parse_mix("builtin:1, data/my corpus.tsv:3") == [("builtin", 0.25), ("data/my corpus.tsv", 0.75)]
    for text, message in [("multi30k", "not NAME:WEIGHT"), ("multi30k:x", "not a number"),
                          ("multi30k:0,tatoeba:1", "must be a number > 0"), ("europarl:1", "unknown corpus 'europarl'"),
                          ("tatoeba:1,tatoeba:2", "names 'tatoeba' twice"), ("multi30k:nan", "must be a number > 0")]:
        with pytest.raises(ValueError, match=message):
            parse_mix(text)


def test_each_epoch_serves_the_shares_asked_for():
    parts = [corpus(100, 300), corpus(200, 5000), corpus(300, 40)]
    batches = MixedBatches(parts, [0.6, 0.3, 0.1], max_tokens=64, seed=3, **IDS)
    assert epoch_counts([300, 5000, 40], [0.6, 0.3, 0.1]) == [300, 150, 50]
    draws = []
    for epoch in range(3):
        pairs = served(batches, epoch)
        shares = Counter(p[0] for p in pairs)
        assert {k: v / len(pairs) for k, v in shares.items()} == pytest.approx({100: 0.6, 200: 0.3, 300: 0.1})
        first = Counter(p for p in pairs if p[0] == 100)
        assert sum(first.values()) == 300 and len(first) == len({tuple(e[0]) for e in parts[0]})  # all of it
        draws.append({p for p in pairs if p[0] == 200})
    assert draws[0] != draws[1] != draws[2]  # the large corpus is drawn anew each epoch
    # the small third corpus (40 pairs, 50 asked for) is taken whole once, then 10 more are drawn
    third = Counter(p for p in served(batches, 0) if p[0] == 300)
    assert sum(third.values()) == 50 and len(third) == len({tuple(e[0]) for e in parts[2]})


def test_a_mixed_epoch_is_the_same_for_the_same_seed_and_resumes_mid_epoch():
    parts = [corpus(100, 200), corpus(200, 1000)]
    a = MixedBatches(parts, [0.5, 0.5], max_tokens=64, seed=1, **IDS)
    b = MixedBatches(parts, [0.5, 0.5], max_tokens=64, seed=1, **IDS)
    c = MixedBatches(parts, [0.5, 0.5], max_tokens=64, seed=2, **IDS)
    assert served(a, 1) == served(b, 1) != served(c, 1)
    whole = list(a.iter_from(2, 0))
    tail = list(b.iter_from(2, 5))
    assert [x.src.tolist() for x in whole[5:]] == [x.src.tolist() for x in tail]


def test_ranks_share_out_one_draw():
    parts = [corpus(100, 200), corpus(200, 1000)]
    one = MixedBatches(parts, [0.8, 0.2], max_tokens=64, seed=0, **IDS)
    ranks = [MixedBatches(parts, [0.8, 0.2], max_tokens=64, seed=0, rank=r, world_size=2, **IDS) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == len(one) // 2
    both = Counter(served(ranks[0], 1) + served(ranks[1], 1))
    assert not both - Counter(served(one, 1))  # the ranks serve parts of the same epoch, nothing else


def test_the_trainer_mixes_and_validates_on_the_first_corpus(tmp_path):
    (tmp_path / "extra.tsv").write_text("".join(f"chose {i} .\tthing {i} .\n" for i in range(50)), encoding="utf-8")
    cfg = RunConfig().with_overrides([
        "data.builtin_train=200", "data.builtin_valid=15", "data.builtin_test=5", "data.vocab_size=400",
        f"data.mix=builtin:0.75,{tmp_path / 'extra.tsv'}:0.25", "model.preset=tiny", "train.precision=fp32",
        "train.threads=1", "train.max_steps=1", "train.eval_sentences=0"])
    trainer = Trainer(cfg, tmp_path / "run", show_progress=False)
    assert len(trainer.data.valid) == 15 and len(trainer.data.test_text) == 5  # the built-in corpus's splits
    assert [m["corpus"] for m in trainer.data.stats["mix"]] == ["builtin", str(tmp_path / "extra.tsv")]
    origin = [i for batch in trainer.batches.batch_sources(0) for i in batch]
    assert Counter(origin) == {0: 200, 1: round(200 / 0.75 * 0.25)}
    trainer.close()


def test_a_mix_that_contradicts_data_corpus_is_refused():
    with pytest.raises(ValueError, match="data.corpus=multi30k and data.mix=tatoeba:1 disagree"):
        RunConfig().with_overrides(["data.corpus=multi30k", "data.mix=tatoeba:1"])
    assert RunConfig().with_overrides(["data.corpus=multi30k", "data.mix=multi30k:0.8,tatoeba:0.2"]).data.mix
