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
avx512=OFF
grep -q avx512_vnni /proc/cpuinfo && avx512=ON
if ! "$venv/bin/python" -c "import llama_cpp, gguf, numpy" 2>/dev/null; then
  echo "bench: building llama-cpp-python from source (several minutes on 2 cores)"
  # Not -march=native: VMs often advertise AMX without letting a process use it (SIGILL).
  # AVX-512 and VNNI stay on, so llama.cpp gets every vector unit it can use here.
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_BMI2=ON -DGGML_AVX512=$avx512 -DGGML_AVX512_VNNI=$avx512 -DGGML_AVX512_VBMI=$avx512
    -DGGML_AVX512_BF16=$avx512 -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
  "$venv/bin/pip" install -q --no-cache-dir llama-cpp-python gguf numpy
fi
"$venv/bin/python" bench/cpu_vs_llamacpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --dq-bench build/release/bin/dq-bench-cpu "$@"
