"""The confidence of a translation: its features (confidence.py), the fitted calibration and its file
(calibration.py), and ``transformer calibrate`` (calibrate.py)."""

import json
import math

import numpy as np
import pytest
import torch

from decoding_helpers import BOS, EOS, make_batch, make_model, row, seq_log_prob
from run_dir_helpers import TRAIN
from transformer.decoding import DecodeConfig, decode
from transformer.model import RNNSeq2Seq, rnn_preset
from transformer.run.layout import CONFIDENCE_FILE, WEIGHTS_FILE
from transformer.run_files import RunFileError
from transformer.translate import confidence
from transformer.translate.calibrate import expected_calibration_error, sentence_chrf, spearman
from transformer.translate.calibration import (
    DEFAULT_FEATURES, Calibration, attach_confidence, file_sha256, fit_calibration,
)
from transformer.translate.confidence import FEATURES, hypothesis_features

BEAM = DecodeConfig("beam", beam_size=3, n_best=2, max_len_b=6)


def _calibration(names=("mean_log_prob", "coverage_penalty", "length_ratio"), weights=(2.0, 1.0, -0.5)):
    return Calibration(tuple(names), (-1.0,) * len(names), (0.5,) * len(names), tuple(weights), 0.3)


def _decoded(model, src, mask, cfg=BEAM):
    return decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS)


# ------------------------------------------------------------------------------------------------ features
def test_confidences_are_probabilities_and_none_without_a_calibration():
    model = make_model()
    src, mask = make_batch()
    results = _decoded(model, src, mask)
    attach_confidence(model, src, mask, results, None, bos_id=BOS, eos_id=EOS)
    assert all(h.confidence is None for hyps in results for h in hyps)
    attach_confidence(model, src, mask, results, _calibration(), bos_id=BOS, eos_id=EOS)
    values = [h.confidence for hyps in results for h in hyps]
    assert len(values) == 6 and all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in values)
    assert len(set(values)) > 1


def test_a_translation_that_fills_a_learned_position_table_gets_a_confidence():
    """Cut at the table's end without </s>: the pass reads the positions its steps read, no more."""
    from transformer.config import preset
    from transformer.model import Transformer

    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=20, tie_output=False, output_bias=True, positional="learned",
                               max_positions=6)).double().eval()
    with torch.no_grad():
        model.output.bias[EOS] = -30.0  # never ends: every hypothesis runs to the table's end
    src, mask = make_batch(lengths=(4, 3))
    results = _decoded(model, src, mask, DecodeConfig("beam", beam_size=2, max_len_b=50))
    assert all(len(h.tokens) == 6 for hyps in results for h in hyps)
    attach_confidence(model, src, mask, results, _calibration(), bos_id=BOS, eos_id=EOS)
    assert all(0.0 <= h.confidence <= 1.0 for hyps in results for h in hyps)
    features = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    assert features[0, FEATURES.index("length_ratio")] == pytest.approx(math.log(6 / 4))


def test_features_of_a_hypothesis_do_not_depend_on_its_batch():
    """A sentence among others (padded, beside other hypotheses) gets the features it gets alone,
    and so does one measured a row at a time."""
    model = make_model()
    src, mask = make_batch(lengths=(8, 3, 6))
    results = _decoded(model, src, mask)
    together = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    alone = np.vstack([hypothesis_features(model, *row(src, mask, i), [results[i]], bos_id=BOS, eos_id=EOS)
                       for i in range(3)])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-9)
    reordered = hypothesis_features(model, src, mask, [results[0], [results[1][0]], results[2][::-1]],
                                    bos_id=BOS, eos_id=EOS)
    np.testing.assert_allclose(reordered, together[[0, 1, 2, 5, 4]], rtol=0, atol=1e-9)


def test_features_are_the_same_measured_in_small_chunks(monkeypatch):
    model = make_model()
    src, mask = make_batch()
    results = _decoded(model, src, mask)
    whole = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    monkeypatch.setattr(confidence, "_LOGIT_ELEMENTS", 1)  # one hypothesis at a time
    np.testing.assert_allclose(hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS), whole,
                               rtol=0, atol=1e-9)


