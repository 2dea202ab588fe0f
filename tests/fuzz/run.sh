#!/usr/bin/env bash
# Builds tests/fuzz/http_request_fuzzer.cpp with clang (libFuzzer + ASan + UBSan) over the
# router's request parsing and the common/ chat template and tokenizer it uses, then fuzzes it for
# DQ_FUZZ_SECONDS (default 60) from the seed corpus. Exit 0 when nothing was found; otherwise the
# crashing input is left in the work folder and printed.
#   tests/fuzz/run.sh [work-dir]
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$src/build/fuzz}
seconds=${DQ_FUZZ_SECONDS:-60}
mkdir -p "$work/obj" "$work/corpus"
cxx=${DQ_FUZZ_CXX:-clang++}
# clang and its libFuzzer runtime: only this test needs them (not the build, nor the image).
missing=()
for p in clang libclang-rt-14-dev; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fuzz: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (apt-get install clang)"; exit 1; }
launcher=$(command -v ccache || true)
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -I"$src" $(pkg-config --cflags libpcre2-8))
sources=("$src"/router/{openai_request,chat_request,json_fields,api_error,utf8}.cpp
         "$src"/common/chat_template.cpp "$src"/common/jinja/*.cpp
         "$src"/common/tokenizer/*.cpp)
objs=()
for f in "${sources[@]}"; do
  o="$work/obj/$(echo "${f#"$src"/}" | tr / _).o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ]; then
    $launcher "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$f" -o "$o"
  fi
  objs+=("$o")
done
$launcher "$cxx" "${flags[@]}" -fsanitize=fuzzer -c "$src/tests/fuzz/http_request_fuzzer.cpp" \
  -o "$work/obj/fuzzer.o"
"$cxx" "${flags[@]}" -fsanitize=fuzzer "$work/obj/fuzzer.o" "${objs[@]}" -o "$work/http_request_fuzzer" \
  $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_cord libpcre2-8)
cp -n "$src"/tests/fuzz/corpus/* "$work/corpus/" 2>/dev/null || true
export DQ_FUZZ_TOKENIZER="$src/tests/golden/tokenizer/qwen-style/tokenizer.json"
export DQ_FUZZ_TEMPLATE="$src/tests/golden/chat/qwen3_template.jinja"
export UBSAN_OPTIONS=print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1
cd "$work"
echo "fuzz: $seconds s of $work/http_request_fuzzer"
./http_request_fuzzer -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
  -dict="$src/tests/fuzz/json.dict" -print_final_stats=1 corpus
