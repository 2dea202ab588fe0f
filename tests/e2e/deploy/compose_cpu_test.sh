#!/usr/bin/env bash
# The CPU compose deployment (deploy/docker-compose.yml, deploy/compose/disagg-cpu.toml) run in
# Docker for real (issue 27; docs/deploy.md, "Docker without a registry"):
#  1. Docker: a daemon that answers, else dockerd started here (root only; stopped again at the
#     end unless DQ_KEEP_DOCKERD=1). No docker CLI, no compose tool, no permission or a daemon
#     that does not start: one "SKIP:" line saying why, exit 77 (CTest's SKIP_RETURN_CODE).
#  2. The reference: `dqserve up` on disagg-cpu.toml outside Docker (loopback, models/), its
#     greedy answer (compose_cpu.py reference, check.py's reference run).
#  3. The CPU image assembled from these binaries (a snapshot of DQ_BIN_DIR, so a rebuild during
#     the run cannot mix versions): build-image.sh cpu --prebuilt on the debootstrap base of
#     base-image.sh (cached by its content tag: only a first run pays for debootstrap).
#  4. `compose up -d` under a unique project name (parallel or leftover runs never collide), a
#     free published port, a fresh API key, worker key and TLS (make-worker-tls.sh, secrets):
#     /health with both workers serving, the greedy answer equal to dqserve up's, 401 without
#     the key and with a wrong one, no port published but the router's 8000.
#  5. Decode crash: SIGKILL of the decode container's process from the host, as the OOM killer
#     would (`docker exec ... kill -9 1` cannot: a PID namespace's init ignores SIGKILL sent from
#     inside it; tried, the process runs on): the restart policy restarts it, the same answer
#     comes back.
#  6. `docker kill` of the decode container: moby counts it as a manual stop and the restart
#     policy does NOT restart it (the test reports what it saw within 10 s, and fails on neither);
#     `compose start decode` brings it back and the same answer comes back.
#  7. `compose down -v`: no container, network or volume of the project is left.
# A trap runs `down -v` (after printing the containers' logs) on every other exit; the run is
# bounded (DQ_COMPOSE_TEST_LIMIT, default 840 s; on expiry the trap still tears down).
set -uo pipefail
SRC=${DQ_SOURCE_DIR:?run through ctest}
BIN=${DQ_BIN_DIR:?run through ctest}
HERE=$(cd "$(dirname "$0")" && pwd)
LIMIT_S=${DQ_COMPOSE_TEST_LIMIT:-840}
SKIP=77

if [ -z "${DQ_COMPOSE_TEST_INNER:-}" ]; then
  # The bound: timeout signals the whole run's process group; the trap below tears down.
  DQ_COMPOSE_TEST_INNER=1 timeout -k 90 "$LIMIT_S" bash "$0" "$@"
  rc=$?
  [ "$rc" -eq 124 ] && echo "FAIL: compose_cpu_test: still running after its bound of $LIMIT_S s"
  exit "$rc"
fi

T0=$(date +%s)
since() { echo $(($(date +%s) - $1)); }
step() { echo "[$(since "$T0") s] $*"; }
skip() {
  echo "SKIP: compose_cpu_test: $*"
  exit "$SKIP"
}
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
timings=()
record() { timings+=("$1=$2"); }

# --- 1. Docker --------------------------------------------------------------------------------
command -v docker >/dev/null || skip "no docker CLI (scripts/setup.sh installs docker.io)"
if command -v docker-compose >/dev/null; then
  compose_tool=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose_tool=(docker compose)
else
  skip "neither docker-compose nor the docker compose plugin is installed (scripts/setup.sh)"
fi
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import yaml' 2>/dev/null; then PY=$p && break; fi
done
[ -n "$PY" ] || { echo "FAIL: needs PyYAML (python3-yaml; scripts/setup.sh)"; exit 1; }

started_dockerd=""
dockerd_log=${TMPDIR:-/tmp}/dq-compose-test-dockerd.log
if ! err=$(docker info 2>&1 >/dev/null); then
  err=$(echo "$err" | grep -v "^WARNING" | grep -m1 . | cut -c1-200)
  [ "$(id -u)" -eq 0 ] ||
    skip "the Docker daemon does not answer uid $(id -u) ($err); starting dockerd needs root"
  command -v dockerd >/dev/null || skip "no Docker daemon answers ($err) and there is no dockerd"
  pgrep -x dockerd >/dev/null && skip "a dockerd runs but does not answer ($err)"
  step "no Docker daemon answers; starting dockerd (log: $dockerd_log)"
  t=$(date +%s)
  # Its own session and no inherited descriptors: neither timeout's signal nor CTest's pipes.
  setsid dockerd >"$dockerd_log" 2>&1 </dev/null &
  dockerd_pid=$!
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    kill "$dockerd_pid" 2>/dev/null
    why=$({ grep -m1 'level=fatal' "$dockerd_log" || tail -1 "$dockerd_log"; } | cut -c1-200)
    skip "dockerd did not come up (exited, or no answer in 60 s): $why"
  fi
  started_dockerd=$dockerd_pid
  record dockerd_start_s "$(since "$t")"
  step "dockerd $dockerd_pid answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
