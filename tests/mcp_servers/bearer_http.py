"""What the Python streamable-HTTP MCP servers share (`http_upstream.py` here, the
FastMCP peer of benches/mcp_load.rs): a bearer check in front of the app, and serving
it on an ephemeral loopback port announced as `PORT <n>` until stdin closes.
"""

import hmac
import json
import os
import socket
import sys
import threading

import uvicorn


class Bearer:
    """ASGI middleware: `Authorization: Bearer TOKEN` on every HTTP request, compared in
    constant time; 401 otherwise (with `WWW-Authenticate` when a realm is given)."""

    def __init__(self, app, token: bytes, realm: str | None = None):
        self.app = app
        self.expected = b"Bearer " + token
        self.headers = [(b"content-type", b"application/json")]
        if realm is not None:
            self.headers.append((b"www-authenticate", f'Bearer realm="{realm}"'.encode()))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            auth = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(auth, self.expected):
                body = json.dumps({"error": "invalid_token"}).encode()
                headers = self.headers + [(b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 401, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def exit_when_stdin_closes():
    sys.stdin.read()
    os._exit(0)


def serve(app, backlog: int):
    """Serves `app` on 127.0.0.1, an ephemeral port printed as `PORT <n>`, until stdin
    closes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted sockets inherit TCP_NODELAY on Linux: the same fix aicli's server applies,
    # so neither side stalls ~40 ms on Nagle + delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(backlog)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    threading.Thread(target=exit_when_stdin_closes, daemon=True).start()
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
