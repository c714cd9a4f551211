#!/usr/bin/env bash
# Creates .venv and installs autotune with its test tools. Safe to run again.
# torch is installed first and pinned, so no other requirement pulls a different (multi-GB CUDA) build;
# set TORCH_SPEC to choose another, e.g. TORCH_SPEC="torch==2.13.0" (the default).
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
.venv/bin/python -m pip install -q -e '.[test]'
echo "setup.sh: ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
