#!/usr/bin/env bash
# CPU benchmark: dqserve vs llama.cpp (built from source by PyPI's llama-cpp-python) on the
# default model. Writes bench/results/cpu_smollm2_vs_llamacpp.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
venv=.venv-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import llama_cpp, gguf, numpy" 2>/dev/null; then
  echo "bench: building llama-cpp-python from source (several minutes on 2 cores)"
  "$venv/bin/pip" install -q llama-cpp-python gguf numpy
fi
"$venv/bin/python" bench/cpu_vs_llamacpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --dq-bench build/release/bin/dq-bench-cpu "$@"
