#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run sized for a lent machine (docs/gpu.md): the GPU tests, the truth
# benchmark on CUDA, a short tuning run of the example, mode=profile of a GPU-bound pipeline and mode=selfcheck of
# what the tuning run recommends.
#
#     bash benchmarks/on_gpu.sh OUT_DIR [TRUTH_ROUNDS] [TUNE_BUDGET_S]
#
# Run from the repository root with a Python that has torch with CUDA and autotune's requirements (PYTHON, default
# python3). Each stage has a time limit, so one that hangs leaves time for the rest; each writes its log to OUT_DIR
# and prints its exit code, time and last lines; no stage runs past DEADLINE_S (default 570) seconds from the start.
# OUT_DIR ends with 7 files: the logs of the first stages, truth.json, and runs.tar.gz (the runs' directories and the
# last stages' logs).
set -uo pipefail
out=${1:?OUT_DIR}
truth_rounds=${2:-3}
tune_budget_s=${3:-120}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
work=$(mktemp -d)
deadline=${DEADLINE_S:-570}

stage() {  # stage NAME LIMIT_S COMMAND...: run COMMAND into LOG_DIR/NAME.log (default OUT_DIR) within LIMIT_S s
    local name=$1 limit=$2 start=$SECONDS rc log=${LOG_DIR:-$out}/$1.log
    shift 2
    ((limit > deadline - SECONDS - 10)) && limit=$((deadline - SECONDS - 10))
    ((limit < 10)) && { echo "== $name: skipped, the deadline is near"; return; }
    echo "== $name (limit ${limit} s): $*"
    timeout -k 10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    tail -n "${TAIL:-12}" "$log" | cut -c1-220
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    "$py" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda,
torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0), torch.get_num_threads())'
    lscpu | grep -E 'Model name|^CPU\(s\)'
} >"$out/machine.log" 2>&1
cat "$out/machine.log"

# The tests that need a GPU (they skip elsewhere), then the tests of the paths a GPU changes.
TAIL=24 stage gpu-tests 150 "$py" -m pytest -rfEs -p no:cacheprovider -n 6 --timeout 180 \
    tests/measure/test_gpu.py tests/measure/test_cuda_memory.py tests/measure/test_gpu_window.py \
    tests/trial/test_on_gpu.py tests/trial/test_probe.py tests/pipeline/test_batches.py \
    "tests/trial/test_faults.py::test_a_real_cuda_out_of_memory_is_out_of_memory"

# What the harness's per-step marks cost on CUDA (events on a sample of steps), beside its other readings.
stage harness-costs 45 "$py" -m benchmarks.harness_costs --device cuda

# GPU-bound pipelines first (in-memory data), then the data-bound example with a persistent worker a core, whose
# batches come in bursts between stalls at epoch boundaries.
TAIL=14 stage truth 200 "$py" -m benchmarks.truth --device cuda --rounds "$truth_rounds" --results "$out/truth.json" \
    --cases tabular_mlp/baseline transformer_lm/baseline mymodel/worker-a-core

stage tune $((tune_budget_s + 40)) "$py" -m autotune pipeline=mymodel study.budget_s="$tune_budget_s" \
    study.diagnose=false study.storage="sqlite:///$work/study.db" hydra.run.dir="$work/tune"

# The profiler on CUDA: per-stage device time, the kernels in the trace, the allocator's history.
LOG_DIR=$work stage profile 60 "$py" -m autotune pipeline=transformer_lm mode=profile \
    study.storage="sqlite:///$work/study.db" hydra.run.dir="$work/profile"

TAIL=16 LOG_DIR=$work stage selfcheck 130 "$py" -m autotune pipeline=mymodel mode=selfcheck selfcheck.rounds=2 \
    study.storage="sqlite:///$work/study.db" hydra.run.dir="$work/selfcheck"

tar -czf "$out/runs.tar.gz" -C "$work" $(cd "$work" && ls -d tune profile selfcheck ./*.log 2>/dev/null)
ls "$out"
