#!/usr/bin/env python3
"""The streaming mapping through the official Python SDK (`mcp` 2.3.x).

Against an edge fronting the conformance fixture (`ithaca serve edge --auth off
--no-session-gate --backend FIXTURE`), in one protocol mode:

1. `test_tool_with_progress` with a progress callback: three progress
   notifications (0, 50, 100 of 100) must reach it, in order, before the result;
2. `test_tool_with_logging` with a logging callback (the log level asked for the
   way the mode does it): three log messages must reach it;
3. `test_input_required_result_elicitation`: the client's elicitation callback
   answers the person's name and the result must greet that name. In the
   2026-07-28 mode that is an `input_required` round trip (the SDK retries
   with the answer and the sealed requestState); in the legacy mode the edge
   asks on the response stream and resumes the backend with the answer.

With `--run-skill --token KEY`, against the product (`ithaca up`) instead:
open a session, propose a three-symbol strategy and backtest it with
`run_skill` (a batch skill) with a progress callback: each step must reach it
(1 to 7 of 7, in order) before the run, which must have succeeded.

With `--confirm --token HUMAN_KEY` (trading on), against the product: a
person's `promote_strategy` from a client with an elicitation callback is
asked to confirm; declined, the strategy stays a draft and the result is
`not_confirmed`; accepted, it is promoted to paper.

Exits 0 when every step passes, 1 otherwise.

    .ci/tools/venv/bin/python tests/clients/streaming.py URL --mode legacy|2026-07-28
    .ci/tools/venv/bin/python tests/clients/streaming.py URL --run-skill --token KEY --mode MODE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation


class StepFailed(Exception):
    pass


def _log(step: str, ok: bool, **detail: Any) -> None:
    print(json.dumps({"step": step, "ok": ok, **detail}, default=str), flush=True)


async def _run(url: str, mode: str) -> None:
    progress: list[tuple[float, float | None]] = []
    logs: list[Any] = []
    asked: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=120.0)))
        client = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                client_info=Implementation(name="ithaca-streaming-py", version="1.0.0"),
                logging_callback=on_log,
                # 2026-07-28: the level travels in each request's _meta.
                log_level="debug",
                elicitation_callback=on_elicit,
            )
        )
        _log("connect", True, mode=mode, protocol_version=client.protocol_version)
        if client.protocol_version and client.protocol_version < "2026-07-28":
            # Legacy: the level is set once, with logging/setLevel.
            await client.set_logging_level("debug")

        result = await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        values = [p for p, _ in progress]
        ok = not result.is_error and values == [0.0, 50.0, 100.0] and all(t == 100.0 for _, t in progress)
        _log("progress", ok, notifications=progress)
        if not ok:
            raise StepFailed(f"expected progress 0, 50, 100 of 100; got {progress}")

        result = await client.call_tool("test_tool_with_logging", {})
        ok = not result.is_error and len(logs) == 3
        _log("logging", ok, messages=logs)
        if not ok:
            raise StepFailed(f"expected three log messages; got {logs}")

        result = await client.call_tool("test_input_required_result_elicitation", {})
        text = result.content[0].text if result.content else ""
        ok = not result.is_error and asked == ["What is your name?"] and text == "Hello, Ada!"
        _log("elicitation", ok, asked=asked, text=text)
        if not ok:
            raise StepFailed(f"expected one elicitation and 'Hello, Ada!'; asked {asked}, got {text!r}")


async def _run_skill(url: str, mode: str, token: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0))
        )
        client = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                client_info=Implementation(name="ithaca-streaming-py", version="1.0.0"),
            )
        )
        _log("connect", True, mode=mode, protocol_version=client.protocol_version)

        async def call(tool: str, arguments: dict[str, Any], **kw: Any) -> Any:
            result = await client.call_tool(tool, arguments, **kw)
            text = result.content[0].text if result.content else ""
            if result.is_error:
                raise StepFailed(f"{tool}: {text}")
            return json.loads(text)

        await call("session_context", {"prompt": "Backtest a momentum strategy, watching its progress."})
        universe = ["AAPL", "MSFT", "IBM"]
        strategy = await call("propose_strategy", {"name": "momentum", "universe": universe,
                                                   "lookback": 60, "rebalance": 20, "risk": {"max_weight": 1.0}})
        run = await call("run_skill", {"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy["strategy_id"]}},
                         progress_callback=on_progress)
        steps = 2 * len(universe) + 1
        values = [p for p, _, _ in progress]
        ok = (values == [float(i) for i in range(1, steps + 1)]
              and all(t == float(steps) and m for _, t, m in progress)
              and run.get("status") == "succeeded")
        _log("run_skill progress", ok, notifications=progress, status=run.get("status"))
        if not ok:
            raise StepFailed(f"expected progress 1..{steps} of {steps} and a succeeded run; got {progress}, {run.get('status')}")


async def _confirm(url: str, mode: str, token: str) -> None:
    answers = ["decline", "accept"]
    asked: list[str] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        action = answers.pop(0)
        if action == "accept":
            return types.ElicitResult(action="accept", content={"confirm": True})
        return types.ElicitResult(action=action)

    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30.0, read=120.0))
        )
        client = await stack.enter_async_context(
            Client(
                streamable_http_client(url, http_client=http),
                mode=mode,
                client_info=Implementation(name="ithaca-streaming-py", version="1.0.0"),
                elicitation_callback=on_elicit,
            )
        )
        _log("connect", True, mode=mode, protocol_version=client.protocol_version)

        async def call(tool: str, arguments: dict[str, Any]) -> Any:
            result = await client.call_tool(tool, arguments)
            text = result.content[0].text if result.content else ""
            if result.is_error:
                raise StepFailed(f"{tool}: {text}")
            return json.loads(text)

        await call("session_context", {"prompt": "Promote a strategy, confirming it."})
        strategy = await call("propose_strategy", {"name": "momentum", "universe": ["AAPL"], "lookback": 60,
                                                   "rebalance": 20, "risk": {"max_weight": 1.0}})
        promote = {"strategy_id": strategy["strategy_id"], "mode": "paper"}
        declined = await call("promote_strategy", promote)
        after = await call("get_strategy", {"strategy_id": strategy["strategy_id"]})
        ok = declined.get("status") == "not_confirmed" and after.get("status") == "draft" and len(asked) == 1
        _log("confirmation declined", ok, result=declined, status=after.get("status"), asked=asked)
        if not ok:
            raise StepFailed(f"expected not_confirmed and a draft; got {declined}, {after.get('status')}")
        accepted = await call("promote_strategy", promote)
        ok = accepted.get("status") == "paper" and len(asked) == 2 and "promote_strategy" in asked[-1]
        _log("confirmation accepted", ok, status=accepted.get("status"), asked=asked)
        if not ok:
            raise StepFailed(f"expected the strategy promoted to paper after one more question; got {accepted}")


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--mode", default="legacy", help='"legacy" | "2026-07-28"')
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--run-skill", action="store_true", help="run_skill's progress against the product")
    p.add_argument("--confirm", action="store_true",
                   help="promote_strategy confirmed through elicitation (a human key; trading on)")
    p.add_argument("--token", help="bearer token (with --run-skill or --confirm)")
    args = p.parse_args()
    if (args.run_skill or args.confirm) and not args.token:
        p.error("--run-skill and --confirm need --token")
    if args.run_skill:
        run = _run_skill(args.url, args.mode, args.token)
    elif args.confirm:
        run = _confirm(args.url, args.mode, args.token)
    else:
        run = _run(args.url, args.mode)
    try:
        asyncio.run(asyncio.wait_for(run, timeout=args.timeout))
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
