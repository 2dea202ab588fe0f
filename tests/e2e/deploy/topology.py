"""Reading the container deployments of deploy/ as command lines.

- compose(): the services of docker-compose files as `docker-compose config` renders them (the
  real tool when installed, else a minimal merge of our own with the same result for our files);
- kustomize(): the objects of a kustomization (`kubectl kustomize`, else a minimal build);
- Role: one process of a deployment (router, prefill, decode) and its argv;
- to_local(): a container's argv rewritten for a loopback run of real processes, the rewrite
  docs/deploy.md lists (paths, listen addresses, ports, peers' names, GPUs -> CPU without a
  GPU)."""
import os
import re
import shutil
import subprocess

import yaml

WORKER_BINARIES = {"dq-prefill": "prefill", "dq-decode": "decode"}
ROLE_OF_BINARY = {"dq-router": "router", **WORKER_BINARIES}
CONTAINER_MODELS = "/models/"
_clean_env = None


def clean_env():
    """The environment with the variables our compose files read removed (so their defaults are
    what gets checked)."""
    global _clean_env
    if _clean_env is None:
        _clean_env = {k: v for k, v in os.environ.items()
                      if not (k.startswith("DQ_") or k.startswith("COMPOSE_")
                              or k == "CUDA_VERSION")}
    return _clean_env