def test_log_probability_features_are_the_models():
    """The mean is the hypothesis's own score per token, which is the teacher-forced one for a
    hypothesis that ended with </s>; the least probable token is read from the teacher-forced pass."""
    model = make_model(eos_bias=2.0)  # sentences that end with </s> within their limit
    src, mask = make_batch()
    results = _decoded(model, src, mask, DecodeConfig("greedy", max_len_b=30))
    features = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    assert all(len(h.tokens) < int(mask[i].sum()) + 30 for i, (h,) in enumerate(results))
    for i, (h,) in enumerate(results):
        one_src, one_mask = row(src, mask, i)
        steps = [seq_log_prob(model, one_src, one_mask, h.tokens[:t], ended=False)
                 - seq_log_prob(model, one_src, one_mask, h.tokens[: t - 1], ended=False)
                 for t in range(1, len(h.tokens) + 1)]
        steps.append(seq_log_prob(model, one_src, one_mask, h.tokens, ended=True)
                     - seq_log_prob(model, one_src, one_mask, h.tokens, ended=False))
        assert features[i, FEATURES.index("mean_log_prob")] == pytest.approx(sum(steps) / len(steps), abs=1e-9)
        assert features[i, FEATURES.index("min_log_prob")] == pytest.approx(min(steps), abs=1e-9)


def test_only_the_features_asked_for_are_computed_and_a_given_memory_is_used():
    model = make_model()
    src, mask = make_batch()
    results = _decoded(model, src, mask)
    every = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    names = ("mean_log_prob", "min_log_prob", "coverage_penalty", "length_ratio")
    some = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS, names=names,
                               memory=model.encode(src, mask))
    wanted = [FEATURES.index(n) for n in names]
    np.testing.assert_allclose(some[:, wanted], every[:, wanted], rtol=0, atol=1e-9)
    assert np.isnan(np.delete(some, wanted, axis=1)).all()
    zeros = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS, names=names,
                                memory=torch.zeros_like(model.encode(src, mask)))
    column = FEATURES.index("min_log_prob")
    assert np.abs(zeros[:, column] - some[:, column]).min() > 1e-3  # the decoder read the memory given


def test_coverage_and_length_features_of_a_known_attention():
    """Two output steps that both look at the first of two source tokens: the second is uncovered."""
    values = dict(zip(FEATURES, confidence._features(-0.7, np.log([0.5, 0.25]), np.array([1.0, 3.0]),
                                                     np.array([[1.0, 0.0], [1.0, 0.0]]))))
    assert values["mean_log_prob"] == -0.7
    assert values["min_log_prob"] == pytest.approx(math.log(0.25))
    assert values["mean_entropy"] == pytest.approx(2.0)
    assert values["uncovered_share"] == 0.5
    assert values["coverage_penalty"] == pytest.approx(math.log(confidence.COVERAGE_FLOOR) / 2)
    assert values["length_ratio"] == 0.0 and values["source_length"] == pytest.approx(math.log(2))


def test_features_of_the_recurrent_baseline():
    torch.manual_seed(0)
    model = RNNSeq2Seq(rnn_preset("tiny", src_vocab_size=20)).eval()
    src, mask = make_batch()
    results = decode(model, src, mask, DecodeConfig("greedy", max_len_b=5), bos_id=BOS, eos_id=EOS)
    features = hypothesis_features(model, src, mask, results, bos_id=BOS, eos_id=EOS)
    assert features.shape == (3, len(FEATURES)) and np.isfinite(features).all()


