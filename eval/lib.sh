# What eval/matrix.sh and eval/multiturn_policy.sh share (sourced, from the checkout's root).

# quantize_formats QUANTIZE REF WORK SPEC...: each SPEC ("fmt" or "fmt:group") quantized from REF
# to WORK/fmt with the calibration text, unless it is there already.
quantize_formats() {
  local quantize=$1 ref=$2 work=$3 spec fmt group
  shift 3
  for spec in "$@"; do
    fmt=${spec%%:*}; group=""
    [[ $spec == *:* ]] && group="--group-size ${spec##*:}"
    [ -f "$work/$fmt/model.safetensors" ] && continue
    "$quantize" --model "$ref" --format "$fmt" $group --calib tests/data/calib_text.txt \
      --out "$work/$fmt"
  done
}

# A free port below the kernel's ephemeral range (see tests/e2e/serve/serve_lib.py free_port).
free_port() { python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randint(max(1024, low - 12000), low - 1))); break
    except OSError:
        s.close()
print(s.getsockname()[1])'; }
