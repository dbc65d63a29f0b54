#!/usr/bin/env python3
"""The seed-002 research story through the official Python MCP SDK (`mcp` 2.3)
against a running `ithaca up`: open a session, discover skills, pull prices,
compute realised volatility, propose and backtest a momentum strategy, fetch
the SVG artifact, try to promote it (refused), let an administrator allow
paper trading, promote again (pending), approve it with a human key, and read
the whole trace back from seq 0. Every response is kept and finally searched
for the secrets of the keys used: none may appear.

Usage: [STORY_SECRETS=a,b] story.py URL AGENT_KEY HUMAN_KEY -- POLICY_COMMAND...
  STORY_SECRETS: further strings (provider credentials, connection details
  configured before the story) that no response may contain.
  POLICY_COMMAND is run (once) to allow paper trading, e.g.
  `ithaca policy set --trading on --data-dir DIR`.
Exit 0 when every step behaves, 1 otherwise.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

responses: list[str] = []


def step(name: str, ok: bool, **detail: Any) -> None:
    print(json.dumps({"step": name, "ok": ok, **detail}, default=str)[:400], flush=True)
    if not ok:
        raise SystemExit(1)


async def connect(stack: AsyncExitStack, url: str, key: str) -> Client:
    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30.0, read=120.0))
    )
    return await stack.enter_async_context(
        Client(streamable_http_client(url, http_client=http), mode="2026-07-28",
               client_info=Implementation(name="ithaca-story", version="1.0.0"))
    )


async def call(client: Client, name: str, args: dict[str, Any], expect_error: str | None = None) -> Any:
    result = await client.call_tool(name, args)
    data = result.structured_content
    responses.append(json.dumps(result.model_dump(by_alias=True, exclude_none=True), default=str))
    if expect_error:
        step(name, bool(result.is_error) and (data or {}).get("error") == expect_error, expected=expect_error, got=data)
    else:
        step(name, not result.is_error, result=data)
    return data


async def main() -> None:
    sep = sys.argv.index("--")
    url, agent_key, human_key = sys.argv[1:4]
    policy_command = sys.argv[sep + 1:]
    async with AsyncExitStack() as stack:
        agent = await connect(stack, url, agent_key)
        tools = {t.name for t in (await agent.list_tools()).tools}
        wanted = {"session_context", "search_skills", "describe_skill", "get_price_history", "run_skill",
                  "propose_strategy", "get_artifact", "promote_strategy", "get_approval"}
        step("tools/list", wanted <= tools, missing=sorted(wanted - tools))
        templates = {str(t.uri_template) for t in (await agent.list_resource_templates()).resource_templates}
        step("resources/templates/list", "doomberg://runs/{run_id}" in templates, templates=sorted(templates))

        session = await call(agent, "session_context", {"prompt": "Research MSFT momentum: pull prices, check volatility, propose and backtest a strategy."})
        sid = session["session_id"]
        found = await call(agent, "search_skills", {"query": "volatility"})
        step("search finds vol.realized", found["skills"][0]["skill_id"] == "vol.realized")
        await call(agent, "describe_skill", {"skill_id": "backtest.momentum"})
        history = await call(agent, "get_price_history", {"symbol": "MSFT", "start": "2012-01-01", "fields": ["adj_close"]})
        step("price history", int(history["count"]) > 200)
        vol = await call(agent, "run_skill", {"skill_id": "vol.realized", "inputs": {"symbol": "MSFT", "window": 63}})
        step("volatility", 0 < vol["outputs"]["volatility"] < 2)
        strategy = await call(agent, "propose_strategy", {"name": "MSFT 6m momentum", "universe": ["MSFT"], "lookback": 126, "rebalance": 21})
        backtest = await call(agent, "run_skill", {"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy["strategy_id"]}})
        # Backtests are batch runs: follow it until it finishes.
        for _ in range(10):
            if backtest["status"] not in ("queued", "running"):
                break
            backtest = await call(agent, "subscribe_run", {"run_id": backtest["run_id"], "status": backtest["status"], "wait_ms": 10000})
        step("backtest finished", backtest["status"] == "succeeded", status=backtest["status"])
        svg = next(a for a in backtest["artifacts"] if a["mime_type"] == "image/svg+xml")
        artifact = await agent.call_tool("get_artifact", {"artifact_id": svg["artifact_id"]})
        responses.append(json.dumps(artifact.model_dump(by_alias=True, exclude_none=True), default=str))
        text = artifact.content[0].resource.text
        step("svg artifact", text.startswith("<svg") and "<polyline" in text)
        run = await agent.read_resource(f"doomberg://runs/{backtest['run_id']}")
        responses.append(run.contents[0].text)
        step("run resource", json.loads(run.contents[0].text)["status"] == "succeeded")

        await call(agent, "promote_strategy", {"strategy_id": strategy["strategy_id"], "mode": "paper"}, expect_error="TRADING_DISABLED")
        done = subprocess.run(policy_command, capture_output=True, text=True)
        step("administrator allows paper trading", done.returncode == 0, output=done.stdout + done.stderr)
        accounts = await agent.read_resource("doomberg://accounts")
        responses.append(accounts.contents[0].text)
        providers = await agent.read_resource("doomberg://data/providers")
        responses.append(providers.contents[0].text)
        if os.environ.get("STORY_SECRETS"):
            listed = json.loads(accounts.contents[0].text)["accounts"]
            step("accounts show only that a credential is configured", bool(listed) and all(a["credential_configured"] for a in listed), accounts=listed)
        policy = await agent.read_resource("doomberg://policies/current")
        responses.append(policy.contents[0].text)
        step("policy resource", json.loads(policy.contents[0].text)["trading"]["enabled"] is True)
        pending = await call(agent, "promote_strategy", {"strategy_id": strategy["strategy_id"], "mode": "paper"})
        step("pending approval", pending["status"] == "pending_approval")

        human = await connect(stack, url, human_key)
        await call(human, "session_context", {"prompt": "Review the pending promotion."})
        listed = await call(human, "list_approvals", {"status": "pending"})
        step("the person sees it", any(a["approval_id"] == pending["approval_id"] for a in listed["approvals"]))
        decided = await call(human, "decide_approval", {"approval_id": pending["approval_id"], "decision": "approve", "note": "paper only"})
        step("approved and executed", decided["status"] == "executed")
        polled = await call(agent, "get_approval", {"approval_id": pending["approval_id"]})
        step("the agent sees the outcome", polled["status"] == "executed")

    # The trace, replayed from seq 0 over SSE with the human key.
    base = url.rsplit("/mcp", 1)[0]
    events: list[dict[str, Any]] = []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {human_key}"}, timeout=30.0) as http:
        async with http.stream("GET", f"{base}/api/sessions/{sid}/events/stream?after=0") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    last = events[-1]
                    if last["type"] == "tool_result" and last["payload"].get("name") == "get_approval":
                        break
    seqs = [e["seq"] for e in events]
    step("trace is gap-free from seq 1", seqs == list(range(1, len(seqs) + 1)), seqs=seqs)
    kinds = [e["type"] for e in events]
    order = ["session_open", "reasoning", "tool_call", "tool_result", "run_transition", "strategy_proposed",
             "denial", "approval"]
    firsts = [kinds.index(k) for k in order]
    step("every kind of step, in order", firsts == sorted(firsts), kinds=kinds)
    tools_called = [e["payload"]["name"] for e in events if e["type"] == "tool_call"]
    story = ["session_context", "search_skills", "describe_skill", "get_price_history", "run_skill",
             "propose_strategy", "run_skill", "get_artifact", "promote_strategy", "promote_strategy", "get_approval"]
    # subscribe_run calls depend on timing; the rest is the story's order.
    tools_called = [t for t in tools_called if t != "subscribe_run"]
    step("tool calls in story order", tools_called == story, tools=tools_called)

    secrets = [k.split("_", 3)[3] for k in (agent_key, human_key)]
    secrets += [x for x in os.environ.get("STORY_SECRETS", "").split(",") if x]
    leaked = [s for s in secrets if any(s in r for r in responses)]
    step("no response carries a secret", not leaked, responses=len(responses), secrets=len(secrets))
    print("OK: the story passed", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