# ------------------------------------------------------------------------------------------------ fitting
def test_fitting_recovers_a_known_logistic_mapping():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, len(FEATURES))) * 2.0 + 1.0
    a, b = FEATURES.index("min_log_prob"), FEATURES.index("length_ratio")
    truth = 1 / (1 + np.exp(-(0.5 + 1.5 * x[:, a] - 0.8 * x[:, b])))
    labels = rng.random(len(x)) < truth
    fitted = fit_calibration(x, labels, names=("min_log_prob", "length_ratio"), l2=0.0)
    raw = np.array(fitted.weights) / np.array(fitted.scale)  # the weights of the unstandardised features
    assert raw == pytest.approx([1.5, -0.8], abs=0.08)
    assert np.abs(fitted.predict(x) - truth).max() < 0.05


def test_fitting_separable_data_stays_finite():
    x = np.zeros((40, len(FEATURES)))
    x[:, 0] = np.arange(40)
    fitted = fit_calibration(x, x[:, 0] >= 20, names=("mean_log_prob", "source_length"))  # source_length constant
    assert all(math.isfinite(w) for w in fitted.weights)
    assert fitted.predict(x)[:20].max() < 0.5 < fitted.predict(x)[20:].min()


def test_spearman_and_calibration_error():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 2, 3], [3, 2, 2, 1]) == pytest.approx(-1.0)  # ties get their mean rank
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    # two bins: 0.15 (said 0.1, right 1 of 2 = 0.5: off by 0.4) and 0.95 (said 0.9, right 2 of 2: off by 0.1)
    confidences = np.array([0.1, 0.1, 0.9, 0.9])
    assert expected_calibration_error(confidences, np.array([1, 0, 1, 1])) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)


# ------------------------------------------------------------------------------------------------ the file
def test_the_calibration_file_round_trips(tmp_path):
    (tmp_path / WEIGHTS_FILE).write_bytes(b"weights")
    calibration = Calibration(("mean_log_prob", "length_ratio"), (-0.7, 0.1), (0.3, 0.2), (1.2, -0.4), 0.25,
                              model_sha256=file_sha256(tmp_path / WEIGHTS_FILE), fitted_on={"sentences": 60},
                              figures={"ece": 0.05})
    assert Calibration.load(tmp_path) is None
    calibration.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    assert loaded == calibration and loaded.to_json() == calibration.to_json()
    x = np.random.default_rng(0).normal(size=(5, len(FEATURES)))
    np.testing.assert_array_equal(loaded.predict(x), calibration.predict(x))
    (tmp_path / WEIGHTS_FILE).write_bytes(b"other weights")
    with pytest.warns(UserWarning, match="fitted for another model.safetensors"):
        assert Calibration.load(tmp_path) is None


@pytest.mark.parametrize("change, message", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: [1, 2], "not a confidence calibration"),
    (lambda d: {**d, "version": 2}, "version 2"),
    (lambda d: {**d, "features": ["mean_log_prob", "bleu"]}, "unknown features"),
    (lambda d: {**d, "weights": [1.0]}, "2 features but 1 weights values"),
    (lambda d: {**d, "scale": [1.0, 0.0]}, "scale values must be > 0"),
    (lambda d: {**d, "bias": None}, "bias must be a finite number"),
    (lambda d: {**d, "mean": "0"}, "\"mean\" must be a list"),
    (lambda d: {**d, "event": {"metric": "BLEU", "threshold": 30}}, "event"),
])
def test_a_corrupt_calibration_file_is_one_clear_error(tmp_path, change, message):
    good = Calibration(("mean_log_prob", "length_ratio"), (-0.7, 0.1), (0.3, 0.2), (1.2, -0.4), 0.25).to_json()
    bad = change(good)
    (tmp_path / CONFIDENCE_FILE).write_text(bad if isinstance(bad, str) else json.dumps(bad), encoding="utf-8")
    with pytest.raises(RunFileError, match=message) as caught:
        Calibration.load(tmp_path)
    assert str(tmp_path / CONFIDENCE_FILE) in str(caught.value) and "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------------ the command
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, cli):
    """A tiny run trained for two steps, with 60 validation sentences."""
    run_dir = tmp_path_factory.mktemp("calibrate") / "run"
    assert cli("train", "--run-dir", run_dir, "--quiet", *TRAIN, "data.builtin_valid=60").returncode == 0
    return run_dir


