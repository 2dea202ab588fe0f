"""The container deployments of deploy/ without a container engine (docs/deploy.md, "What CI
checks"):
1. docker-compose.yml and the two-decode override validate (`docker-compose config`) and are
   wired as meant: GPUs, health checks on each role's port, depends_on healthy, published router
   port, the TOML and model mounts, a restart policy;
2. the k8s kustomizations build; the ConfigMap holds deploy/compose/disagg.toml verbatim; GPU
   limits, probes, the decode pods' DNS names in the router's args;
3. the Dockerfile installs scripts/setup.sh's packages and the binaries; runtime-libs.sh finds
   the packages of the CPU build's libraries;
4. every container's command line is what `dqserve up --config deploy/compose/disagg.toml`
   gives that child, up to the listed network changes: compared with the argv of the children
   of a real `dqserve up` (read from /proc);
5. the compose topologies (1 and 2 decode workers) run as real processes on loopback from those
   command lines, answer a completion exactly as `dqserve up` did, and stop on SIGTERM, leaving no
   process behind.
The workers' GPUs (--device cuda:0, `device = "cuda:0"`) become the CPU for the loopback runs
(4 and 5) unless DQ_DEPLOY_GPU=1 (a CUDA build on a GPU machine; topology.local_device).
The NVLink deployment (docker-compose.nvlink.yml, deploy/compose/disagg-nvlink.toml: nccl, two
GPUs) gets 1 and 4 (plus the settings NCCL needs between its containers), with its command lines
compared unchanged, GPUs and transport included, with `dqserve up --print-commands` on its TOML
(which 4 checks against the argv a real `dqserve up` runs): nccl cannot run without GPUs, so 5 is
tests/gpu/deploy_nvlink_test.sh's, on a two-GPU machine."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
sys.path.insert(0, HERE)
import serve_lib  # noqa: E402
import nvlink  # noqa: E402
import topology as T  # noqa: E402
from serve_lib import (BIN, SRC, check, fail, finish, free_port, ok, post_json,  # noqa: E402
                       request, wait_port)

DEPLOY = os.path.join(SRC, "deploy")
TOML = os.path.join(DEPLOY, "compose", "disagg.toml")
NVLINK_TOML = os.path.join(DEPLOY, "compose", "disagg-nvlink.toml")
CPU_TOML = os.path.join(DEPLOY, "compose", "disagg-cpu.toml")
CPU = [os.path.join(DEPLOY, "docker-compose.yml")]  # runs in Docker: deploy/compose_cpu_test.sh
BASE = CPU + [os.path.join(DEPLOY, "docker-compose.gpu.yml")]
TWO_DECODE = BASE + [os.path.join(DEPLOY, "docker-compose.two-decode.yml")]
NVLINK = [os.path.join(DEPLOY, "docker-compose.nvlink.yml")]
MODELS = os.path.join(SRC, "models")
PROMPT = "What is the capital of France?"
ANSWER_WORD = "Paris"
# Where each deployment puts its workers: compose service -> GPUs its container sees.
GPUS = {"prefill": ["0"], "decode": ["1"], "decode-1": ["2"]}
NVLINK_GPUS = {"prefill": ["0", "1"], "decode": ["0", "1"]}  # both see both (NCCL P2P)
WORK = tempfile.mkdtemp(prefix="dq-deploy-")  # logs; removed when everything passed


def toml_values(text):
    """{(table, key): value} of the flat deployment TOML ("" = top level)."""
    out, table = {}, ""
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip() if not line.strip().startswith("#") else ""
        if m := re.fullmatch(r"\[(\w+)\]", line):
            table = m.group(1)
        elif m := re.fullmatch(r'(\w+)\s*=\s*(?:"([^"]*)"|(\d+))', line):
            out[(table, m.group(1))] = m.group(2) if m.group(2) is not None else int(m.group(3))
    return out


def local_toml(text, ports, device=T.local_device):
    """The deployment TOML for a loopback `dqserve up`: models from models/, 127.0.0.1, the
    given ports and device()'s devices (the same rewrite topology.to_local applies to the
    containers' command lines)."""
    out, table = [], ""
    for line in text.splitlines():
        if m := re.fullmatch(r"\[(\w+)\]\s*", line):
            table = m.group(1)
        line = line.replace('"' + T.CONTAINER_MODELS, '"' + MODELS + "/")
        line = re.sub(r'^host = "0\.0\.0\.0"', 'host = "127.0.0.1"', line)
        line = re.sub(r'^device = "([^"]*)"', lambda m: f'device = "{device(m.group(1))}"',
                      line)
        if re.match(r"port\s*=", line):
            line = f"port = {ports[table]}"
        elif re.match(r"grpc_port\s*=\s*[1-9]", line):
            line = f"grpc_port = {ports['router-grpc']}"
        out.append(line)
    return "\n".join(out) + "\n"


