#!/usr/bin/env python3
"""Resource subscriptions through the official Python SDK (`mcp` 2.3.x).

Against an edge fronting the conformance fixture (`ithaca serve edge --auth off
--no-session-gate --backend FIXTURE`), whose `test://watched-resource` changes
every second (its watch RPC says so), in one protocol mode:

- legacy: `resources/subscribe` and `resources/unsubscribe` must be accepted.
  The updates themselves cannot be checked with this SDK: the edge sends them
  on the caller's GET stream, and `mcp` 2.3 opens a GET stream only when the
  server issued an `Mcp-Session-Id`, which the stateless edge never does
  (tests/clients/subscribe.mjs checks them with the Node SDK 1.x, which opens
  it after `initialized` regardless; tests/suite/subscriptions.rs over raw HTTP);
- 2026-07-28: `Client.listen(resource_subscriptions=[URI])` must be
  acknowledged with the URI and yield a `ResourceUpdated` for it.

Exits 0 when every step passes, 1 otherwise.

    .ci/tools/venv/bin/python tests/clients/subscribe.py URL --mode legacy|2026-07-28
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import Implementation

URI = "test://watched-resource"
# The fixture's resource changes every second; a few seconds is plenty.
WAIT = 10.0


class StepFailed(Exception):
    pass


def _log(step: str, ok: bool, **detail: Any) -> None:
    print(json.dumps({"step": step, "ok": ok, **detail}, default=str), flush=True)


async def _run(url: str, mode: str) -> None:
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0)))
        client = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                client_info=Implementation(name="ithaca-subscribe-py", version="1.0.0"),
            )
        )
        _log("connect", True, mode=mode, protocol_version=client.protocol_version)

        if client.protocol_version and client.protocol_version >= "2026-07-28":
            async with client.listen(resource_subscriptions=[URI]) as sub:
                honored = list(sub.honored.resource_subscriptions or [])
                _log("listen", honored == [URI], honored=honored)
                if honored != [URI]:
                    raise StepFailed(f"expected {URI} acknowledged; got {honored}")
                event = await asyncio.wait_for(sub.__anext__(), timeout=WAIT)
                ok = isinstance(event, ResourceUpdated) and event.uri == URI
                _log("updated", ok, event=event)
                if not ok:
                    raise StepFailed(f"expected ResourceUpdated({URI}); got {event!r}")
            return

        with warnings.catch_warnings():
            # resources/subscribe is deprecated in the SDK for 2026-07-28 only.
            warnings.simplefilter("ignore")
            await client.subscribe_resource(URI)
            _log("subscribe", True)
            await client.unsubscribe_resource(URI)
            _log("unsubscribe", True)
            # An unknown URI is refused as a read of it is.
            try:
                await client.subscribe_resource("test://no-such-resource")
            except Exception as e:  # MCPError
                _log("unknown", True, error=str(e))
            else:
                raise StepFailed("subscribing to an unknown resource was accepted")


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--mode", default="legacy", help='"legacy" | "2026-07-28"')
    p.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(_run(args.url, args.mode), timeout=args.timeout))
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
