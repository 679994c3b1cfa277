"""A real MCP client (the Python `mcp` package, streamable HTTP) driven by the Rust tests.

Usage: py_client.py URL TOKEN

Connects with `Authorization: Bearer TOKEN` (no header when TOKEN is "-"), initializes,
lists the tools and prints one JSON line:

    {"ready": true, "session_id": ..., "protocol": ..., "server": ..., "tools": [...]}

Then reads one JSON object per stdin line, {"name": TOOL, "arguments": {...}}, calls the
tool in the same session and prints one JSON line per call:

    {"isError": bool, "text": [...], "structured": ...}      or      {"error": "..."}

Two other requests: {"op": "list"} lists the tools again ({"tools": [names]}), and
{"op": "wait_list_changed", "seconds": N} waits up to N seconds for a
`notifications/tools/list_changed` not yet reported ({"list_changed": bool}).

At end of input it closes the session (DELETE) and exits 0. A failure to connect prints
{"ready": false, "error": "..."} and exits 3.
"""

import asyncio
import json
import sys
from datetime import timedelta

import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

# Every `notifications/tools/list_changed` the server sent, counted.
LIST_CHANGED = asyncio.Event()


async def on_message(message) -> None:
    if isinstance(message, types.ServerNotification) and isinstance(
        message.root, types.ToolListChangedNotification
    ):
        LIST_CHANGED.set()


def describe(exc: BaseException) -> str:
    """Flattens anyio's exception groups into one readable line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(e) for e in exc.exceptions)
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def read_line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def main() -> int:
    url, token = sys.argv[1], sys.argv[2]
    headers = {} if token == "-" else {"Authorization": f"Bearer {token}"}
    http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, read=300.0))
    ready = False
    try:
        async with http:
            async with streamable_http_client(url, http_client=http) as (read, write, session_id):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    init = await session.initialize()
                    tools = await session.list_tools()
                    emit(
                        {
                            "ready": True,
                            "session_id": session_id(),
                            "protocol": init.protocolVersion,
                            "server": init.serverInfo.name,
                            "tools": [t.model_dump(mode="json", exclude_none=True) for t in tools.tools],
                        }
                    )
                    ready = True
                    while True:
                        line = await read_line()
                        if not line:
                            break
                        if not line.strip():
                            continue
                        req = json.loads(line)
                        if req.get("op") == "list":
                            tools = await session.list_tools()
                            emit({"tools": [t.name for t in tools.tools]})
                            continue
                        if req.get("op") == "wait_list_changed":
                            try:
                                await asyncio.wait_for(LIST_CHANGED.wait(), req.get("seconds", 10))
                                LIST_CHANGED.clear()
                                emit({"list_changed": True})
                            except asyncio.TimeoutError:
                                emit({"list_changed": False})
                            continue
                        try:
                            res = await session.call_tool(
                                req["name"],
                                req.get("arguments") or {},
                                read_timeout_seconds=timedelta(seconds=60),
                            )
                            emit(
                                {
                                    "isError": bool(res.isError),
                                    "text": [c.text for c in res.content if c.type == "text"],
                                    "structured": res.structuredContent,
                                }
                            )
                        except Exception as e:  # noqa: BLE001 - reported to the test
                            # A broken session cancels the call (BaseException): that
                            # propagates, and the outer handler reports the cause.
                            emit({"error": describe(e)})
    except BaseException as e:  # noqa: BLE001 - reported to the test
        if not ready:
            emit({"ready": False, "error": describe(e)})
            return 3
        # The session broke (e.g. a 401 after a revoke): that is the pending call's answer.
        emit({"error": describe(e)})
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