QUIET = ("--no-progress", "--threads", "1")  # the options of each calibrate command here


def test_calibrate_fits_writes_and_reports(trained_run, tmp_path, monkeypatch, cli):
    """The two-step model translates into blanks, which chrF scores 0 whatever the reference: here
    every other sentence is scored 100 instead, so that both sides of chrF 50 are there to fit."""
    from transformer.translate import calibrate

    scored = []

    def chrf(hypotheses, references):
        scored.append(list(references))
        return np.array([100.0 * (i % 2) for i in range(len(hypotheses))])

    monkeypatch.setattr(calibrate, "sentence_chrf", chrf)
    sources = [f"le chat numéro {i} dort ." for i in range(60)]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(f"reference {i}\n" for i in range(60)), encoding="utf-8")
    rc, out, err = cli("calibrate", trained_run, *QUIET, "--src", tmp_path / "src.txt", "--ref", tmp_path / "ref.txt",
                       "--json")
    assert rc == 0, err
    assert scored == [[f"reference {i}" for i in range(60)]]
    assert "fitted on 60 sentences" in out and "ECE" in out and "Spearman" in out
    summary = json.loads(out.strip().splitlines()[-1])
    calibration = Calibration.load(trained_run)
    assert calibration.to_json() == summary
    assert calibration.model_sha256 == file_sha256(trained_run / WEIGHTS_FILE)
    assert calibration.features == DEFAULT_FEATURES
    assert calibration.figures["sentences"] == 60 and calibration.figures["adequate_share"] == 0.5
    assert 0 <= calibration.figures["ece"] <= 1


def test_sentence_chrf():
    scores = sentence_chrf(["the cat sleeps", "the cat sleeps"], ["the cat sleeps", "a dog barks"])
    assert scores[0] == pytest.approx(100.0) and scores[1] < 30


def test_calibrate_reads_the_runs_validation_set(trained_run, cli):
    """The untrained model's translations of the validation set all miss chrF 50: too one-sided to
    fit, which the error says, counting the sentences it read."""
    rc, _, err = cli("calibrate", trained_run, *QUIET)
    assert rc == 2 and "of 60 translations of the run's validation set (builtin fr-en)" in err
    rc, _, err = cli("calibrate", trained_run, *QUIET, "--sentences", "55")
    assert rc == 2 and "of 55 translations" in err


@pytest.mark.parametrize("options, message", [
    (["--src", "{src}"], "give both --src FILE and --ref FILE"),
    (["--src", "{src}", "--ref", "{short}"], "has 60 lines but"),
    (["--src", "{src}", "--ref", "{src}", "--from", "data"], "--from DIR is for the run's validation set"),
    (["--src", "{short}", "--ref", "{short}"], "has 10 sentence pairs: too few"),
    (["--sentences", "0"], "--sentences must be >= 1"),
    (["--n-best", "2"], "--n-best is for translate"),
])
def test_calibrate_refuses_bad_input_in_one_line(trained_run, tmp_path, options, message, cli):
    (tmp_path / "src.txt").write_text("le chat dort .\n" * 60, encoding="utf-8")
    (tmp_path / "short.txt").write_text("le chat dort .\n" * 10, encoding="utf-8")
    argv = [o.format(src=tmp_path / "src.txt", short=tmp_path / "short.txt") for o in options]
    rc, _, err = cli("calibrate", trained_run, *QUIET, *argv)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_calibrate_needs_a_run_configuration_or_files(trained_run, tmp_path, cli):
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in (WEIGHTS_FILE, "config.json", "tokenizer.json"):
        (bare / name).write_bytes((trained_run / name).read_bytes())
    rc, _, err = cli("calibrate", bare, *QUIET)
    assert rc == 2 and "has no run_config.json" in err
    rc, _, err = cli("calibrate", tmp_path / "missing", *QUIET)
    assert rc == 2 and "not a trained run directory" in err
