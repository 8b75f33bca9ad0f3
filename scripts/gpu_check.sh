#!/usr/bin/env bash
# The GPU check in one command, for a device call of about 8 minutes on a bare GPU machine:
#
#     bash scripts/gpu_check.sh OUT_DIR [--budget-s 480] [--device cuda|cpu] [--tiny] [--parts tests,steps,compare,peers]
#
# 1. If datasets, evaluate or torch-optimi cannot be imported, installs the wheels carried in .whl/
#    (docs/benchmarks.md, "The GPU check": which, and the pip download command) into a folder of
#    their own, first on PYTHONPATH; nothing is fetched from anywhere.
# 2. Runs python -m benchmarks.gpu_check OUT_DIR ... (the options are its own), its output also in
#    OUT_DIR/gpu_check.log; it writes OUT_DIR/gpu_check.json and gpu_check.md after every part.
# Exit code: the check's (0 all parts ok or skipped, 1 a part failed, 2 bad options).
set -uo pipefail

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
    echo "usage: bash scripts/gpu_check.sh OUT_DIR [--budget-s N] [--device cuda|cpu] [--tiny] [--parts ...]" >&2
    exit 2
fi
OUT=$1
shift
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
SITE=${MIXFT_GPU_CHECK_SITE:-${TMPDIR:-/tmp}/mixft-gpu-check-site}
mkdir -p "$OUT" "$SITE" || { echo "gpu_check.sh: error: cannot create $OUT or $SITE" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2

# Nothing outside the machine answers there: no hub probe, no download retries.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

missing=$("$PY" -c 'import importlib.util as u; print(" ".join(m for m in ("datasets", "evaluate", "optimi") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
    shopt -s nullglob
    wheels=(.whl/*.whl)
    shopt -u nullglob
    if [ ${#wheels[@]} -gt 0 ]; then
        echo "gpu_check.sh: not installed here: $missing; installing the ${#wheels[@]} carried wheels into $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}" \
            || echo "gpu_check.sh: the wheels did not install; the parts that need $missing will say so"
    else
        echo "gpu_check.sh: not installed here: $missing, and no wheels in .whl/ (docs/benchmarks.md, 'The GPU check')"
    fi
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -m benchmarks.gpu_check "$OUT" --site "$SITE" "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
