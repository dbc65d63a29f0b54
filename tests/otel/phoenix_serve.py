"""Run `phoenix serve` with its OTLP/gRPC receiver on PHOENIX_HOST.

Phoenix binds its HTTP server (UI, REST API, OTLP over HTTP) on PHOENIX_HOST,
but its OTLP/gRPC receiver on every interface (`[::]`) whatever PHOENIX_HOST
says. Tests and local runs keep every server on loopback, so this launcher
rewrites the receiver's address to PHOENIX_HOST (default 127.0.0.1) before
starting Phoenix's own entry point unchanged.
"""

import os
import sys

from grpc.aio import _server

HOST = os.environ.get("PHOENIX_HOST", "127.0.0.1")
_add_insecure_port = _server.Server.add_insecure_port
_add_secure_port = _server.Server.add_secure_port


def _on_host(address: str) -> str:
    port = address.rpartition(":")[2]
    return f"[{HOST}]:{port}" if ":" in HOST else f"{HOST}:{port}"


_server.Server.add_insecure_port = lambda self, address: _add_insecure_port(
    self, _on_host(address)
)
_server.Server.add_secure_port = lambda self, address, credentials: _add_secure_port(
    self, _on_host(address), credentials
)

from phoenix.server.main import main  # noqa: E402  (after the patch, on purpose)

if __name__ == "__main__":
    sys.argv[0] = "phoenix"
    sys.exit(main())
