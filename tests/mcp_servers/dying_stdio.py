"""An upstream MCP server on stdio that dies on request, for the restart tests.

Tools: `pid` (this process's pid), `die` (exits at once with code 7).
"""

import os
import sys

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("dying", log_level="WARNING")


@mcp.tool()
def pid() -> str:
    """This server process's pid."""
    return str(os.getpid())


@mcp.tool()
def die() -> str:
    """Exits the server process at once."""
    sys.stderr.write("dying on request\n")
    sys.stderr.flush()
    os._exit(7)


if __name__ == "__main__":
    mcp.run(transport="stdio")