def compose_tool():
    """The command that runs Compose, or None: docker-compose (v1, Debian's package), else the
    docker CLI's compose plugin when it has one."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        r = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if r.returncode == 0:
            return ["docker", "compose"]
    return None


def compose(tool, files):
    """Rendered compose config {service: dict}. With `tool`, its `config` output (which also
    validates the files against the Compose schema); raises RuntimeError when it refuses them."""
    if tool is not None:
        args = [a for f in files for a in ("-f", f)]
        r = subprocess.run([*tool, *args, "config"], capture_output=True, text=True,
                           env=clean_env(), cwd=os.path.dirname(files[0]))
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(tool)} config refused {files}: {r.stderr.strip()}")
        return yaml.safe_load(r.stdout)["services"]
    services = {}
    for f in files:
        with open(f) as fh:
            doc = _interpolate(yaml.safe_load(fh))
        for name, svc in doc["services"].items():
            if name not in services:
                services[name] = svc
                continue
            base = services[name]
            for key, value in svc.items():
                if key == "depends_on" and isinstance(base.get(key), dict):
                    base[key] = {**base[key], **value}
                else:  # command, healthcheck, deploy, ... : what the tools do for our files
                    base[key] = value
    # Bind mounts are relative to the first file's folder.
    root = os.path.dirname(os.path.abspath(files[0]))
    for svc in services.values():
        svc["volumes"] = [os.path.normpath(os.path.join(root, v)) if v.startswith(".") else v
                          for v in svc.get("volumes", [])]
    return services


def _interpolate(node):
    if isinstance(node, dict):
        return {k: _interpolate(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v) for v in node]
    if isinstance(node, str):
        return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}",
                      lambda m: clean_env().get(m.group(1)) or (m.group(2) or ""), node)
    return node


def kustomize(directory):
    """The objects `kubectl kustomize DIR` builds (a minimal build of our own without kubectl:
    resources, and strategic-merge patches, from a file or inline: replicas, a container's args,
    a Service's selector, a ConfigMap's data, `$patch: delete`)."""
    if shutil.which("kubectl"):
        r = subprocess.run(["kubectl", "kustomize", directory], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"kubectl kustomize {directory}: {r.stderr.strip()}")
        return [d for d in yaml.safe_load_all(r.stdout) if d]
    return _build(directory)


def _build(directory):
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        k = yaml.safe_load(f)
    objects = []
    for res in k.get("resources", []):
        path = os.path.join(directory, res)
        if os.path.isdir(path):
            objects += _build(path)
        else:
            with open(path) as f:
                objects += [d for d in yaml.safe_load_all(f) if d]
    for p in k.get("patches", []):
        if "path" in p:
            with open(os.path.join(directory, p["path"])) as f:
                patch = yaml.safe_load(f)
        else:
            patch = yaml.safe_load(p["patch"])
        target = next(o for o in objects if o["kind"] == patch["kind"]
                      and o["metadata"]["name"] == patch["metadata"]["name"])
        if patch.get("$patch") == "delete":
            objects.remove(target)
        else:
            _merge(target, patch)
    return objects


def _merge(target, patch):
    for key, value in patch.items():
        if key == "containers":
            for c in value:
                _merge(next(t for t in target[key] if t["name"] == c["name"]), c)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


class Role:
    """One process of a deployment: its name (compose service, k8s pod), role and argv."""

    def __init__(self, name, argv):
        self.name = name
        self.argv = [str(a) for a in argv]
        self.binary = os.path.basename(self.argv[0])
        self.role = ROLE_OF_BINARY.get(self.binary)

    def pairs(self):
        """[(flag, value)]: every flag of our binaries takes one value."""
        a = self.argv[1:]
        if len(a) % 2 or not all(f.startswith("--") for f in a[::2]):
            raise ValueError(f"{self.name}: not --flag value pairs: {a}")
        return list(zip(a[::2], a[1::2]))

    def get(self, flag):
        return [v for f, v in self.pairs() if f == flag]

    def one(self, flag):
        v = self.get(flag)
        if len(v) != 1:
            raise ValueError(f"{self.name}: {flag} given {len(v)} times")
        return v[0]


def compose_roles(services):
    return {name: Role(name, svc["command"]) for name, svc in services.items()}


def k8s_roles(objects):
    """{pod name: Role}: one per replica of each Deployment/StatefulSet (a StatefulSet's pods are
    NAME-0, NAME-1, ...; a Deployment's single replica is named after the Deployment)."""
    roles = {}
    for o in objects:
        if o["kind"] not in ("Deployment", "StatefulSet"):
            continue
        (c,) = o["spec"]["template"]["spec"]["containers"]
        replicas = o["spec"].get("replicas", 1)
        names = ([f"{o['metadata']['name']}-{i}" for i in range(replicas)]
                 if o["kind"] == "StatefulSet" else [o["metadata"]["name"]])
        for n in names:
            roles[n] = Role(n, [*c["command"], *c.get("args", [])])
    return roles


def local_device(device):
    """The device a loopback run uses for a container's --device: the same with DQ_DEPLOY_GPU=1
    (a CUDA build on a GPU machine: every container's GPU is its cuda:0, so all share GPU 0
    here), else the CPU (CI has no GPU and builds without CUDA)."""
    if os.environ.get("DQ_DEPLOY_GPU") == "1" or not device.startswith("cuda"):
        return device
    return "cpu"


def to_local(role, ports, resolve, transfer_host_of, models_dir, bin_dir=None,
             device=local_device):
    """A container's argv for a loopback run: /models/ -> models_dir, listen on 127.0.0.1 (not
    0.0.0.0), --port -> ports[role.name] (or ports["router-grpc"]), a peer address NAME:PORT ->
    127.0.0.1:ports[resolve(NAME)], the decode worker's --transfer-host (which must be what
    transfer_host_of(name) says: its service name, the pod IP) -> 127.0.0.1, --device ->
    device() (default local_device(); the identity where nothing runs). bin_dir: the binary's
    folder (None: keep its bare name). Raises ValueError on anything unexpected."""
    out = [os.path.join(bin_dir, role.binary) if bin_dir else role.binary]
    for flag, value in role.pairs():
        if value.startswith(CONTAINER_MODELS):
            value = os.path.join(models_dir, value[len(CONTAINER_MODELS):])
        if flag == "--host":
            value = "127.0.0.1" if value == "0.0.0.0" else value
        elif flag == "--port":
            value = str(ports[role.name])
        elif flag == "--grpc-port" and value != "0":
            value = str(ports["router-grpc"])
        elif flag in ("--prefill", "--decode"):
            host, _, _ = value.rpartition(":")
            peer = resolve(host)
            if peer not in ports:
                raise ValueError(f"{flag} {value} names no {flag[2:]} worker of this deployment")
            value = f"127.0.0.1:{ports[peer]}"
        elif flag == "--device":
            value = device(value)
        elif flag == "--transfer-host":
            if value != transfer_host_of(role.name):
                raise ValueError(f"--transfer-host {value}, want {transfer_host_of(role.name)}")
            value = "127.0.0.1"
        out += [flag, value]
    return out
