"""The Python anchor of ithaca-bench: FastMCP over streamable HTTP (stateless,
JSON responses), one uvicorn worker, a static bearer check, and a tool
equivalent to the probe backend's `bench_ping`.

Prints `fastmcp listening on HOST:PORT` once it accepts connections.
"""

import os
import socket

import uvicorn
from fastmcp import FastMCP
from starlette.middleware import Middleware

TOKEN = os.environ["BENCH_TOKEN"].encode()

mcp = FastMCP("ithaca-bench-anchor")


@mcp.tool(annotations={"readOnlyHint": True})
async def bench_ping(note: str = "") -> dict:
    """Echo a short note back; reads nothing and writes nothing."""
    return {"ok": True, "note": note}


class StaticBearer:
    """Refuses any request whose Authorization is not `Bearer <BENCH_TOKEN>`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    auth = value
                    break
            if auth != b"Bearer " + TOKEN:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"invalid token\n"})
                return
        await self.app(scope, receive, send)


app = mcp.http_app(
    path="/mcp",
    json_response=True,
    stateless_http=True,
    middleware=[Middleware(StaticBearer)],
)

if __name__ == "__main__":
    # IPPROTO_TCP (not 0) so asyncio sets TCP_NODELAY on accepted
    # connections; without it uvicorn's separate writes of the response head
    # and body stall 40 ms on the client's delayed ACK. The listener gets it
    # too (Linux passes it on to accepted sockets).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    config = uvicorn.Config(app, workers=1, log_level="warning", access_log=False,
                            lifespan="on")
    server = uvicorn.Server(config)

    started = server.startup

    async def startup(sockets=None):
        await started(sockets=sockets)
        print(f"fastmcp listening on {host}:{port}", flush=True)

    server.startup = startup
    server.run(sockets=[sock])
