#!/usr/bin/env bash
# The GPU check in one command, for a device call of about 8 minutes on a bare GPU machine:
#
#     bash scripts/gpu_check.sh OUT_DIR [--budget-s 480] [--device cuda|cpu] [--tiny] [--parts tests,steps,compare,peers]
#
# 1. If datasets, evaluate or torch-optimi cannot be imported, installs the wheels carried in .whl/
#    (docs/benchmarks.md, "The GPU check": which, and the pip download command) whose package the
#    machine lacks or holds in an older version, into a folder of their own, first on PYTHONPATH;
#    nothing is fetched from anywhere.
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
# The folder must be named site-packages: dill (datasets' fingerprints) pickles by value every module
# it finds outside such a folder, and pyarrow's modules do not pickle (seen on an H200 machine).
SITE=${MIXFT_GPU_CHECK_SITE:-${TMPDIR:-/tmp}/mixft-gpu-check/site-packages}
if [ "$(basename "$SITE")" != site-packages ]; then
    echo "gpu_check.sh: error: MIXFT_GPU_CHECK_SITE must name a folder called site-packages, got $SITE" >&2
    exit 2
fi
mkdir -p "$OUT" "$SITE" || { echo "gpu_check.sh: error: cannot create $OUT or $SITE" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2

# Nothing outside the machine answers there: no hub probe, no download retries.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

missing=$("$PY" -c 'import importlib.util as u; print(" ".join(m for m in ("datasets", "evaluate", "optimi") if u.find_spec(m) is None))')
if [ -n "$missing" ]; then
    # A carried wheel goes in only where the machine lacks its package or has an older version
    # (datasets wants a newer pyarrow than some images hold); the machine's own copies stay.
    wheels=$("$PY" - <<'PICK'
import glob
from importlib import metadata
from packaging.version import Version
for path in sorted(glob.glob(".whl/*.whl")):
    name, version = path.rsplit("/", 1)[1].split("-")[:2]
    try:
        if Version(metadata.version(name)) >= Version(version):
            continue
    except metadata.PackageNotFoundError:
        pass
    print(path)
PICK
)
    if [ -n "$wheels" ]; then
        echo "gpu_check.sh: not installed here: $missing; installing these carried wheels into $SITE:" $wheels
        # shellcheck disable=SC2086
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $wheels \
            || echo "gpu_check.sh: the wheels did not install; the parts that need $missing will say so"
    else
        echo "gpu_check.sh: not installed here: $missing, and no wheels for it in .whl/ (docs/benchmarks.md, 'The GPU check')"
    fi
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

"$PY" -m benchmarks.gpu_check "$OUT" --site "$SITE" "$@" 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
