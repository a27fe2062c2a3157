"""Drives `chitin mcp serve` (stdio) or the gateway's /mcp (streamable HTTP)
with the official MCP Python SDK's client, and prints one JSON object of
what it saw for the Rust test to check.

    drive_server.py SCENARIO MODE stdio CHITIN ARGS...
    drive_server.py SCENARIO MODE http URL TOKEN

SCENARIO is `main` (list, calls, trap, progress, cancel; the server runs
with --max-calls 1) or `timeout` (a call past [limits] timeout_ms). MODE is
the SDK's connect mode: `legacy` (initialize) or `auto` (discover first).
"""

import json
import os
import sys
import time

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def texts(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def main_scenario(client, seen):
    listed = await client.list_tools()
    seen["tools"] = sorted(tool.name for tool in listed.tools)
    seen["annotations"] = {
        tool.name: (tool.annotations.read_only_hint if tool.annotations else None) for tool in listed.tools
    }
    seen["schema_echo"] = next(t.input_schema for t in listed.tools if t.name == "echo")

    echo = await client.call_tool("echo", {"text": "hi from python"})
    seen["echo"] = {"text": texts(echo), "is_error": echo.is_error}

    wrote = await client.call_tool("write_file", {"path": "notes/mcp.txt", "content": "written over MCP"})
    seen["write_file"] = {"text": texts(wrote), "is_error": wrote.is_error}
    read = await client.call_tool("read_file", {"path": "notes/mcp.txt"})
    seen["read_file"] = {"text": texts(read), "is_error": read.is_error}

    # A fresh instance per call: a global counter never passes 1.
    seen["counters"] = [texts(await client.call_tool("counter", {})) for _ in range(2)]

    panicked = await client.call_tool("panic", {"message": "boom"})
    seen["panic"] = {"text": texts(panicked), "is_error": panicked.is_error}
    escaped = await client.call_tool("read_path", {"path": "/etc/passwd"})
    seen["escape"] = {"text": texts(escaped), "is_error": escaped.is_error}
    bad = await client.call_tool("echo", {"wrong": 1})
    seen["bad_args"] = {"text": texts(bad), "is_error": bad.is_error}
    try:
        await client.call_tool("no_such_tool", {})
        seen["unknown"] = "answered"
    except Exception as e:  # a protocol error, as MCP wants for an unknown tool
        seen["unknown"] = f"error: {e}"

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    flooded = await client.call_tool("progress_flood", {"text": "step", "count": 100000}, progress_callback=on_progress)
    seen["progress"] = {"result": texts(flooded), "updates": progress}

    # Cancellation: the server runs one call at a time (--max-calls 1) with a
    # 20 s time limit, so the call after a cancelled `spin` answers at once
    # only if the cancelled instance was really stopped.
    with anyio.move_on_after(0.5):
        await client.call_tool("spin", {})
    started = time.monotonic()
    with anyio.fail_after(8):
        after = await client.call_tool("counter", {})
    seen["after_cancel"] = {"text": texts(after), "secs": time.monotonic() - started}


async def timeout_scenario(client, seen):
    started = time.monotonic()
    spun = await client.call_tool("spin", {})
    seen["spin"] = {"text": texts(spun), "is_error": spun.is_error, "secs": time.monotonic() - started}
    echo = await client.call_tool("echo", {"text": "still here"})
    seen["echo"] = texts(echo)


async def run():
    scenario, mode, transport = sys.argv[1], sys.argv[2], sys.argv[3]
    if transport == "stdio":
        target = StdioServerParameters(command=sys.argv[4], args=sys.argv[5:], env=dict(os.environ))
    else:
        url, token = sys.argv[4], sys.argv[5]
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        target = streamable_http_client(url, http_client=http)
    seen = {}
    async with Client(target, mode=mode) as client:
        await {"main": main_scenario, "timeout": timeout_scenario}[scenario](client, seen)
    print(json.dumps(seen))


anyio.run(run)
