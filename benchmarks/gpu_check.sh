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
PACKAGES="sacremoses compare-mt nltk defusedxml lm_eval datasets dill multiprocess"

if [ "${1:-}" = download ]; then
    # pure-Python wheels, but multiprocess has one per Python version: the GPU machine's 3.12 and this one's
    packages=$(python3 -c 'import sys; from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))' $PACKAGES)
    mkdir -p "$WHEELS"
    for python_version in 3.12 "$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$python_version" -d "$WHEELS" $packages
    done
    ls "$WHEELS"
    exit 0
fi

site=$(mktemp -d /tmp/headprune-gpu-check-site-XXXXXX)
trap 'rm -rf "$site"' EXIT
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # pip picks each package's wheel for this Python from the folder
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" --find-links "$WHEELS" \
        $PACKAGES
fi
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 -c 'import torch, transformers; print(f"torch {torch.__version__}, transformers {transformers.__version__}")'
python3 benchmarks/gpu_check.py "$@"
