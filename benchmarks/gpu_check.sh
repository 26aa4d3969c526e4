#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py) on a GPU machine without internet access, where PyTorch (2.11 or later)
# and transformers (5.17 or later) are installed and this project's other dependencies may not be.
#
#   bash benchmarks/gpu_check.sh download     # here, with the package index: the wheels, into build/gpu-check-wheels
#   bash benchmarks/gpu_check.sh [ARGS...]    # there: installs those wheels offline, runs gpu_check.py ARGS
#
# The wheels are the project's dependencies that the GPU machines' image lacks and the package imports for
# translation studies (Moses tokenization, compare-mt's bootstrap; KINDS.md lists the image's packages) and for
# lm-evaluation-harness tasks (lm_eval, and datasets, dill and multiprocess under it: what an lm_eval study's job
# imports), at the versions this checkout's tests run against. The check imports only the lm-eval ones (its sweep's
# multiple-choice study): without the folder everything else runs all the same, and that study's row says what
# is missing. The package is not installed there: PYTHONPATH puts this checkout first, so the image's torch and
# transformers stay as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=build/gpu-check-wheels

if [ "${1:-}" = download ]; then
    # pure-Python wheels all: one download serves the GPU machine's Python 3.12
    packages=$(python3 -c 'from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in ("sacremoses", "compare-mt", "nltk", "defusedxml", "lm_eval", "datasets", "dill", "multiprocess")))')
    mkdir -p "$WHEELS"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$WHEELS" $packages
    ls "$WHEELS"
    exit 0
fi

site=$(mktemp -d /tmp/headprune-gpu-check-site-XXXXXX)
trap 'rm -rf "$site"' EXIT
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$WHEELS"/*.whl
fi
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")'
python3 benchmarks/gpu_check.py "$@"
