"""grpc.health.v1.Health and server reflection on the router's gRPC server and on both workers
(proto/grpc_standard_services.h), real processes on loopback, with a worker key and an API key:
- Check "" and the server's own service name say SERVING; an unknown service is NOT_FOUND.
- Both are exempt from the keys (docs/serving.md), the servers' own RPCs are not: a worker's
  dqserve.v1 Health without the worker key is UNAUTHENTICATED, the router's Models without the
  API key too.
- Reflection lists every service and serves their descriptors; a message built from the
  reflected descriptors (what grpcurl does) calls the router's Models.
- A draining decode worker (SIGTERM, a long stream running) tells its Watch caller NOT_SERVING;
  the router, with no live decode worker left, turns NOT_SERVING too."""
import os
import signal
import threading
import time

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase)

from serve_lib import TINY, Deployment, check, finish, free_port, run_main, stream, wait_until

WORKER_KEY = "grpc-health-worker-key"
API_KEY = "grpc-health-api-key"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
OWN = {"router": "dqserve.v1.DqServe", "prefill0": "dqserve.v1.PrefillWorker",
       "decode0": "dqserve.v1.DecodeWorker"}


def check_health(name, channel):
    stub = health_pb2_grpc.HealthStub(channel)
    # The router publishes what its worker probes found, polled every 250 ms.
    wait_until(lambda: stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING, 5)
    for service in ("", OWN[name]):
        r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        check(r.status == SERVING, f"{name}: Check({service!r}) without a key: SERVING")
    try:
        stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
        check(False, f"{name}: Check of an unknown service fails")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.NOT_FOUND, f"{name}: unknown service NOT_FOUND: "
              f"{e.code()}")


def check_reflection(name, channel):
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    want = {OWN[name], "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
    check(want <= services, f"{name}: reflection lists {sorted(want)}: {sorted(services)}")
    pool = descriptor_pool.DescriptorPool(db)
    svc = pool.FindServiceByName(OWN[name])
    methods = {m.name for m in svc.methods}
    expected = {"router": {"Generate", "Abort", "Models", "Health"},
                "prefill0": {"Prefill", "Health"}, "decode0": {"Reserve", "Decode", "Health"}}
    check(expected[name] <= methods, f"{name}: {OWN[name]}'s methods from reflection: "
          f"{sorted(methods)}")
    return pool, svc


def raw_call(channel, path, key, timeout=5):
    """A unary call with an empty request: the status code (OK or the error's)."""
    call = channel.unary_unary(path)
    md = [("authorization", f"Bearer {key}")] if key else []
    try:
        call(b"", metadata=md, timeout=timeout)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def check_auth(name, channel):
    path = f"/{OWN[name]}/" + ("Models" if name == "router" else "Health")
    key = API_KEY if name == "router" else WORKER_KEY
    check(raw_call(channel, path, None) == grpc.StatusCode.UNAUTHENTICATED,
          f"{name}: {path} without a key is UNAUTHENTICATED")
    check(raw_call(channel, path, "wrong") == grpc.StatusCode.UNAUTHENTICATED,
          f"{name}: {path} with a wrong key is UNAUTHENTICATED")
    check(raw_call(channel, path, key) == grpc.StatusCode.OK, f"{name}: {path} with the key: OK")


def check_reflected_call(pool, svc, channel, model_name):
    """Like grpcurl: request and response classes from the reflected descriptors only."""
    method = svc.FindMethodByName("Models")
    req_cls = message_factory.GetMessageClass(method.input_type)
    resp_cls = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(f"/{svc.full_name}/Models",
                               request_serializer=req_cls.SerializeToString,
                               response_deserializer=resp_cls.FromString)
    r = call(req_cls(), metadata=[("authorization", f"Bearer {API_KEY}")], timeout=5)
    names = [m.id if hasattr(m, "id") else str(m) for m in getattr(r, "models", [])]
    check(r.ByteSize() > 0 and model_name in str(r), f"router Models through reflected "
          f"descriptors names the model: {names or str(r)[:120]}")


def check_drain(d, channels):
    """SIGTERM the decode worker while it streams: its Watch caller sees NOT_SERVING; the
    router's health follows once its probe finds no live decode worker."""
    watch = health_pb2_grpc.HealthStub(channels["decode0"]).Watch(
        health_pb2.HealthCheckRequest(service=""), timeout=60)
    seen = []

    def read():
        try:
            for r in watch:
                seen.append(r.status)
        except grpc.RpcError:
            pass
    reader = threading.Thread(target=read)
    reader.start()
    check(wait_until(lambda: seen[:1] == [SERVING], 10), f"decode0: Watch starts SERVING: {seen}")
    body = {"model": os.path.basename(TINY), "prompt": "Once upon a time", "max_tokens": 4000,
            "stream": True, "ignore_eos": True}
    streamer = threading.Thread(target=lambda: stream(
        d.port, "/v1/completions", body, headers={"Authorization": f"Bearer {API_KEY}"}))
    streamer.start()
    time.sleep(1.0)  # the stream is decoding: the worker's shutdown has a call to wait for
    print(f"info: the stream is {'still' if streamer.is_alive() else 'no longer'} running at "
          "SIGTERM", flush=True)
    d.procs["decode0"].send_signal(signal.SIGTERM)
    check(wait_until(lambda: NOT_SERVING in seen, 10),
          f"decode0 draining (SIGTERM): Watch says NOT_SERVING: {seen}")
    d.procs["decode0"].wait(timeout=20)
    reader.join(timeout=20)
    streamer.join(timeout=30)
    stub = health_pb2_grpc.HealthStub(channels["router"])

    def router_status():
        return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
    check(wait_until(lambda: router_status() == NOT_SERVING, 15),
          "router: NOT_SERVING once no decode worker is live")
    r = stub.Check(health_pb2.HealthCheckRequest(service="dqserve.v1.DqServe"), timeout=5)
    check(r.status == NOT_SERVING, "router: dqserve.v1.DqServe NOT_SERVING too")


def main():
    grpc_port = free_port()
    env = {"DQ_WORKER_KEY": WORKER_KEY}
    with Deployment(TINY, router_args=["--grpc-port", str(grpc_port), "--api-key", API_KEY],
                    env=env) as d:
        ports = {"router": grpc_port, **{n: d.ports[n] for n in ("prefill0", "decode0")}}
        channels = {n: grpc.insecure_channel(f"127.0.0.1:{p}") for n, p in ports.items()}
        for name, channel in channels.items():
            check_health(name, channel)
            pool, svc = check_reflection(name, channel)
            check_auth(name, channel)
            if name == "router":
                check_reflected_call(pool, svc, channel, os.path.basename(TINY))
        for name in ("prefill0", "decode0"):  # reflection registered once (gRPC logs twice)
            check("duplicate registration" not in d.log(name), f"{name}: no gRPC registration "
                  "error in its log")
        check_drain(d, channels)
        for c in channels.values():
            c.close()


if __name__ == "__main__":
    run_main(main, log_tails=True)
    finish()
