#!/usr/bin/env python3
"""MCP smoke client built on the official Python SDK (`mcp` 2.3.x).

Connects to an MCP server, lists tools, calls `session_context` with
{"prompt": ...}, optionally calls one more named tool, and reads a resource.
Exits 0 when every step succeeds, 1 when any step fails, 2 on bad usage.

Run it with the venv that tests/clients/install.sh creates:

    .ci/tools/venv/bin/python tests/clients/mcp_smoke.py URL [--token TOKEN] [options]
    .ci/tools/venv/bin/python tests/clients/mcp_smoke.py --stdio -- CMD [ARGS...]

Environment fallbacks: MCP_URL, MCP_TOKEN, MCP_MODE, MCP_PROMPT, MCP_SESSION_TOOL,
MCP_TOOL, MCP_TOOL_ARGS (JSON object), MCP_RESOURCE.

--mode is the SDK's own `Client(mode=...)` switch: "auto" (probe server/discover,
fall back to the initialize handshake), "legacy" (initialize handshake only,
2025-11-25 era) or "2026-07-28" (adopt the stateless 2026-07-28 protocol without a probe).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation


class StepFailed(Exception):
    pass


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", nargs="?", default=os.environ.get("MCP_URL"), help="streamable HTTP endpoint (env MCP_URL)")
    p.add_argument("--token", default=os.environ.get("MCP_TOKEN"), help="bearer token (env MCP_TOKEN)")
    p.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="extra HTTP header (repeatable)"
    )
    p.add_argument("--mode", default=os.environ.get("MCP_MODE", "auto"), help='"auto" | "legacy" | "2026-07-28"')
    p.add_argument("--prompt", default=os.environ.get("MCP_PROMPT", "smoke test: what is this session about?"))
    p.add_argument("--session-tool", default=os.environ.get("MCP_SESSION_TOOL", "session_context"))
    p.add_argument("--tool", default=os.environ.get("MCP_TOOL"), help="second tool to call (optional)")
    p.add_argument("--tool-args", default=os.environ.get("MCP_TOOL_ARGS", "{}"), help="JSON object for --tool")
    p.add_argument(
        "--resource",
        default=os.environ.get("MCP_RESOURCE"),
        help="resource URI to read (default: first entry of resources/list)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="overall timeout in seconds")
    p.add_argument("--stdio", action="store_true", help="launch a stdio server instead: --stdio -- CMD [ARGS...] (last)")
    stdio_cmd = None
    if "--stdio" in argv:
        i = argv.index("--stdio")
        argv, stdio_cmd = argv[: i + 1], argv[i + 1 :]
        if stdio_cmd[:1] == ["--"]:
            stdio_cmd = stdio_cmd[1:]
    args = p.parse_args(argv)
    args.stdio = stdio_cmd
    if args.stdio is not None:
        if not args.stdio:
            p.error("--stdio needs a command")
    elif not args.url:
        p.error("a URL (or MCP_URL, or --stdio CMD) is required")
    try:
        args.tool_args = json.loads(args.tool_args)
    except json.JSONDecodeError as e:
        p.error(f"--tool-args is not JSON: {e}")
    if not isinstance(args.tool_args, dict):
        p.error("--tool-args must be a JSON object")
    return args


def _log(step: str, ok: bool, **detail: Any) -> None:
    print(json.dumps({"step": step, "ok": ok, **detail}, default=str), flush=True)


def _content_summary(blocks: list[Any]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        d = b.model_dump(by_alias=True, exclude_none=True)
        if "data" in d:
            d["data"] = f"<{len(d['data'])} base64 chars>"
        if "text" in d and len(d["text"]) > 500:
            d["text"] = d["text"][:500] + "..."
        out.append(d)
    return out


async def _call(client: Client, name: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(name, arguments)
    detail = {"tool": name, "is_error": result.is_error, "content": _content_summary(result.content)}
    if result.structured_content is not None:
        detail["structured"] = result.structured_content
    _log("tools/call", not result.is_error, **detail)
    if result.is_error:
        raise StepFailed(f"tool {name} returned isError")
    return result.structured_content


async def _run(args: argparse.Namespace) -> None:
    async with AsyncExitStack() as stack:
        if args.stdio is not None:
            env = {}
            if args.token:
                env["MCP_TOKEN"] = args.token
            server: Any = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=env or None)
            target = " ".join(args.stdio)
        else:
            headers = {}
            if args.token:
                headers["Authorization"] = f"Bearer {args.token}"
            for h in args.header:
                name, _, value = h.partition(":")
                headers[name.strip()] = value.strip()
            # The SDK takes headers through the httpx2 client it is handed (not a `headers=` kwarg).
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
            )
            server = streamable_http_client(args.url, http_client=http)
            target = args.url

        client = await stack.enter_async_context(
            Client(server, mode=args.mode, client_info=Implementation(name="mcp-smoke-py", version="1.0.0"))
        )
        info = client.server_info
        _log(
            "connect",
            True,
            target=target,
            mode=args.mode,
            protocol_version=client.protocol_version,
            server=info.model_dump(exclude_none=True) if info else None,
        )

        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        _log("tools/list", True, tools=names)
        for wanted in [args.session_tool] + ([args.tool] if args.tool else []):
            if wanted not in names:
                _log("tools/list", False, missing=wanted)
                raise StepFailed(f"tool {wanted!r} not listed")

        opened = await _call(client, args.session_tool, {"prompt": args.prompt})
        if args.tool:
            await _call(client, args.tool, args.tool_args)

        uri = args.resource
        # `{session_id}` in --resource is the id session_context returned.
        if uri and isinstance(opened, dict) and opened.get("session_id"):
            uri = uri.replace("{session_id}", str(opened["session_id"]))
        if not uri:
            listed = await client.list_resources()
            if not listed.resources:
                _log("resources/list", False, error="server lists no resources and --resource was not given")
                raise StepFailed("no resource to read")
            uri = str(listed.resources[0].uri)
            _log("resources/list", True, resources=[str(r.uri) for r in listed.resources])
        read = await client.read_resource(uri)
        contents = []
        for c in read.contents:
            d = c.model_dump(by_alias=True, exclude_none=True)
            if "blob" in d:
                d["blob"] = f"<{len(base64.b64decode(d['blob']))} bytes>"
            elif "text" in d and len(d["text"]) > 500:
                d["text"] = d["text"][:500] + "..."
            contents.append(d)
        ok = len(contents) > 0
        _log("resources/read", ok, uri=uri, contents=contents)
        if not ok:
            raise StepFailed(f"resource {uri} returned no contents")


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(asyncio.wait_for(_run(args), timeout=args.timeout))
    except StepFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # connection errors, MCPError, timeouts, ExceptionGroups from anyio
        for leaf in _leaves(e):
            print(f"FAILED: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return 1
    print("OK: all steps passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