def children_of(pid):
    kids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(p))
        except (OSError, ValueError, IndexError):
            pass
    return kids


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ask(port):
    status, body = post_json(port, "/v1/chat/completions", {
        "model": served_name(port), "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 16, "temperature": 0})
    if status != 200:
        return f"HTTP {status}: {body}"
    return body["choices"][0]["message"]["content"]


def served_name(port):
    return json.loads(request("GET", port, "/v1/models")[2])["data"][0]["id"]


def health(port):
    status, _, raw = request("GET", port, "/health", timeout=5)
    return status, json.loads(raw)


def wait_healthy(port, workers, timeout=60):
    """Until /health is 200 with `workers` workers all serving."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            status, h = health(port)
            serving = [w for w in h.get("workers", []) if w.get("status") == "serving"]
            if status == 200 and len(serving) == workers:
                return h
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"router on {port}: not {workers} healthy workers in {timeout} s")


# ---------------------------------------------------------------------------------------------
# 4. The reference: what `dqserve up` starts from the TOML.

def reference(toml_text, ports):
    """Runs `dqserve up` on the loopback version of the TOML; returns ({role: Role}, answer)."""
    path = os.path.join(WORK, "dqserve.toml")
    with open(path, "w") as f:
        f.write(local_toml(toml_text, ports))
    log_path = os.path.join(WORK, "dqserve-up.log")
    with open(log_path, "wb") as log:
        up = subprocess.Popen([os.path.join(BIN, "dqserve"), "up", "--config", path], stdout=log,
                              stderr=subprocess.STDOUT, env=T.clean_env())

    def output():
        with open(log_path, errors="replace") as f:
            return f.read()
    try:
        end = time.time() + 120
        while "dqserve: serving" not in output():
            if up.poll() is not None or time.time() > end:
                raise RuntimeError("dqserve up did not start: " + output()[-3000:])
            time.sleep(0.1)
        roles = {}
        pids = children_of(up.pid)
        for pid in pids:
            with open(f"/proc/{pid}/cmdline") as f:
                r = T.Role("?", f.read().split("\0")[:-1])
            r.name = r.role
            roles[r.role] = r
        answer = ask(ports["router"])
    finally:
        up.send_signal(signal.SIGINT)
        rc = up.wait(timeout=30)
    check(rc == 0, f"dqserve up stopped on SIGINT (exit {rc})")
    check(sorted(roles) == ["decode", "prefill", "router"],
          f"dqserve up started router, prefill and decode: {sorted(roles)}")
    check(not [p for p in pids if alive(p)], "dqserve up left no child behind")
    printed = print_commands(path)
    check({r: v.argv for r, v in printed.items()} == {r: v.argv for r, v in roles.items()},
          "dqserve up --print-commands prints the argv dqserve up runs")
    return roles, answer


def print_commands(path):
    """{role: Role} from `dqserve up --config PATH --print-commands` (starts nothing)."""
    r = subprocess.run([os.path.join(BIN, "dqserve"), "up", "--config", path, "--print-commands"],
                       capture_output=True, text=True, env=T.clean_env(), timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"dqserve up --print-commands: exit {r.returncode}: {r.stderr}")
    roles = {}
    for line in r.stdout.splitlines():
        child = json.loads(line)
        role = T.Role(child["name"], child["argv"])
        roles[role.role] = role
    return roles


def printed_reference(toml_text, ports, name):
    """The children `dqserve up` would run for a TOML it cannot run here (nccl needs GPUs): its
    --print-commands on the loopback version, devices kept."""
    path = os.path.join(WORK, f"{name}.toml")
    with open(path, "w") as f:
        f.write(local_toml(toml_text, ports, device=lambda d: d))
    roles = print_commands(path)
    check(sorted(roles) == ["decode", "prefill", "router"],
          f"{name}: dqserve up --print-commands lists router, prefill and decode {sorted(roles)}")
    return roles


def same_command(what, local, ref, extra=()):
    """The loopback argv of a container == the reference's (+ extra pairs), as flag/value
    pairs (order is irrelevant to the binaries; repetition is not)."""
    got = sorted(T.Role(what, local).pairs())
    want = sorted(ref.pairs() + list(extra))
    if os.path.basename(local[0]) != ref.binary:
        return fail(f"{what}: runs {local[0]}, dqserve up runs {ref.binary}")
    missing = [p for p in want if p not in got]
    added = [p for p in got if p not in want]
    check(got == want, f"{what}: the flags dqserve up gives {ref.binary}"
          + ("" if got == want else f"; dqserve up gives {missing}, the file {added}"))


# ---------------------------------------------------------------------------------------------
# 1. Compose.

def volume_target(v):
    if isinstance(v, dict):
        return v.get("source"), v.get("target"), bool(v.get("read_only"))
    parts = v.split(":")
    return parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")


def check_compose(name, services, roles, cfg, toml=TOML, gpus_of=GPUS):
    workers = [n for n, r in roles.items() if r.role in ("prefill", "decode")]
    router = next(n for n, r in roles.items() if r.role == "router")
    images = {s.get("image") for s in services.values()}
    check(len(images) == 1, f"{name}: every service runs one image {images}")
    for n, svc in services.items():
        r = roles[n]
        mounts = {volume_target(v)[1]: volume_target(v) for v in svc.get("volumes", [])}
        toml_mount = mounts.get("/etc/dqserve/dqserve.toml")
        check(toml_mount is not None and os.path.realpath(toml_mount[0]) == toml
              and toml_mount[2], f"{name}/{n}: {os.path.relpath(toml, SRC)} mounted read-only")
        check("/models" in mounts and mounts["/models"][2], f"{name}/{n}: /models read-only")
        # The worker key and TLS between the router and the workers (deploy/make-worker-tls.sh)
        # as compose secrets, the variables pointing at them.
        env = svc.get("environment", {})
        want_env = {"DQ_WORKER_KEY_FILE": "dq_worker_key"}
        want_env.update({"DQ_WORKER_TLS_CA": "dq_worker_tls_cert"} if r.role == "router" else
                        {"DQ_WORKER_TLS_CERT": "dq_worker_tls_cert",
                         "DQ_WORKER_TLS_KEY": "dq_worker_tls_key"})
        secrets = {x.get("source") if isinstance(x, dict) else x for x in svc.get("secrets", [])}
        check(all(env.get(k) == f"/run/secrets/{v}" and v in secrets
                  for k, v in want_env.items()),
              f"{name}/{n}: worker key and TLS from the secrets {sorted(want_env.values())}")
        check(svc.get("restart") in ("unless-stopped", "always", "on-failure"),
              f"{name}/{n}: restart policy {svc.get('restart')}")
        devices = (svc.get("deploy", {}).get("resources", {}).get("reservations", {})
                   .get("devices", []))
        gpus = [i for d in devices if "gpu" in d.get("capabilities", []) for i in
                d.get("device_ids", [])]
        check(gpus == gpus_of.get(n, []), f"{name}/{n}: GPUs {gpus} (want {gpus_of.get(n, [])})")
        test = " ".join(svc.get("healthcheck", {}).get("test", []))
        port = r.one("--port")
        want = (f"http://127.0.0.1:{port}/health" if r.role == "router"
                else f"/dev/tcp/127.0.0.1/{port}")
        check(want in test, f"{name}/{n}: health check probes {want} ({test})")
    r = roles[router]
    deps = services[router].get("depends_on", {})
    check(sorted(deps) == sorted(workers) and all(
        d.get("condition") == "service_healthy" for d in deps.values()),
        f"{name}: the router waits for {sorted(deps)} to be healthy")
    published = [str(p.get("target")) if isinstance(p, dict) else p.split(":")[-1]
                 for p in services[router].get("ports", [])]
    check(published == [r.one("--port")], f"{name}: the router's port is published {published}")
    check(sorted(r.get("--decode")) == sorted(f"{w}:{cfg[('decode', 'port')]}"
                                              for w in workers if roles[w].role == "decode")
          and r.get("--prefill") == [f"prefill:{cfg[('prefill', 'port')]}"],
          f"{name}: the router is given every worker {r.get('--prefill') + r.get('--decode')}")
    for n in workers:
        check(roles[n].one("--host") == "0.0.0.0", f"{name}/{n}: listens on 0.0.0.0")
        # The TOML's device: cuda:0 where the container sees only the GPU it reserves; the
        # host's numbering where it sees them all (nvlink).
        role = roles[n].role
        check(roles[n].one("--device") == cfg[(role, "device")],
              f"{name}/{n}: computes on the TOML's {cfg[(role, 'device')]} "
              f"(--device {roles[n].one('--device')})")
        flag = "--transport" if role == "decode" else "--transports"
        check(roles[n].get(flag) == [cfg[("transfer", "backend")]],
              f"{name}/{n}: {flag} {roles[n].get(flag)} is the TOML's backend")
        check(int(roles[n].one("--port")) == cfg[(roles[n].role, "port")],
              f"{name}/{n}: port {roles[n].one('--port')} is the TOML's")
    check(r.one("--host") == cfg[("router", "host")] and
          int(r.one("--port")) == cfg[("router", "port")],
          f"{name}: the router listens on the TOML's {r.one('--host')}:{r.one('--port')}")


def compose_resolver(roles):
    return lambda host: host if host in roles else None


def compare_with_reference(name, roles, ref, ref_ports, resolve, transfer_host_of,
                           device=T.local_device):
    ports = {n: ref_ports[r.role] for n, r in roles.items()}
    ports["router-grpc"] = ref_ports.get("router-grpc")
    decodes = [n for n, r in roles.items() if r.role == "decode"]
    for n, r in roles.items():
        try:
            local = T.to_local(r, ports, resolve, transfer_host_of, MODELS, device=device)
        except (ValueError, KeyError) as e:
            fail(f"{name}/{n}: {e}")
            continue
        local = [a for i, a in enumerate(local)
                 if not (a == "--transfer-host" or (i and local[i - 1] == "--transfer-host"))]
        # Extra decode workers: the router names each (all at the decode port here).
        extra = ([("--decode", f"127.0.0.1:{ref_ports['decode']}")] * (len(decodes) - 1)
                 if r.role == "router" else [])
        same_command(f"{name}/{n}", local, ref[r.role], extra)
    for n in decodes:
        check(roles[n].get("--transfer-host") == [transfer_host_of(n)],
              f"{name}/{n}: the KV listener is advertised as {transfer_host_of(n)}")


# ---------------------------------------------------------------------------------------------
# 5. Running a compose topology as processes.

def run_topology(name, roles, resolve, transfer_host_of, answer):
    ports = {n: free_port() for n in roles}
    ports["router-grpc"] = free_port()
    logdir = os.path.join(WORK, name)
    os.makedirs(logdir)
    procs = {}
    order = sorted(roles, key=lambda n: ["decode", "prefill", "router"].index(roles[n].role))
    router = order[-1]
    try:
        for n in order:
            argv = T.to_local(roles[n], ports, resolve, transfer_host_of, MODELS, BIN)
            if n == router:
                for w in order[:-1]:
                    wait_port(ports[w], procs[w])
                argv += ["--health-interval-ms", "200"]
            with open(os.path.join(logdir, f"{n}.log"), "wb") as log:
                procs[n] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=T.clean_env())
        wait_port(ports[router], procs[router])
        h = wait_healthy(ports[router], len(roles) - 1)
        ok(f"{name}: /health 200 with {len(h['workers'])} workers serving")
        for i in range(2):
            got = ask(ports[router])
            check(got == answer and ANSWER_WORD in got,
                  f"{name}: completion {i + 1} {got!r} (dqserve up: {answer!r})")
    except Exception as e:  # noqa: BLE001 - report and go on to the stop check
        fail(f"{name}: {e}")
        for n in procs:
            with open(os.path.join(logdir, f"{n}.log"), errors="replace") as f:
                print(f"--- {n} ---\n{f.read()[-2000:]}")
    # Stop in reverse dependency order, as compose does; each has the stop grace period.
    for n in reversed(order):
        if n in procs and procs[n].poll() is None:
            procs[n].send_signal(signal.SIGTERM)
    for n, p in procs.items():
        try:
            rc = p.wait(timeout=15)
            check(rc == 0, f"{name}/{n}: exited {rc} on SIGTERM")
        except subprocess.TimeoutExpired:
            fail(f"{name}/{n}: still running 15 s after SIGTERM")
            p.kill()
            p.wait()
    check(not [n for n, p in procs.items() if alive(p.pid)], f"{name}: no process left")


# ---------------------------------------------------------------------------------------------
# 2. Kubernetes, 3. the Dockerfile.

def check_network_policy(d, objects):
    """Only the router reaches the workers' gRPC, only prefill pods the decode pods' KV port."""
    def component(sel):
        return sel.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")

    allowed = {}
    for o in objects:
        if o["kind"] != "NetworkPolicy":
            continue
        target = o["spec"]["podSelector"]["matchLabels"].get("app.kubernetes.io/component")
        check("Ingress" in o["spec"].get("policyTypes", []), f"{d}/{o['metadata']['name']}: ingress")
        for rule in o["spec"].get("ingress", []):
            peers = [component(f) for f in rule.get("from", [])]
            ports = [p.get("port") for p in rule.get("ports", [])] or ["any"]
            for peer in peers:
                allowed.setdefault(target, set()).update((peer, port) for port in ports)
    check(allowed.get("decode") == {("router", 9102), ("prefill", "any")},
          f"{d}: decode pods take gRPC from the router and KV from prefill pods only "
          f"({sorted(map(str, allowed.get('decode', [])))})")
    check(allowed.get("prefill") == {("router", 9101)},
          f"{d}: prefill pods take gRPC from the router only ({allowed.get('prefill')})")


def check_k8s(toml_text, ref, ref_ports, cfg):
    for d, decodes in (("k8s", 1), ("k8s/two-decode", 2)):
        try:
            objects = T.kustomize(os.path.join(DEPLOY, d))
        except Exception as e:  # noqa: BLE001
            fail(f"{d}: does not build: {e}")
            continue
        ok(f"{d}: builds ({len(objects)} objects)")
        kinds = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        cm = [o for o in objects if o["kind"] == "ConfigMap"]
        check(len(cm) == 1 and cm[0]["data"].get("dqserve.toml") == toml_text,
              f"{d}: the ConfigMap holds deploy/compose/disagg.toml verbatim")
        check_network_policy(d, objects)
        roles = T.k8s_roles(objects)
        by_role = {}
        for n, r in roles.items():
            by_role.setdefault(r.role, []).append(n)
        check(len(by_role.get("decode", [])) == decodes and len(by_role.get("prefill", [])) == 1
              and len(by_role.get("router", [])) == 1,
              f"{d}: pods {sorted(roles)}")
        sts = kinds.get(("StatefulSet", "dq-decode"))
        headless = kinds.get(("Service", "dq-decode"))
        check(sts is not None and headless is not None and sts["spec"]["serviceName"] ==
              "dq-decode" and headless["spec"].get("clusterIP") == "None",
              f"{d}: decode pods named through the headless Service dq-decode")
        for o in objects:
            if o["kind"] not in ("Deployment", "StatefulSet"):
                continue
            (c,) = o["spec"]["template"]["spec"]["containers"]
            role = T.ROLE_OF_BINARY.get(c["command"][0])
            gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            check(gpus == (None if role == "router" else 1),
                  f"{d}/{o['metadata']['name']}: nvidia.com/gpu {gpus}")
            if role != "router":
                device = T.Role(o["metadata"]["name"], [*c["command"], *c.get("args", [])])
                check(device.get("--device") == ["cuda:0"],
                      f"{d}/{o['metadata']['name']}: computes on its pod's GPU "
                      f"(--device {device.get('--device')})")
            check("readinessProbe" in c and "livenessProbe" in c,
                  f"{d}/{o['metadata']['name']}: readiness and liveness probes")
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            check("/models" in mounts and "/etc/dqserve" in mounts,
                  f"{d}/{o['metadata']['name']}: /models and the config mounted")
            # TLS with the router from the optional secret dqserve-worker-tls, inline PEM.
            refs = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {})
                    for e in c.get("env", [])}
            want = ({"DQ_WORKER_TLS_CA_PEM": "worker.pem"} if role == "router" else
                    {"DQ_WORKER_TLS_CERT_PEM": "worker.pem", "DQ_WORKER_TLS_KEY_PEM": "worker.key"})
            check(all(refs.get(k, {}).get("name") == "dqserve-worker-tls"
                      and refs[k].get("key") == v and refs[k].get("optional") for k, v in
                      want.items()),
                  f"{d}/{o['metadata']['name']}: {', '.join(want)} from the optional secret "
                  "dqserve-worker-tls")
        resolve = lambda host: (host if host == "dq-prefill" else  # noqa: E731
                                f"dq-decode-{m.group(1)}"
                                if (m := re.fullmatch(r"dq-decode-(\d+)\.dq-decode", host))
                                else None)
        compare_with_reference(d, roles, ref, ref_ports, resolve, lambda n: "$(POD_IP)")


def setup_packages():
    with open(os.path.join(SRC, "scripts", "setup.sh")) as f:
        m = re.search(r"^packages=\((.*?)\)", f.read(), re.S | re.M)
    return set(re.sub(r"#.*", "", m.group(1)).split())


def check_dockerfile():
    path = os.path.join(DEPLOY, "docker", "Dockerfile")
    with open(path) as f:
        text = f.read()
    build = text.split("FROM ", 2)[1]
    m = re.search(r"apt-get install[^\n]*\\\n((?:[^\n]*\\\n)*?)\s*&&", build)
    listed = set(m.group(1).replace("\\", " ").split()) if m else set()
    # Host-only CI tools and the tests' judges (python3-jsonschema) are not needed to build.
    wanted = setup_packages() - {"docker-compose", "docker.io", "debootstrap",
                                 "python3-jsonschema"}
    check(listed == wanted, "Dockerfile: the build stage installs scripts/setup.sh's packages"
          + ("" if listed == wanted else f" (missing {sorted(wanted - listed)}, extra "
                                         f"{sorted(listed - wanted)})"))
    check(re.search(r"^ARG BASE_BUILD=nvidia/cuda:\$\{CUDA_VERSION\}-devel-\$\{UBUNTU\}$", text,
                    re.M) and re.search(r"^ARG CUDA_VERSION=13\.", text, re.M)
          and re.search(r"^ARG BASE_RUNTIME=nvidia/cuda:\$\{CUDA_VERSION\}-runtime-\$\{UBUNTU\}$",
                        text, re.M) and re.search(r"^FROM \$\{BASE_BUILD\} AS build$", text, re.M)
          and re.search(r"^FROM \$\{BASE_RUNTIME\} AS runtime$", text, re.M),
          "Dockerfile: CUDA 13 devel build, runtime image by default")
    targets = re.search(r'^ARG DQ_TARGETS="([^"]*)"', text, re.M)
    check(targets and set(targets.group(1).split()) == {
        "dqserve", "dq-router", "dq-prefill", "dq-decode", "dq-tool"},
        "Dockerfile: builds and ships dqserve, dq-router, dq-prefill, dq-decode, dq-tool")
    check(re.search(r"^ARG DQ_PRESET=release-cuda$", text, re.M) and "--preset ${DQ_PRESET}" in text,
          "Dockerfile: builds the release-cuda preset by default")
    check(re.search(r"^USER 10001", text, re.M), "Dockerfile: runs as uid 10001")
    # (build/docker-prebuilt/: staged by build-image.sh --prebuilt; ${DQ_CONFIG}: a TOML)
    for src in re.findall(r"^COPY (?!--from)(?!build/docker-prebuilt/)([^$\s]+) ", text, re.M):
        check(os.path.exists(os.path.join(SRC, src)), f"Dockerfile: COPY {src} exists")
    check(os.path.exists(path + ".dockerignore"), "Dockerfile.dockerignore exists")
    binaries = [os.path.join(BIN, b) for b in targets.group(1).split()] if targets else []
    tool = os.path.join(DEPLOY, "docker", "runtime-libs.sh")
    r = subprocess.run(["bash", tool, "packages", *binaries], capture_output=True, text=True)
    pkgs = r.stdout.split()
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\n", *pkgs],
                               capture_output=True, text=True).stdout.split() if pkgs else []
    check(r.returncode == 0 and any(p.startswith("libgrpc++") for p in pkgs)
          and sorted(installed) == sorted(pkgs),
          f"runtime-libs.sh packages: {len(pkgs)} installed packages ({' '.join(pkgs)}) "
          f"{r.stderr.strip()}")
    r = subprocess.run(["bash", tool, "check", *binaries], capture_output=True, text=True)
    check(r.returncode == 0, f"runtime-libs.sh check passes on the CPU build {r.stderr.strip()}")


def main():
    with open(TOML) as f:
        toml_text = f.read()
    cfg = toml_values(toml_text)
    tool = T.compose_tool()
    if tool is None:
        print("skip: docker-compose is not installed (scripts/setup.sh installs it); the compose "
              "files are read without its validation")
    topologies = {}
    with open(CPU_TOML) as f:
        cpu_cfg = toml_values(f.read())
    cpu_roles = None
    try:
        services = T.compose(tool, CPU)
        cpu_roles = T.compose_roles(services)
        check_compose("compose-cpu", services, cpu_roles, cpu_cfg, CPU_TOML, {})
        # disagg-cpu.toml is disagg.toml with the workers on the CPU (so the loopback reference
        # of disagg.toml, which runs on the CPU, is its reference too).
        check({k: v for k, v in cpu_cfg.items() if k[1] != "device"} ==
              {k: v for k, v in cfg.items() if k[1] != "device"},
              "disagg-cpu.toml is disagg.toml but for the devices")
    except RuntimeError as e:
        fail(str(e))
    for name, files in (("compose", BASE), ("compose-two-decode", TWO_DECODE)):
        try:
            services = T.compose(tool, files)
        except RuntimeError as e:
            fail(str(e))
            continue
        if tool is not None:
            names = [os.path.basename(f) for f in files]
            ok(f"{name}: `{' '.join(tool)} config` validates {names}")
        roles = T.compose_roles(services)
        check_compose(name, services, roles, cfg)
        topologies[name] = roles

    with open(NVLINK_TOML) as f:
        nvlink_text = f.read()
    nvlink_cfg = toml_values(nvlink_text)
    nvlink_roles = None
    try:
        services = T.compose(tool, NVLINK)
        if tool is not None:
            ok(f"compose-nvlink: `{' '.join(tool)} config` validates {os.path.basename(NVLINK[0])}")
        nvlink_roles = T.compose_roles(services)
        check_compose("compose-nvlink", services, nvlink_roles, nvlink_cfg, NVLINK_TOML,
                      NVLINK_GPUS)
        nvlink.check_nccl_p2p("compose-nvlink", services, nvlink_roles, nvlink_cfg)
    except RuntimeError as e:
        fail(str(e))

    check_dockerfile()

    ref_ports = {"router": free_port(), "prefill": free_port(), "decode": free_port(),
                 "router-grpc": free_port()}
    ref, answer = reference(toml_text, ref_ports)
    check(ANSWER_WORD in answer, f"dqserve up answers {answer!r}")
    transfer = lambda n: n  # noqa: E731 - compose: a decode worker advertises its service name
    for name, roles in topologies.items():
        compare_with_reference(name, roles, ref, ref_ports, compose_resolver(roles), transfer)
    if cpu_roles is not None:
        compare_with_reference("compose-cpu", cpu_roles, ref, ref_ports,
                               compose_resolver(cpu_roles), transfer)
    if nvlink_roles is not None:
        # nccl cannot run here: the children dqserve up would start, GPUs and transport as the
        # TOML says (the rewrite keeps --device).
        nvlink_ref = printed_reference(nvlink_text, ref_ports, "compose-nvlink")
        compare_with_reference("compose-nvlink", nvlink_roles, nvlink_ref, ref_ports,
                               compose_resolver(nvlink_roles), transfer, device=lambda d: d)
    check_k8s(toml_text, ref, ref_ports, cfg)
    nvlink.check_k8s_nvlink(nvlink_text, nvlink_cfg)
    for name, roles in topologies.items():
        run_topology(name, roles, compose_resolver(roles), transfer, answer)
    if serve_lib.failures == 0:
        shutil.rmtree(WORK, ignore_errors=True)
    else:
        print(f"logs in {WORK}")
    finish()


if __name__ == "__main__":
    main()
