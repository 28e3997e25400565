# Shared by gpu_training.sh and gpu_translation.sh (sourced, not run): the stage runner and the
# header every results folder starts with. Expects $out (the results folder) and $py (python).

export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

stage() {  # stage NAME SECONDS COMMAND...: run with a time limit, log to $out/NAME.log, say how it ended
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/summary.txt"
}

header() {  # the GPU, its driver and the library versions, first lines of $out/summary.txt
    { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      $py -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
      "$@"; } | tee "$out/summary.txt"
}