fi

WORK=$(mktemp -d /tmp/dq-compose-test.XXXXXX)
project=dqci-$(date +%s)-$$-$RANDOM
image=dqserve:test-$project
compose_file=$SRC/deploy/docker-compose.yml
compose=("${compose_tool[@]}" -p "$project" -f "$compose_file")
up=""

# The project's containers / networks / volumes (compose labels every object it makes).
objects() {
  local f="label=com.docker.compose.project=$project"
  docker ps -aq --filter "$f"
  docker network ls -q --filter "$f"
  docker network ls -q --filter "name=^${project}_"
  docker volume ls -q --filter "$f"
}

cleanup() {
  local rc=$?
  trap - EXIT TERM INT
  if [ -n "$up" ]; then
    echo "--- cleanup: containers' last logs, then down -v ---"
    timeout 30 "${compose[@]}" logs --no-color --tail 40 2>&1 | tail -150
    timeout 120 "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
  fi
  docker image rm -f "$image" >/dev/null 2>&1
  if [ -n "$started_dockerd" ] && [ "${DQ_KEEP_DOCKERD:-0}" != 1 ]; then
    kill "$started_dockerd" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$started_dockerd" 2>/dev/null || break; sleep 0.5; done
  fi
  if [ "$rc" -eq 0 ]; then rm -rf "$WORK"; else echo "work files in $WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "FAIL: interrupted (signal)"; exit 124' TERM INT

# --- 2. The reference: dqserve up outside Docker ------------------------------------------------
snap=$WORK/bin
mkdir -p "$snap"
for b in dqserve dq-router dq-prefill dq-decode dq-tool; do
  cp "$BIN/$b" "$snap/" || { echo "FAIL: $BIN/$b missing (build the release preset)"; exit 1; }
done
step "reference: dqserve up on deploy/compose/disagg-cpu.toml outside Docker"
t=$(date +%s)
DQ_BIN_DIR=$snap "$PY" "$HERE/compose_cpu.py" reference "$WORK/answer.json" ||
  { echo "FAIL: the dqserve up reference"; exit 1; }
record reference_s "$(since "$t")"

# --- 3. The image ---------------------------------------------------------------------------
step "base image: deploy/docker/base-image.sh bookworm (debootstrap, cached by its tag)"
t=$(date +%s)
base=$("$SRC/deploy/docker/base-image.sh" bookworm) || { echo "FAIL: base-image.sh"; exit 1; }
record base_image_s "$(since "$t")"
step "image $image: build-image.sh cpu --prebuilt (base $base)"
t=$(date +%s)
DQ_BASE_BUILD=$base DQ_BASE_RUNTIME=$base "$SRC/deploy/docker/build-image.sh" cpu \
  --prebuilt "$snap" --tag "$image" --log "$WORK/build.log" >/dev/null ||
  { echo "FAIL: build-image.sh (log: $WORK/build.log)"; exit 1; }
record image_build_s "$(since "$t")"
record image_size_mb "$(($(docker image inspect -f '{{.Size}}' "$image") / 1000000))"

# --- 4. compose up ----------------------------------------------------------------------------
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
"$SRC/deploy/make-worker-tls.sh" "$WORK/tls" >/dev/null ||
  { echo "FAIL: make-worker-tls.sh"; exit 1; }
unset COMPOSE_FILE COMPOSE_PROJECT_NAME DQ_WORKER_TLS_NAME DQ_BASE_BUILD DQ_BASE_RUNTIME
export DQ_IMAGE=$image DQ_PORT=$port DQ_TLS_DIR=$WORK/tls DQ_MODELS_DIR=$SRC/models
DQ_API_KEY=$(openssl rand -hex 16)
export DQ_API_KEY
step "compose up -d: project $project, router published on $port (${compose_tool[*]})"
t=$(date +%s)
up=1
# Compose starts the router once both workers' health checks pass.
if ! timeout 420 "${compose[@]}" up -d --no-build >"$WORK/up.log" 2>&1; then
  cat "$WORK/up.log"
  echo "FAIL: compose up"
  exit 1
fi
record up_workers_healthy_s "$(since "$t")"
serve() { "$PY" "$HERE/compose_cpu.py" serve "$port" "$WORK/answer.json" "$1"; }
serve "compose up" || exit 1
record up_to_first_answer_s "$(since "$t")"

cid() { "${compose[@]}" ps -q "$1"; }
router=$(cid router) decode=$(cid decode) prefill=$(cid prefill)
if [ -z "$router" ] || [ -z "$decode" ] || [ -z "$prefill" ]; then
  echo "FAIL: compose ps: router '$router' decode '$decode' prefill '$prefill'"
  exit 1
fi
for c in prefill decode; do
  published=$(docker port "${!c}")
  if [ -z "$published" ]; then pass "$c publishes no port"; else fail "$c publishes: $published"; fi
done
published=$(docker port "$router" | sort -u)
if [ -n "$published" ] && ! echo "$published" | grep -qv "^8000/tcp -> .*:$port\$"; then
  pass "the router publishes only 8000 (as $port): $(echo "$published" | tr '\n' ' ')"
else
  fail "the router publishes: $published"
fi

# wait_restarted CONTAINER RESTARTS SECONDS: until it runs with more than RESTARTS restarts and
# its health check passes again.
wait_restarted() {
  local c=$1 restarts=$2 end=$(($(date +%s) + $3)) state running count health
  while [ "$(date +%s)" -lt "$end" ]; do
    state=$(docker inspect -f '{{.State.Running}} {{.RestartCount}} {{.State.Health.Status}}' "$c")
    read -r running count health <<<"$state"
    [ "$running" = true ] && [ "$count" -gt "$restarts" ] && [ "$health" = healthy ] && return 0
    sleep 1
  done
  echo "container $c: $state (running, restarts, health) after the wait" >&2
  return 1
}

# --- 5. A crash of the decode worker: the restart policy ------------------------------------
restarts=$(docker inspect -f '{{.RestartCount}}' "$decode")
pid=$(docker inspect -f '{{.State.Pid}}' "$decode")
step "crash: SIGKILL of the decode container's process (host pid $pid)"
t=$(date +%s)
kill -9 "$pid"
if wait_restarted "$decode" "$restarts" 180; then
  pass "decode restarted by its policy (restart" \
    "$(docker inspect -f '{{.RestartCount}}' "$decode")) and healthy"
  record crash_restart_to_healthy_s "$(since "$t")"
  serve "after the decode crash" || fail "no answer after the decode crash"
  record crash_to_answer_s "$(since "$t")"
else
  fail "decode not restarted and healthy within 180 s of its crash"
fi

# --- 6. docker kill: a manual stop for Docker -------------------------------------------------
step "docker kill of the decode container"
t=$(date +%s)
restarts=$(docker inspect -f '{{.RestartCount}}' "$decode")
docker kill "$decode" >/dev/null || fail "docker kill $decode"
sleep 10
seen=$(docker inspect -f '{{.State.Status}} restarts={{.RestartCount}}' "$decode")
case "$seen" in
  exited*) seen="$seen: not restarted, Docker counts docker kill as a manual stop" ;;
  running*) seen="$seen: running again, restarted by the policy" ;;
