"""An upstream MCP server for the gateway tests: FastMCP (mcp<2) over streamable HTTP,
behind a bearer check, standing for a service whose credential aicli keeps.

Usage: http_upstream.py   (the expected token in $EXPECTED_TOKEN)

Binds 127.0.0.1 on an ephemeral port, prints `PORT <n>`, serves until stdin closes.
Every request without `Authorization: Bearer $EXPECTED_TOKEN` gets 401, so a tool
answering at all proves the header reached it. Tools: `whoami`, `add(a, b)` and `repeat(s, n)`.
"""

import os

from mcp.server.fastmcp import FastMCP

from bearer_http import Bearer, serve

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


def main():
    serve(Bearer(mcp.streamable_http_app(), TOKEN), backlog=64)


if __name__ == "__main__":
    main()
