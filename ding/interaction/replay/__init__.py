"""The replay service's protocol (``replay.v1``): the generated stubs, the tensor codec, the call token and the
client. Needs the ``replay`` extra (grpcio, protobuf)."""

try:
    import google.protobuf  # noqa: F401
    import grpc  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"the replay service needs grpcio and protobuf ({exc.name} is missing): pip install 'ding[replay]'"
    ) from exc
