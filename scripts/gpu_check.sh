#!/usr/bin/env bash
# The GPU check in one command (docs/scaling.md and docs/performance.md, "On a GPU"):
#
#   make gpu-wheels                 # once, on a machine with a package index: .whl/ (git-ignored, ~5 MiB)
#   scripts/gpu_check.sh            # on the CUDA machine: offline install of .whl/, then scripts/gpu/check.py
#   scripts/gpu_check.sh --dry-run  # on a CPU: the parts that need no GPU run, the others are rehearsed or listed
#
# Results: gpu_check.json and gpu_check.log in $OUT (the device tool's folder) if set, else runs/gpu-check-<time>;
# other arguments go to scripts/gpu/check.py (--dry-run, --budget-s, --only). PYTHON picks the interpreter (default
# python3: on the GPU machine, the one that holds torch). GPU_CHECK_WHEELS: the wheel folder (default .whl; e.g. one
# made for this machine's CPython by `scripts/gpu/wheels.py --python-version 3.11 --dest DIR`, for a --dry-run);
# GPU_CHECK_SITE: where they are installed (default $TMPDIR/rlvr-gpu-site, emptied first).
set -u
cd "$(dirname "$0")/.." || exit 1
PY="${PYTHON:-python3}"
OUT_DIR="${OUT:-runs/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}"
case " $* " in *" --out"*) echo "scripts/gpu_check.sh: set OUT=DIR instead of --out" >&2; exit 2;; esac
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
SITE="${GPU_CHECK_SITE:-${TMPDIR:-/tmp}/rlvr-gpu-site}"
WHEELS="${GPU_CHECK_WHEELS:-.whl}"
{
  echo "== rlvr GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -m), $($PY --version 2>&1)"
  if command -v nvidia-smi >/dev/null; then nvidia-smi || true; else echo "nvidia-smi: not found"; fi
} >>"$LOG" 2>&1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  rm -rf "$SITE"
  # --no-deps: .whl/ holds every missing dependency by name (scripts/gpu/wheels.txt); --no-index: no network there
  if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl \
       >>"$LOG" 2>&1; then
    export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH#"$PWD/src"}"
    echo "installed $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (offline: --no-index --no-deps)" \
      | tee -a "$LOG"
  else
    # e.g. a --dry-run on a machine whose CPython is not the wheels' (3.12): its own packages are used instead
    echo "could not install $WHEELS with $PY (see $LOG); going on with the packages it has" | tee -a "$LOG"
  fi
else
  echo "no wheels in $WHEELS (make gpu-wheels makes .whl/); going on with the packages $PY has" | tee -a "$LOG"
fi
exec "$PY" scripts/gpu/check.py --out "$OUT_DIR" "$@"
