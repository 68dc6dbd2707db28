#!/usr/bin/env bash
# The H200 run of the Triton backends: ONE command, on a machine with one H200 (16 CPU
# cores, no internet), from the repository root:
#
#     OUT=/path/to/results bash benchmarks/h200/run.sh
#
# (on the device tool, $OUT is set: `bash benchmarks/h200/run.sh`, timeout_s 600).
# It uses the machine's own python3 (torch with CUDA and triton there; the repo's
# CPU pins do not apply) and writes at most 8 files under $OUT:
#
#   run.json                 steps, exit codes, wall times, versions, git revision
#   log.txt                  everything printed, in order
#   tests.txt                pytest tests/triton on the GPU (compiled kernels vs reference)
#   bench.json               ceilings measured now (copy TB/s, BF16/FP32 matmul TFLOP/s),
#                            kernel times at M,K,N = 220000,512,1024 against them,
#                            determinism of triton / triton-atomic / torch-eager (5 runs)
#   matrix-results.json.gz   the case matrix, full profile, backends triton,
#                            triton-atomic, torch-eager, --device cuda
#   matrix-summary.json      per backend: cells by status, failing (case, output, golden)
#
# Budget: about 9.5 minutes in all; each step has its own timeout, and the matrix
# gets what the earlier steps left (its shards are merged even if it is cut short).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/h200-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
unset TRITON_INTERPRET SWIGLU_TRITON_INTERPRET_MAX_MKN
BUDGET=${BUDGET_S:-570}
T0=$(date +%s)
LOG=$OUT/log.txt
WORK=$(mktemp -d /tmp/h200-run.XXXXXX)
: >"$LOG"
declare -A RC WALL

left() { echo $((BUDGET - ($(date +%s) - T0))); }

step() {   # step NAME TIMEOUT_S CMD...
    local name=$1 limit=$2; shift 2
    local avail; avail=$(left)
    if ((limit > avail - 10)); then limit=$((avail - 10)); fi
    if ((limit < ${MIN_STEP_S:-15})); then
        echo "== $name: skipped, ${avail}s of the budget left" | tee -a "$LOG"
        RC[$name]=skipped; WALL[$name]=0; return
    fi
    echo "== $name (timeout ${limit}s): $*" | tee -a "$LOG"
    local s; s=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG" "$WORK/$name.txt"
    RC[$name]=${PIPESTATUS[0]}
    WALL[$name]=$(($(date +%s) - s))
    echo "== $name: exit ${RC[$name]} after ${WALL[$name]}s" | tee -a "$LOG"
}

step env 30 bash -c "nvidia-smi; $PY -c 'import torch, triton; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"triton\", triton.__version__, torch.cuda.get_device_name(0))'"

# 1. the Triton tests on the GPU: compiled kernels against the independent torch reference
step tests 100 "$PY" -m pytest tests/triton -q -rs -n 4 -p no:cacheprovider
cp "$WORK/tests.txt" "$OUT/tests.txt" 2>/dev/null

# 2. ceilings, kernel times against them, determinism
step bench 160 "$PY" benchmarks/h200/bench.py --out "$OUT/bench.json"

# 3. the case matrix, three backends in one session (each case's goldens computed once)
MATRIX_DIR=$WORK/matrix
step matrix $(($(left) - 45)) "$PY" -m pytest cases/ -q -p no:cacheprovider -n 12 --device cuda --profile full \
    --backend triton --backend triton-atomic --backend torch-eager --results-dir "$MATRIX_DIR" -rfE --tb=no

# 4. results: merged (from the shards if the matrix was cut short), compressed, summarised
MIN_STEP_S=5 step summary 30 "$PY" benchmarks/h200/summarize.py --results-dir "$MATRIX_DIR" --out "$OUT"

WALL_TOTAL=$(($(date +%s) - T0))
"$PY" - "$OUT/run.json" "$WALL_TOTAL" <<EOF
import json, subprocess, sys
rc = {$(for k in "${!RC[@]}"; do printf '"%s": "%s", ' "$k" "${RC[$k]}"; done)}
wall = {$(for k in "${!WALL[@]}"; do printf '"%s": %s, ' "$k" "${WALL[$k]}"; done)}
try:
    rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.count("\n")
except Exception as exc:
    rev, dirty = f"unknown: {exc}", None
json.dump({"command": "bash benchmarks/h200/run.sh", "exit_codes": rc, "wall_s": wall,
           "wall_total_s": int(sys.argv[2]), "git_head": rev, "uncommitted_files": dirty},
          open(sys.argv[1], "w"), indent=1)
EOF
echo "== done in ${WALL_TOTAL}s; files in $OUT:" | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
rm -rf "$WORK"
