"""The NVLink deployment of deploy/ (docker-compose.nvlink.yml, k8s/nvlink,
compose/disagg-nvlink.toml): what check.py checks beyond the other deployments' checks, which it
also runs on these files (docs/deploy.md, "What CI checks")."""
import os

import topology as T
from serve_lib import SRC, check, fail, ok

DEPLOY = os.path.join(SRC, "deploy")


def check_nccl_p2p(name, services, roles, cfg):
    """What NCCL needs to connect two worker containers peer to peer (docker-compose.nvlink.yml
    says why for each): one NCCL_HOSTID, legacy CUDA IPC (NCCL_CUMEM_ENABLE=0) in the host's PID
    and IPC namespaces, unlimited memlock, and every worker's GPU visible in every worker."""
    workers = [n for n, r in roles.items() if r.role in ("prefill", "decode")]
    check(cfg[("transfer", "backend")] == "nccl", f"{name}: the TOML's backend is nccl")
    devices = {roles[n].one("--device") for n in workers}
    check(len(devices) == len(workers), f"{name}: each worker on its own GPU {sorted(devices)}")
    host_ids = set()
    for n in workers:
        svc = services[n]
        env = svc.get("environment", {})
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        host_ids.add(env.get("NCCL_HOSTID"))
        check(str(env.get("NCCL_CUMEM_ENABLE")) == "0" and svc.get("pid") == "host",
              f"{name}/{n}: legacy CUDA IPC (NCCL_CUMEM_ENABLE=0) in the host's PID namespace")
        check(svc.get("ipc") == "host", f"{name}/{n}: the host's IPC namespace (/dev/shm)")
        check(env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID",
              f"{name}/{n}: cuda:N is the N-th GPU in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID)")
        memlock = svc.get("ulimits", {}).get("memlock")
        check(memlock == -1 or (isinstance(memlock, dict) and memlock.get("soft") == -1
                                and memlock.get("hard") == -1), f"{name}/{n}: memlock unlimited")
        seen = [i for d in svc["deploy"]["resources"]["reservations"]["devices"]
                for i in d.get("device_ids", [])]
        want = sorted(str(int(d.split(":")[1])) for d in devices)
        check(sorted(seen) == want, f"{name}/{n}: sees every worker's GPU {want} (GPUs {seen})")
    check(len(host_ids) == 1 and None not in host_ids and "" not in host_ids,
          f"{name}: one NCCL_HOSTID for every worker {sorted(map(str, host_ids))}")


def check_k8s_nvlink(nvlink_text, cfg):
    """deploy/k8s/nvlink: the whole deployment in one pod, one container with two GPUs running
    `dqserve up` on the ConfigMap's TOML (= deploy/compose/disagg-nvlink.toml), so its processes'
    command lines are dqserve up's own (compared with the compose file's above)."""
    d = "k8s/nvlink"
    try:
        objects = T.kustomize(os.path.join(DEPLOY, d))
    except Exception as e:  # noqa: BLE001
        return fail(f"{d}: does not build: {e}")
    ok(f"{d}: builds ({len(objects)} objects)")
    cm = [o for o in objects if o["kind"] == "ConfigMap"]
    check(len(cm) == 1 and cm[0]["data"].get("dqserve.toml") == nvlink_text,
          f"{d}: the ConfigMap holds deploy/compose/disagg-nvlink.toml verbatim")
    pods = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    if not check(len(pods) == 1 and pods[0].get("spec", {}).get("replicas", 1) == 1,
                 f"{d}: one pod runs the deployment {[o['metadata']['name'] for o in pods]}"):
        return
    spec = pods[0]["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    check(c["command"] + c.get("args", []) == ["dqserve", "up", "--config",
                                                "/etc/dqserve/dqserve.toml"],
          f"{d}: runs dqserve up on the mounted TOML ({c['command'] + c.get('args', [])})")
    devices = {cfg[("prefill", "device")], cfg[("decode", "device")]}
    gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
    check(gpus == len(devices) and devices == {f"cuda:{i}" for i in range(len(devices))},
          f"{d}: nvidia.com/gpu {gpus} for the TOML's {sorted(devices)}")
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    check(volumes.get(mounts.get("/etc/dqserve"), {}).get("configMap", {}).get("name")
          == cm[0]["metadata"]["name"] and "/models" in mounts, f"{d}: the TOML and /models mounted")
    check(volumes.get(mounts.get("/dev/shm"), {}).get("emptyDir", {}).get("medium") == "Memory",
          f"{d}: /dev/shm is a memory volume (NCCL's shared memory)")
    check(all(p in c for p in ("startupProbe", "readinessProbe", "livenessProbe"))
          and c["readinessProbe"].get("httpGet", {}).get("path") == "/health",
          f"{d}: startup, readiness (/health) and liveness probes")
    labels = pods[0]["spec"]["template"]["metadata"]["labels"]
    svc = [o for o in objects if o["kind"] == "Service"]
    ports = [p["containerPort"] for p in c.get("ports", [])]
    check(len(svc) == 1 and svc[0]["metadata"]["name"] == "dq-router"
          and all(labels.get(k) == v for k, v in svc[0]["spec"]["selector"].items())
          and ports == [cfg[("router", "port")]] and cfg[("router", "host")] == "0.0.0.0",
          f"{d}: the dq-router Service reaches the router's port {ports} in that pod")
