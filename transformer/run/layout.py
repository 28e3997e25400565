"""What a run directory holds, and the name of each file: every name is defined here once.

A training run writes everything needed to translate with, inspect or resume it into one
directory::

    RUN_DIR/
      config.json, model.safetensors   the model (best on validation, averaged, or the moving
                                       average of the weights): transformer.run.model
      tokenizer.json                   the tokenizer (tokenizer.src.json + tokenizer.tgt.json when
                                       the vocabularies are separate): transformer.text.vocab
      run_config.json                  the full RunConfig: transformer.run.config
      metrics.jsonl, training_curve.png  one JSON line per log record and evaluation, and its plot:
                                       transformer.run.metrics
      alignments.jsonl                 cross-attention snapshots of a few validation sentences:
                                       transformer.run.alignments
      confidence.json                  the calibration of translation confidences (``transformer
                                       calibrate``): transformer.translate.calibration
      tensorboard/                     TensorBoard's event files (train.tensorboard)
      checkpoints/step-XXXXXXXX/       model.safetensors, optimizer.safetensors, rng.safetensors,
                                       trainer_state.json (and ema.safetensors with train.ema)
      checkpoints/latest.json          the newest complete checkpoint: transformer.run.checkpoints
      .lock                            held by the one process writing the run: transformer.run.lock

``translate``, ``evaluate``, ``serve``, ``attend``, ``export`` and ``Translator.from_run_dir``
read the model, the tokenizer and the run configuration; ``report`` reads the metrics, the
alignments and the lock file; ``train`` and ``average`` write.
"""

from __future__ import annotations

from transformer.text.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE

CONFIG_FILE = "config.json"  # the model's description: a ModelConfig, or an RNNConfig
WEIGHTS_FILE = "model.safetensors"  # the model's weights (also a checkpoint's)
RUN_CONFIG_FILE = "run_config.json"
METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "training_curve.png"
ALIGNMENTS_FILE = "alignments.jsonl"
CONFIDENCE_FILE = "confidence.json"  # the calibration of translation confidences (transformer calibrate)
TENSORBOARD_DIR = "tensorboard"
LOCK_FILE = ".lock"
TOKENIZER_FILES = (JOINT_FILE, SRC_FILE, TGT_FILE)  # named by the tokenizer's own module

# The checkpoints: CHECKPOINTS_DIR/step-XXXXXXXX/ and the file naming the newest one.
CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest.json"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_FILE = "rng.safetensors"
TRAINER_STATE_FILE = "trainer_state.json"
EMA_FILE = "ema.safetensors"  # the moving average of the weights (train.ema)
# The files every complete checkpoint holds.
CHECKPOINT_FILES = (WEIGHTS_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_STATE_FILE)

# The files of a run directory that are written through a temporary file and a rename (a process
# killed in between leaves a work file behind, which the next writer removes).
ATOMIC_FILES = (CONFIG_FILE, WEIGHTS_FILE, RUN_CONFIG_FILE, *TOKENIZER_FILES, METRICS_FILE, CURVE_FILE,
                ALIGNMENTS_FILE, CONFIDENCE_FILE)
# Every name above: what the package writes into a run directory, spelled nowhere else.
NAMES = (*ATOMIC_FILES, TENSORBOARD_DIR, LOCK_FILE, CHECKPOINTS_DIR, LATEST_FILE, OPTIMIZER_FILE, RNG_FILE,
         TRAINER_STATE_FILE, EMA_FILE)


def checkpoint_name(step: int) -> str:
    """The directory name of the checkpoint after ``step`` optimizer steps (``step-00000600``)."""
    return f"step-{step:08d}"
