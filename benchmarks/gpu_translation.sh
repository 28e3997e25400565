#!/usr/bin/env bash
# Every GPU figure of translation in one command, about 8 minutes on one H100 or H200:
#   1. the CUDA decoding tests (tests/test_cuda.py: the Translator on CUDA against the CPU);
#   2. translation speed on the GPU: ours fp32/bf16, generate() fp32/bf16, CTranslate2 float32/float16,
#      greedy and beam 4, 16 / 256 / 1,000 Multi30k test_2016 sentences, outputs compared;
#   3. the server on the GPU under 64 clients, and the same on the CPU, for the ratio.
#
#   bash benchmarks/gpu_translation.sh DATA_DIR RUN_DIR OUT_DIR
#
# DATA_DIR holds multi30k/ as ../shared/data does; RUN_DIR is a trained Multi30k de->en run (for
# example the one benchmarks/gpu_training.sh leaves in OUT_DIR/m30k-de-en); OUT_DIR gets each stage's
# log and JSON. Each stage has its own time limit; a stage that fails or runs out is reported and the
# next one runs. Python packages: torch with CUDA, transformers, ctranslate2 (with CUDA) and this
# project's requirements.
set -uo pipefail
data=${1:?usage: bash benchmarks/gpu_translation.sh DATA_DIR RUN_DIR OUT_DIR}
run=${2:?usage: bash benchmarks/gpu_translation.sh DATA_DIR RUN_DIR OUT_DIR}
out=${3:?usage: bash benchmarks/gpu_translation.sh DATA_DIR RUN_DIR OUT_DIR}
mkdir -p "$out"
py=${PYTHON:-python3}
source "$(dirname "$0")/gpu_stages.sh"
header $py -c "import ctranslate2; print('ctranslate2', ctranslate2.__version__, 'CUDA devices it sees:', ctranslate2.get_cuda_device_count())"

stage tests 120 $py -m pytest -q -x -p no:cacheprovider tests/test_cuda.py -k "decod or translat or logits"
stage translate_speed 240 $py benchmarks/translate_speed.py --device cuda --run-dir "$run" --from "$data" \
    --rounds 3 --out "$out/translate_speed.json"
stage serve_gpu 60 $py benchmarks/serve_load.py "$run" --device cuda --clients 64 --seconds 20 --modes dynamic \
    --sentences "$data/multi30k/test_2016_flickr.de.gz"
stage serve_cpu 60 $py benchmarks/serve_load.py "$run" --device cpu --clients 64 --seconds 20 --modes dynamic \
    --sentences "$data/multi30k/test_2016_flickr.de.gz"
cat "$out/summary.txt"
