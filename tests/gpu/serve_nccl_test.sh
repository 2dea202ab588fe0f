#!/usr/bin/env bash
# On a machine with two GPUs: disaggregated serving with KV moved GPU to GPU by NCCL (issue 7):
# serve_cuda_test.sh's checks with [prefill] device = "cuda:0", [decode] device = "cuda:1" and
# [transfer] backend = "nccl" (the prefill worker's posts read its device cache, the decode worker
# receives straight into its leased device blocks: no host staging, which it also checks).
# Needs the CUDA binaries (dqserve, dq-router, dq-prefill, dq-decode, built with NCCL) in $DQ_BIN
# and SmolLM2 (or $SMOLLM2). Logs go to $OUT (default /tmp/dq-serve-nccl). Exit 0 when all
# passed. If NCCL finds no network interface for its bootstrap, run with NCCL_SOCKET_IFNAME=lo.
export DQ_TRANSPORT=nccl OUT=${OUT:-/tmp/dq-serve-nccl}
export DQ_PREFILL_DEVICE=${DQ_PREFILL_DEVICE:-cuda:0} DQ_DECODE_DEVICE=${DQ_DECODE_DEVICE:-cuda:1}
exec bash "$(dirname "$0")/serve_cuda_test.sh"
