#!/usr/bin/env bash
# Creates .venv and installs autotune with its test tools. Safe to run again.
# torch is installed first and pinned, so that autotune's own requirement (torch>=2.4) keeps that build.
# TORCH_SPEC chooses another version (default torch==2.13.0); TORCH_INDEX_URL the index it comes from: PyPI's Linux
# wheel is the CUDA build (several GB), https://download.pytorch.org/whl/cpu has the CPU-only one.
set -euo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "${TORCH_SPEC:-torch==2.13.0}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
.venv/bin/python -m pip install -q -e '.[test]'
echo "setup.sh: ready ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
