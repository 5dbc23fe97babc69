#!/bin/bash
# The GPU checks of the class-mask expansion in one run, for a lent CUDA machine:
#   bench/gpu_walks.py   real walks (SynCode Go and C, the invoice schema), batch 1/8/64: the
#                        device expansion against the CPU rows bit for bit, and time per step
#                        against the CPU rows + XGrammar's apply_token_bitmask_inplace;
#   bench/gpu_check.py   synthetic and real class assignments, 128k and 200k logits;
#   bench/gpu_online.py  a whole decoding step through GrammarLogitsProcessor (llama.cpp's c.gbnf).
# Run from the repository root: bash bench/gpu_device.sh.  It builds the C kernels in place for the
# machine's Python, compresses on the machine (a cache made under another Python may be refused:
# \w and \d follow that Python's Unicode tables), and writes logs and JSON under $OUT.
# Prepared here, in ignored folders that travel with the run:
#   .gpu/grammars/syncode/{go,c}_grammar.lark and .gpu/grammars/c.gbnf (from ../shared/grammars);
#   .whl/: wheels for the machine's Python of what it lacks (XGrammar and its needs, quicktok-v1).
# SIM=1 PY=python runs a small dry run here on the CPU (Triton's interpreter; times mean nothing).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu_out}
GRAMMARS=${GRAMMARS:-.gpu/grammars}
CACHE=$(mktemp -d)
mkdir -p "$OUT"
if [ -z "${SIM:-}" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$PWD
  else
    export PYTHONPATH=$PWD
  fi
  WALK=""; CHECK="--classes-npz $CACHE/real_classes.npz"; ONLINE=""
else
  export PYTHONPATH=$PWD TRITON_INTERPRET=1
  WALK="--interpret --walks 1 --steps 3 --batches 1 --only schema:invoice"
  CHECK="--device cpu --widths 256 --budget 1"; ONLINE="--device cpu --steps 3 --batches 1"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
echo "cpus $(nproc)"
$PY - <<'PY' > "$OUT/build.txt" 2>&1 || { echo "C build failed:"; tail -5 "$OUT/build.txt"; }
import sys
from setuptools import setup
sys.argv = ["setup.py", "build_ext", "--inplace", "-q"]
namespace = {"__name__": "setup_kernels", "__file__": "setup.py"}
source = open("setup.py", encoding="utf-8").read()
exec(compile(source.split("\nsetup(")[0], "setup.py", "exec"), namespace)  # the definitions, not the call
setup(name="formalgram-kernels", ext_modules=namespace["_c_extensions"](), script_args=sys.argv[1:])
PY
$PY - <<'PY'
import importlib.metadata as md, sys
import numpy, torch, triton
print("python", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "triton", triton.__version__)
try:
    print("xgrammar", md.version("xgrammar"))
except md.PackageNotFoundError:
    print("xgrammar absent")
from formalgram_cfgzip.engines.native import _cnative
from formalgram_cfgzip.expand import _cexpand
print("C kernels", _cnative.__file__, _cexpand.__file__)
PY
step() {  # name, seconds, command...
  local name=$1 limit=$2; shift 2; local t0; t0=$(date +%s)
  echo "== $name"
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1
  echo "$name rc=$? in $(( $(date +%s) - t0 )) s"
  tail -16 "$OUT/$name.txt"
}
step gpu_walks 300 $PY -m bench.gpu_walks --cache-dir "$CACHE" --grammars "$GRAMMARS" --json "$OUT/gpu_walks.json" $WALK
$PY - "$CACHE" <<'PY'
import sys
from pathlib import Path
import numpy as np
arrays = {}
for folder in sorted(Path(sys.argv[1]).glob("*-llama3")):
    token_class = np.load(folder / "arrays.npz")["token_class"].astype(np.int32)
    arrays[f"real-{folder.name}"] = token_class
    arrays[f"real-{folder.name}__n"] = np.array([int(token_class.max()) + 1])
np.savez(Path(sys.argv[1]) / "real_classes.npz", **arrays)
PY
step gpu_check 150 $PY bench/gpu_check.py --quick --budget 100 --json "$OUT/gpu_check.json" $CHECK
step gpu_online 150 $PY bench/gpu_online.py --grammar "$GRAMMARS/c.gbnf" --json "$OUT/gpu_online.json" $ONLINE
rm -rf "$CACHE"