esac
step "10 s after docker kill: $seen"
if [ "$(docker inspect -f '{{.State.Running}}' "$decode")" != true ]; then
  step "compose start decode"
  timeout 120 "${compose[@]}" start decode >>"$WORK/up.log" 2>&1 || fail "compose start decode"
fi
restarts_now=$(docker inspect -f '{{.RestartCount}}' "$decode")
end=$(($(date +%s) + 180))
state() { docker inspect -f '{{.State.Running}} {{.State.Health.Status}}' "$decode"; }
until [ "$(state)" = "true healthy" ] || [ "$(date +%s)" -ge "$end" ]; do sleep 1; done
if [ "$(docker inspect -f '{{.State.Health.Status}}' "$decode")" = healthy ]; then
  record kill_start_to_healthy_s "$(since "$t")"
  serve "after docker kill + compose start" || fail "no answer after docker kill"
  record kill_to_answer_s "$(since "$t")"
else
  fail "decode not healthy within 180 s of docker kill (restarts $restarts_now)"
fi

# --- 7. down -v -------------------------------------------------------------------------------
step "compose down -v"
t=$(date +%s)
timeout 120 "${compose[@]}" down -v --remove-orphans >>"$WORK/up.log" 2>&1 ||
  fail "compose down -v"
up=""
left=$(objects | sort -u)
if [ -z "$left" ]; then
  pass "down -v left no container, network or volume of $project"
else
  fail "left behind by down -v: $left"
fi
record down_s "$(since "$t")"
record total_s "$(since "$T0")"
echo "timings: ${timings[*]}"
if [ "$failures" -ne 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all passed"
