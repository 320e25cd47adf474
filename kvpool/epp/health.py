"""The picker's gRPC health port: the gRPC Health Checking Protocol (``grpc.health.v1.Health``),
which the Inference Extension's endpoint picker protocol requires (docs/epp.md, "gRPC health").

A grpcio server of its own on ``--grpc-health-port`` (9003 by default, the reference picker's),
so Kubernetes' ``grpc`` probes and Envoy's gRPC health checks reach it without touching the
ExternalProcessor port's transport. ``Check`` answers SERVING for the services the protocol
names (``liveness``, ``readiness``, ``envoy.service.ext_proc.v3.ExternalProcessor``), for the
server as a whole (``""``) and for ``inference-extension`` (the service the reference's
manifests probe); any other service is NOT_FOUND, as the protocol says. The port is up only
while the picker is: it starts once the picker has polled its replicas and is bound, and stops
first at SIGTERM, so a readiness probe fails while calls drain. Whether replicas are healthy is
not its question (a picker with none answers each request 503; GET /health on the metrics
port tells). ``Watch`` is not served (UNIMPLEMENTED; probes use ``Check``).

The two messages are built from a descriptor here (no grpcio-health-checking dependency), in a
pool of their own, at the first start: grpcio and protobuf (the ``epp`` extra) are imported
then, so ``kvpool epp --help`` reads this module's defaults without them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import grpc

__all__ = ["DEFAULT_HEALTH_PORT", "SERVICES", "HealthPort"]

DEFAULT_HEALTH_PORT = 9003
SERVICES = frozenset({"", "liveness", "readiness", "inference-extension",
                      "envoy.service.ext_proc.v3.ExternalProcessor"})
SERVING = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus


@functools.cache
def _messages() -> tuple[type, type]:
    """(HealthCheckRequest, HealthCheckResponse)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(
        name="kvpool/epp/health.proto", package="grpc.health.v1", syntax="proto3")
    for name, field, kind in (
            ("HealthCheckRequest", "service", descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
            ("HealthCheckResponse", "status", descriptor_pb2.FieldDescriptorProto.TYPE_INT32)):
        proto.message_type.add(name=name).field.add(
            name=field, number=1, type=kind,
            label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)  # the status enum is an int32 on the wire (a varint either way)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"grpc.health.v1.{n}")) for n in ("HealthCheckRequest", "HealthCheckResponse"))


async def _check(request, context: grpc.aio.ServicerContext):
    import grpc

    if request.service not in SERVICES:
        await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
    return _messages()[1](status=SERVING)


class HealthPort:
    """The health server on ``host:port`` (0: any free port; ``port`` is the bound one after
    ``start``)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.server: grpc.aio.Server | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"grpc://{host}:{self.port}"

    async def start(self) -> None:
        """OSError when the port cannot be bound."""
        import grpc

        request, response = _messages()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(
                _check, request_deserializer=request.FromString,
                response_serializer=response.SerializeToString)}),))
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            bound = server.add_insecure_port(f"{host}:{self.port}")
        except RuntimeError as exc:  # grpcio's word for a port it cannot bind
            raise OSError(f"gRPC health port {self.url}: {exc}") from None
        await server.start()
        self.server, self.port = server, bound

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None
