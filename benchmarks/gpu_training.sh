#!/usr/bin/env bash
# Every GPU figure of training in one command, about 8 minutes on one H100 or H200:
#   1. the CUDA paths' tests (tests/test_cuda.py: the CUDA engine, precisions, resume, torchrun);
#   2. training throughput, ours (eager and compiled) against torch.nn.Transformer and Marian:
#      base and big, bf16, 4,096 / 16,384 / 24,576 target tokens per step; base in TF32 at 16,384;
#   3. time to quality: the Multi30k de->en recipe trained for 2 minutes on the GPU (compiled), scored
#      on valid and test_2016 as docs/quality.md does.
#
#   bash benchmarks/gpu_training.sh DATA_DIR OUT_DIR
#
# DATA_DIR holds multi30k/ as ../shared/data does (the registry's local-copy layout); OUT_DIR gets each
# stage's log and JSON. Each stage has its own time limit so that a slow one cannot take the others'
# time; a stage that fails or runs out is reported and the next one runs. Python packages: torch with
# CUDA, transformers (for Marian), and this project's requirements (pip install -e . where possible).
set -uo pipefail
data=${1:?usage: bash benchmarks/gpu_training.sh DATA_DIR OUT_DIR}
out=${2:?usage: bash benchmarks/gpu_training.sh DATA_DIR OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
source "$(dirname "$0")/gpu_stages.sh"
header

stage tests 100 $py -m pytest -q -x -p no:cacheprovider tests/test_cuda.py \
    -k "engine or never_waits or device_batches or compiled or precision or torchrun"
stage train_step_bf16 240 $py benchmarks/train_step.py --device cuda --sizes base big --dtypes bf16 \
    --tokens 4096 16384 24576 --rounds 3 --steps 4 --out "$out/train_step_bf16.json"
stage train_step_tf32 50 $py benchmarks/train_step.py --device cuda --sizes base --dtypes tf32 \
    --tokens 16384 --rounds 2 --steps 4 --contenders ours "ours (compiled)" torch.nn.Transformer \
    --out "$out/train_step_tf32.json"
stage multi30k_2min 200 $py benchmarks/multi30k.py --src de --minutes 2 \
    --set train.device=cuda --set train.compile=true --run-dir "$out/m30k-de-en" --from "$data"
cp "$out/m30k-de-en/benchmark.json" "$out/multi30k_2min.json" 2>/dev/null
cat "$out/summary.txt"
