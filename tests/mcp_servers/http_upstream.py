"""An upstream MCP server for the gateway tests: FastMCP (mcp<2) over streamable HTTP,
behind a bearer check, standing for a service whose credential aicli keeps.

Usage: http_upstream.py   (the expected token in $EXPECTED_TOKEN)

Binds 127.0.0.1 on an ephemeral port, prints `PORT <n>`, serves until stdin closes.
Every request without `Authorization: Bearer $EXPECTED_TOKEN` gets 401, so a tool
answering at all proves the header reached it. Tools: `whoami`, `add(a, b)` and `repeat(s, n)`.
"""

import hmac
import json
import os
import socket
import sys
import threading

import uvicorn
from mcp.server.fastmcp import FastMCP

TOKEN = os.environ["EXPECTED_TOKEN"].encode()

mcp = FastMCP("tracker", host="127.0.0.1", log_level="WARNING", stateless_http=False)


@mcp.tool()
def whoami() -> str:
    """Says who the caller is to this service."""
    return "authorized: the tracker accepted aicli's bearer token"


@mcp.tool()
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


@mcp.tool()
def repeat(s: str, n: int) -> str:
    """Returns s repeated n times (a large result on demand)."""
    return s * n


class Bearer:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(auth, b"Bearer " + TOKEN):
                body = json.dumps({"error": "invalid_token"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def exit_when_stdin_closes():
    sys.stdin.read()
    os._exit(0)


def main():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    config = uvicorn.Config(Bearer(mcp.streamable_http_app()), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
