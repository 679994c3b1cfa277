"""The Python peer of benches/mcp_load.rs: FastMCP (mcp<2) on uvicorn, streamable HTTP with
sessions + SSE, the same `broadcastLog` tool as aicli's server, behind a bearer middleware.

Usage: fastmcp_server.py TOKEN

Binds 127.0.0.1 on an ephemeral port, prints `PORT <n>` and serves until killed or until
stdin closes (`tests/mcp_servers/bearer_http.py`).
"""

import os
import sys
from collections import deque

from mcp.server.fastmcp import FastMCP

# The bearer check and the serve loop are the tests' upstream's (tests/mcp_servers).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "mcp_servers"))
from bearer_http import Bearer, serve  # noqa: E402

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


def main():
    serve(Bearer(mcp.streamable_http_app(), TOKEN, realm="bench"), backlog=1024)


if __name__ == "__main__":
    main()
