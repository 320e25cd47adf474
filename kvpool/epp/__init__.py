"""``kvpool epp``: a Gateway API Inference Extension endpoint picker (Envoy ext_proc over gRPC).

picker.py   the decision: the router's Router set up without a listener (same membership,
            health beats, scoring and Responses API affinity as ``kvpool router``), answering
            host:port
service.py  the ext_proc stream: buffered body in, destination header + dynamic metadata out,
            ImmediateResponse 400/503 as OpenAI error JSON
h2.py       the gRPC transport: one HTTP/2 connection served on the event loop (no grpc.aio
            thread hand-offs), its buffers bounded by flow control
calls.py    one gRPC call on it: frames, messages cut from DATA, answers
listener.py the listening socket: the limits (message, bytes per connection, connections) and
            a stop bounded in time (docs/epp.md)
metrics.py  the Prometheus port: the router's registry and the transport's figures on
            GET /metrics, the router's GET /health (docs/epp.md)
cli.py      the ``kvpool epp`` subcommand

Needs the ``epp`` extra (protobuf and xds-protos: Envoy's generated ext_proc API; grpcio comes
with xds-protos, and the tests' gRPC client uses it).
"""
