#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run sized for a lent machine (docs/gpu.md): the GPU tests, the truth
# benchmark on CUDA, a short tuning run of the example and mode=selfcheck of what it recommends.
#
#     bash benchmarks/on_gpu.sh OUT_DIR [TRUTH_ROUNDS] [TUNE_BUDGET_S]
#
# Run from the repository root with a Python that has torch with CUDA and autotune's requirements (PYTHON, default
# python3). Each stage has a time limit, so one that hangs leaves time for the rest; each writes its log to OUT_DIR
# and prints its exit code, time and last lines; no stage runs past DEADLINE_S (default 570) seconds from the start.
# OUT_DIR ends with 8 files (the runs' directories in runs.tar.gz).
set -uo pipefail
out=${1:?OUT_DIR}
truth_rounds=${2:-3}
tune_budget_s=${3:-120}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
work=$(mktemp -d)
deadline=${DEADLINE_S:-570}

stage() {  # stage NAME LIMIT_S COMMAND...: run COMMAND into OUT_DIR/NAME.log within LIMIT_S seconds
    local name=$1 limit=$2 start=$SECONDS rc
    shift 2
    ((limit > deadline - SECONDS - 10)) && limit=$((deadline - SECONDS - 10))
    ((limit < 10)) && { echo "== $name: skipped, the deadline is near"; return; }
    echo "== $name (limit ${limit} s): $*"
    timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    tail -n "${TAIL:-12}" "$out/$name.log" | cut -c1-220
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    "$py" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda,
torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0), torch.get_num_threads())'
    lscpu | grep -E 'Model name|^CPU\(s\)'
} >"$out/machine.log" 2>&1
cat "$out/machine.log"

# The tests that need a GPU (they skip elsewhere), then the tests of the paths a GPU changes.
TAIL=24 stage gpu-tests 170 "$py" -m pytest -rfEs -p no:cacheprovider -n 6 --timeout 180 \
    tests/measure/test_gpu.py tests/measure/test_cuda_memory.py tests/measure/test_gpu_window.py \
    tests/trial/test_on_gpu.py tests/trial/test_probe.py tests/pipeline/test_batches.py \
    "tests/trial/test_faults.py::test_a_real_cuda_out_of_memory_is_out_of_memory"

# What the harness's per-step marks cost on CUDA (events on a sample of steps), beside its other readings.
stage harness-costs 60 "$py" -m benchmarks.harness_costs --device cuda

# GPU-bound pipelines first (in-memory data), then the data-bound example with persistent workers across epochs.
TAIL=14 stage truth 210 "$py" -m benchmarks.truth --device cuda --rounds "$truth_rounds" --results "$out/truth.json" \
    --set measure.min_time_s=2 --cases tabular_mlp/baseline transformer_lm/baseline mymodel/workers

stage tune $((tune_budget_s + 40)) "$py" -m autotune pipeline=mymodel study.budget_s="$tune_budget_s" \
    study.diagnose=false study.storage="sqlite:///$work/study.db" hydra.run.dir="$work/tune"

TAIL=16 stage selfcheck 130 "$py" -m autotune pipeline=mymodel mode=selfcheck selfcheck.rounds=2 \
    study.storage="sqlite:///$work/study.db" hydra.run.dir="$work/selfcheck"

tar -czf "$out/runs.tar.gz" -C "$work" $(cd "$work" && ls -d tune selfcheck 2>/dev/null)
ls "$out"
