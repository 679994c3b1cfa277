"""The Python peer of benches/mcp_load.rs: FastMCP (mcp<2) on uvicorn, streamable HTTP with
sessions + SSE, the same `broadcastLog` tool as aicli's server, behind a bearer middleware.

Usage: fastmcp_server.py TOKEN

Binds 127.0.0.1 on an ephemeral port, prints `PORT <n>` and serves until killed or until
stdin closes.
"""

import hmac
import json
import os
import socket
import sys
import threading
from collections import deque

import uvicorn
from mcp.server.fastmcp import FastMCP

TOKEN = sys.argv[1].encode()
LEVELS = ("debug", "info", "warning", "error")
# Where published lines go (the Rust server sends them to the task's channel).
EVENTS: deque = deque(maxlen=10_000)

mcp = FastMCP("fastmcp-bench", host="127.0.0.1", log_level="WARNING", stateless_http=False)


@mcp.tool(name="broadcastLog")
def broadcast_log(message: str, level: str = "info", source: str = "") -> str:
    """Publish a progress or diagnostic line."""
    if level not in LEVELS:
        raise ValueError(f"invalid level {level!r}: use one of debug, info, warning, error")
    cut = len(message) > 5000
    EVENTS.append((level, message[:5000], source))
    return "logged (message cut to 5000 characters)" if cut else "logged"


class Bearer:
    """ASGI middleware: `Authorization: Bearer TOKEN` on every HTTP request, compared in
    constant time; 401 with WWW-Authenticate otherwise."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(auth, b"Bearer " + TOKEN):
                body = json.dumps({"error": "invalid_token"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="bench"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def exit_when_stdin_closes():
    sys.stdin.read()
    os._exit(0)


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit TCP_NODELAY on Linux: the same fix aicli's server applies,
    # so neither side stalls ~40 ms on Nagle + delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    config = uvicorn.Config(Bearer(mcp.streamable_http_app()), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
