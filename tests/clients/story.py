#!/usr/bin/env python3
"""The seed-002 research story through the official Python MCP SDK against a
running `ithaca up`: open a session, discover skills, pull prices, compute
realised volatility, propose and backtest a momentum strategy, fetch the SVG
artifact (and read its URI back), try to promote it (refused), let an
administrator allow paper trading, promote again (pending), approve it with a
human key, close the session, and read the whole trace back from seq 0 over
SSE. Every response is kept and finally searched for the secrets of the keys
used: none may appear.

Runs on both SDK lines, whichever `mcp` the interpreter has:
  * `mcp` 2.x: `mcp.client.Client` (+ httpx2), `--mode 2026-07-28|legacy|auto`;
  * `mcp` 1.x: `mcp.ClientSession` + `streamablehttp_client` / `stdio_client`
    (+ httpx), always the initialize handshake; `--protocol-version V` makes it
    offer V instead of the SDK's LATEST_PROTOCOL_VERSION (e.g. 2025-03-26 or
    2024-11-05 from the latest 1.x).

Usage:
  [STORY_SECRETS=a,b] story.py [OPTIONS] URL AGENT_KEY HUMAN_KEY -- POLICY_COMMAND...   (the full story)
  story.py [OPTIONS] --smoke URL AGENT_KEY                                              (the smoke path)
  story.py [OPTIONS] --stdio -- CMD ARGS...             (the smoke path against a stdio server, e.g. ithaca mcp)
  STORY_SECRETS: further strings (provider credentials, connection details
  configured before the story) that no response may contain.
  POLICY_COMMAND is run (once) to allow paper trading, e.g.
  `ithaca policy set --trading on --data-dir DIR`; trading must be off when the story starts.

The smoke path: list tools, a gated tool before session_context (a clean tool
error), session_context, a data tool, run_skill, read resources named by tool
results, session_close.

Checks are of two kinds: a failed *step* ends the run (what follows depends on
it); a failed *check* is reported and the run goes on. One JSON line per step
or check on stdout; at the end a FAILED line per failed check. Exit 0 when
everything passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import warnings
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

MCP_VERSION = importlib.metadata.version("mcp")
MCP_MAJOR = int(MCP_VERSION.split(".")[0])
SDK = f"python mcp {MCP_VERSION}"

try:
    import httpx2 as httpx  # mcp 2.x
except ImportError:  # mcp 1.x
    import httpx  # type: ignore[no-redef]

try:
    import jsonschema
except ImportError:  # not every 1.x pulls it in
    jsonschema = None  # type: ignore[assignment]

responses: list[str] = []
failed: list[str] = []


def _emit(kind: str, name: str, ok: bool, detail: dict[str, Any]) -> None:
    print(json.dumps({kind: name, "ok": ok, **detail}, default=str)[:600], flush=True)


def step(name: str, ok: bool, **detail: Any) -> None:
    """A step the rest depends on: a failure ends the run."""
    _emit("step", name, ok, detail)
    if not ok:
        failed.append(f"{name}: {json.dumps(detail, default=str)[:400]}")
        finish()


def check(name: str, ok: bool, **detail: Any) -> bool:
    """A check whose failure is reported while the run goes on."""
    _emit("check", name, ok, detail)
    if not ok:
        failed.append(f"{name}: {json.dumps(detail, default=str)[:400]}")
    return ok


def finish() -> None:
    if failed:
        for f in failed:
            print(f"FAILED: [{SDK}] {f}", flush=True)
        raise SystemExit(1)
    print(f"OK: [{SDK}] every step passed", flush=True)
    raise SystemExit(0)


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class Conn:
    """One MCP connection, SDK-neutral: every answer is a wire-shaped dict (camelCase keys)."""

    def __init__(self, client: Any, protocol_version: str | None, label: str) -> None:
        self.client = client
        self.protocol_version = protocol_version
        self.label = label
        self.output_schemas: dict[str, dict[str, Any]] = {}

    async def list_tools(self) -> list[dict[str, Any]]:
        tools = [_dump(t) for t in (await self.client.list_tools()).tools]
        self.output_schemas = {t["name"]: t["outputSchema"] for t in tools if t.get("outputSchema")}
        return tools

    async def list_resource_templates(self) -> list[str]:
        listed = _dump(await self.client.list_resource_templates())
        return [t["uriTemplate"] for t in listed.get("resourceTemplates", [])]

    async def call_tool(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = _dump(await self.client.call_tool(name, args))
        responses.append(json.dumps(result))
        return result

    async def read_resource(self, uri: str) -> dict[str, Any]:
        result = _dump(await self.client.read_resource(uri))
        responses.append(json.dumps(result))
        return result


async def connect(stack: AsyncExitStack, args: argparse.Namespace, key: str | None, label: str) -> Conn:
    if MCP_MAJOR >= 2:
        from mcp.client import Client
        from mcp.client.stdio import StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types import Implementation

        if args.stdio:
            server: Any = StdioServerParameters(command=args.stdio[0], args=args.stdio[1:],
                                                env={"MCP_TOKEN": key} if key else None)
        else:
            http = await stack.enter_async_context(
                httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx.Timeout(30.0, read=120.0))
            )
            server = streamable_http_client(args.url, http_client=http)
        client = await stack.enter_async_context(
            Client(server, mode=args.mode, client_info=Implementation(name="ithaca-story", version="1.0.0"))
        )
        return Conn(client, client.protocol_version, label)

    from mcp import ClientSession, types
    from mcp.client.stdio import StdioServerParameters, stdio_client

    if args.protocol_version:
        # ClientSession.initialize offers types.LATEST_PROTOCOL_VERSION, read at call time.
        types.LATEST_PROTOCOL_VERSION = args.protocol_version
    if args.stdio:
        env = None
        if key:
            from mcp.client.stdio import get_default_environment
            env = {**get_default_environment(), "MCP_TOKEN": key}
        read, write = await stack.enter_async_context(
            stdio_client(StdioServerParameters(command=args.stdio[0], args=args.stdio[1:], env=env))
        )
    else:
        with warnings.catch_warnings():  # 1.2x deprecates headers=/timeout= in favour of http_client=
            warnings.simplefilter("ignore", DeprecationWarning)
            from mcp.client.streamable_http import streamablehttp_client

            read, write, _ = await stack.enter_async_context(
                streamablehttp_client(args.url, headers={"Authorization": f"Bearer {key}"},
                                      timeout=timedelta(seconds=30), sse_read_timeout=timedelta(seconds=120))
            )
    session = await stack.enter_async_context(
        ClientSession(read, write, client_info=types.Implementation(name="ithaca-story", version="1.0.0"))
    )
    init = await session.initialize()
    return Conn(session, str(init.protocolVersion), label)


def _text(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def payload(result: dict[str, Any]) -> Any:
    """What an agent reads: the structured content, or (2024-11-05/2025-03-26 have none) the JSON text."""
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    try:
        return json.loads(_text(result))
    except ValueError:
        return None


def validate_output(conn: Conn, name: str, result: dict[str, Any]) -> None:
    """Structured content, where there is any, must conform to the tool's output schema (errors included)."""
    schema = conn.output_schemas.get(name)
    data = result.get("structuredContent")
    if jsonschema is None or schema is None or data is None:
        return
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        check(f"{name}: structuredContent conforms to outputSchema", False,
              is_error=result.get("isError", False), error=e.message, path=list(e.absolute_path), structured=data)
    except jsonschema.SchemaError as e:
        check(f"{name}: outputSchema is a valid JSON Schema", False, error=e.message)


async def call(conn: Conn, name: str, args: dict[str, Any], expect_error: str | None = None,
               hard: bool = True, label: str | None = None) -> Any:
    """Call a tool. With expect_error, the call must come back as a clean tool error (isError) that
    names the code, in structured content or in text."""
    tool, name = name, label or name
    try:
        result = await conn.call_tool(tool, args)
    except Exception as e:  # the SDK refused the answer, or the server answered a protocol error
        (step if hard else check)(name, False, sdk_error=f"{type(e).__name__}: {e}")
        return None
    validate_output(conn, tool, result)
    data = payload(result)
    if expect_error:
        code = (data or {}).get("error") if isinstance(data, dict) else None
        ok = bool(result.get("isError")) and (code == expect_error or expect_error in _text(result))
        (step if hard else check)(name, ok, expected=expect_error, is_error=result.get("isError"),
                                  structured=data, text=_text(result)[:200])
        return result
    (step if hard else check)(name, not result.get("isError"), result=data if data is not None else _text(result)[:300])
    if data is None:
        (step if hard else check)(f"{name}: the result carries its data (structured or JSON text)", False, text=_text(result)[:300])
    return data


def check_schemas(tools: list[dict[str, Any]]) -> None:
    """Integer schemas carry integer bounds and defaults, and no int32 limits leak."""
    bad: list[str] = []

    def walk(path: str, node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer" or (isinstance(node.get("type"), list) and "integer" in node["type"]):
                for k in ("default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                    v = node.get(k)
                    if isinstance(v, float) or v in (-2147483648, 2147483647):
                        bad.append(f"{path}.{k}={v!r}")
            for k, v in node.items():
                walk(f"{path}.{k}", v)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(f"{path}[{i}]", v)

    for t in tools:
        walk(f"{t['name']}.inputSchema", t.get("inputSchema"))
        walk(f"{t['name']}.outputSchema", t.get("outputSchema"))
    check("integer schemas have integer bounds and defaults, no int32 limits", not bad, offenders=bad[:12], count=len(bad))


async def opening(conn: Conn, args: argparse.Namespace, wanted: set[str]) -> list[dict[str, Any]]:
    step("initialize", True, sdk=SDK, protocol_version=conn.protocol_version,
         mode=args.mode if MCP_MAJOR >= 2 else None, offered=args.protocol_version)
    if MCP_MAJOR < 2 and args.protocol_version:
        check("the server negotiates the version offered", conn.protocol_version == args.protocol_version,
              offered=args.protocol_version, negotiated=conn.protocol_version)
    tools = await conn.list_tools()
    names = {t["name"] for t in tools}
    step("tools/list", wanted <= names, missing=sorted(wanted - names))
    check_schemas(tools)
    if conn.protocol_version in ("2024-11-05", "2025-03-26"):
        # Those revisions have no outputSchema / structuredContent.
        with_schema = sorted(t["name"] for t in tools if "outputSchema" in t)
        check(f"no outputSchema at {conn.protocol_version}", not with_schema, tools=with_schema[:8])
    # The error path: a gated tool before session_context is a clean tool error the SDK accepts.
    # Sessions belong to the key, so a run that aborted earlier may have left one open: close it first.
    gated = await call(conn, "get_price_history", {"symbol": "MSFT", "start": "2012-01-02"},
                       expect_error="no_active_session", hard=False)
    if gated is not None and not gated.get("isError"):
        failed.pop()
        print(json.dumps({"note": "a session was left open for this key; closing it and trying again"}), flush=True)
        await conn.call_tool("session_close", {})
        await call(conn, "get_price_history", {"symbol": "MSFT", "start": "2012-01-02"},
                   expect_error="no_active_session", hard=False)
    return tools


async def smoke(args: argparse.Namespace) -> None:
    async with AsyncExitStack() as stack:
        conn = await connect(stack, args, args.agent_key, "agent")
        await opening(conn, args, {"session_context", "get_price_history", "run_skill", "session_close"})
        session = await call(conn, "session_context", {"prompt": "Smoke: MSFT prices and volatility."})
        sid = session["session_id"]
        if args.stdio:
            stream = session.get("trace_stream")
            reachable: Any = None
            if stream:
                try:
                    async with httpx.AsyncClient(timeout=3.0) as http:
                        reachable = (await http.get(stream)).status_code
                except Exception as e:
                    reachable = f"{type(e).__name__}: {e}"
            check("stdio: trace_stream is absent or reachable", not stream or isinstance(reachable, int),
                  trace_stream=stream, got=reachable)
        history = await call(conn, "get_price_history", {"symbol": "MSFT", "start": "2012-01-02", "fields": ["adj_close"]})
        check("price history count is a JSON integer", type(history.get("count")) is int, count=history.get("count"))
        vol = await call(conn, "run_skill", {"skill_id": "vol.realized", "inputs": {"symbol": "MSFT", "window": 21}})
        check("volatility", 0 < float(vol["outputs"]["volatility"]) < 2, outputs=vol.get("outputs"))
        # Optional inputs may be omitted (corr.peers without peers), and a long-poll may wait past 10 s.
        await call(conn, "run_skill", {"skill_id": "corr.peers", "inputs": {"symbol": "AAPL"}}, hard=False,
                   label="run_skill corr.peers without the optional peers")
        await call(conn, "subscribe_run", {"run_id": vol["run_id"], "status": vol["status"], "wait_ms": 12000}, hard=False,
                   label="subscribe_run waiting 12 s")
        for uri in (f"doomberg://sessions/{sid}", f"doomberg://runs/{vol['run_id']}"):
            try:
                read = await conn.read_resource(uri)
                check(f"resources/read {uri.split('/')[2]}", bool(read.get("contents")), uri=uri)
            except Exception as e:
                check(f"resources/read {uri.split('/')[2]}", False, uri=uri, error=f"{type(e).__name__}: {e}")
        closed = await call(conn, "session_close", {})
        check("session closed", (closed or {}).get("status") == "closed", result=closed)


async def astro(args: argparse.Namespace) -> None:
    """The astronomy story (issue 10) against a stack loaded with the real ZTF alerts and catalogs:
    session_context -> list_brokers -> get_broker_alerts -> get_broker_alert_photometry ->
    crossmatch_broker_catalogs, reading back every URI handed out."""
    async with AsyncExitStack() as stack:
        conn = await connect(stack, args, args.agent_key, "agent")
        await opening(conn, args, {"session_context", "list_brokers", "get_broker_alerts",
                                   "get_broker_alert_photometry", "crossmatch_broker_catalogs"})
        await call(conn, "session_context", {"prompt": "What did ZTF see of ZTF17aaacxxf, and what is known near it?"})
        brokers = await call(conn, "list_brokers", {})
        ids = [b.get("broker_id") for b in (brokers or {}).get("brokers", [])]
        step("list_brokers names the archive", "ztf-archive" in ids, brokers=ids)
        alerts = await call(conn, "get_broker_alerts", {"broker_id": "ztf-archive", "objectId": "ZTF17aaacxxf"})
        found = (alerts or {}).get("alerts", [])
        step("the object's alert", len(found) >= 1 and found[0].get("objectId") == "ZTF17aaacxxf", count=len(found))
        first = found[0] if found else {}
        cand = first.get("candidate") or first
        ra, dec, jd = cand.get("ra"), cand.get("dec"), cand.get("jd")
        if None not in (ra, dec, jd):
            cone = await call(conn, "get_broker_alerts", {"broker_id": "ztf-archive", "ra": ra, "dec": dec,
                                                          "radius_arcsec": 5, "jd_start": jd - 30, "jd_end": jd + 1})
            check("a 5-arcsec, 30-day cone finds it", any(a.get("objectId") == "ZTF17aaacxxf" for a in (cone or {}).get("alerts", [])),
                  cone=(cone or {}).get("count"))
        else:
            check("the trimmed alert carries ra, dec and jd", False, alert=first)
        curve = await call(conn, "get_broker_alert_photometry", {"broker_id": "ztf-archive", "objectId": "ZTF17aaacxxf"})
        check("the light curve has its detections", type((curve or {}).get("detections")) is int and curve["detections"] >= 22,
              detections=(curve or {}).get("detections"))
        for key in ("uri", "svg_uri"):
            uri = (curve or {}).get(key)
            try:
                read = await conn.read_resource(uri)
                check(f"resources/read the light curve's {key}", bool(read.get("contents")), uri=uri)
            except Exception as e:
                check(f"resources/read the light curve's {key}", False, uri=uri, error=f"{type(e).__name__}: {e}")
        # A long light curve comes a page at a time: the newest points, then older ones by cursor.
        page = await call(conn, "get_broker_alert_photometry", {"broker_id": "ztf-archive",
                                                                "objectId": "ZTF17aaacxxf", "limit": 5})
        points = (page or {}).get("points") or []
        check("a photometry page holds at most `limit` points and says more are left",
              len(points) == 5 and page.get("truncated") is True and bool(page.get("next_cursor")),
              count=len(points), truncated=(page or {}).get("truncated"))
        if page and page.get("next_cursor"):
            older = await call(conn, "get_broker_alert_photometry", {"broker_id": "ztf-archive", "objectId": "ZTF17aaacxxf",
                                                                     "limit": 5, "cursor": page["next_cursor"]})
            older_points = (older or {}).get("points") or []
            check("the next page holds older points", bool(older_points) and points
                  and max(p["jd"] for p in older_points) <= min(p["jd"] for p in points), count=len(older_points))
        # GW170817's host: NGC 4993.
        match = await call(conn, "crossmatch_broker_catalogs", {"broker_id": "ztf-archive", "ra": 197.450354,
                                                                "dec": -23.381483, "radius_arcsec": 60})
        names = json.dumps(match)
        check("crossmatch finds NGC 4993 near GW170817's host", "4993" in names, match=names[:300])
        # No match is never a bare zero: the answer says what the catalogs hold, and for an alert
        # echoes the survey's own crossmatch.
        empty = await call(conn, "crossmatch_broker_catalogs", {"broker_id": "ztf-archive", "objectId": "ZTF17aaacxxf",
                                                                "radius_arcsec": 1})
        check("a crossmatch states each catalog's coverage", bool((empty or {}).get("coverage")), answer=json.dumps(empty)[:300])
        if not (empty or {}).get("matches"):
            check("a crossmatch without matches says what that means", bool((empty or {}).get("note")),
                  answer=json.dumps(empty)[:300])
        check("a crossmatch of an alert echoes the survey's own crossmatch", bool((empty or {}).get("survey_crossmatch")),
              answer=json.dumps(empty)[:300])
        await call(conn, "get_broker_alerts", {"broker_id": "ztf-archive", "ra": 10, "dec": 10, "radius_arcsec": -1},
                   expect_error="INVALID_ARGUMENT", hard=False, label="a negative radius is a clear tool error")
        await call(conn, "session_close", {})
    secrets = [x for x in os.environ.get("STORY_SECRETS", "").split(",") if x]
    leaked = [x for x in secrets if any(x in r for r in responses)]
    check("no response carries a broker credential or connection detail", not leaked, leaked=len(leaked))


async def gcn(args: argparse.Namespace) -> None:
    """The GCN story (issue 26) against a stack loaded with the real circulars and notices: find an event
    by its name, read its circulars a page at a time, one circular in full, search circulars by words,
    and its extractions, reading back every URI handed out."""
    async with AsyncExitStack() as stack:
        conn = await connect(stack, args, args.agent_key, "agent")
        await opening(conn, args, {"session_context", "get_gcn_events", "get_gcn_event", "get_gcn_circular",
                                   "search_gcn_circulars", "get_gcn_event_extractions"})
        await call(conn, "session_context", {"prompt": "What is known of GRB 230812B?"})
        events = await call(conn, "get_gcn_events", {"partialdateobs": "grb 230812"})
        found = (events or {}).get("events") or []
        step("get_gcn_events finds GRB 230812B by its name", len(found) >= 1
             and any("GRB 230812B" in a for e in found for a in e.get("aliases", [])), events=json.dumps(events)[:300])
        dateobs = found[0]["dateobs"] if found else "GRB 230812B"
        event = await call(conn, "get_gcn_event", {"dateobs": "GRB 230812B"})
        first = (event or {}).get("circulars") or []
        check("an event's circulars come a page at a time (10 by default)", len(first) == 10
              and int(event.get("circular_count", 0)) > 10 and bool(event.get("next_cursor")),
              page=len(first), total=(event or {}).get("circular_count"))
        check("the event's first page stays under 30 KB", len(json.dumps(event)) < 30_000, size=len(json.dumps(event)))
        if event and event.get("next_cursor"):
            second = await call(conn, "get_gcn_event", {"dateobs": dateobs, "cursor": event["next_cursor"]})
            ids = [c["circular_id"] for c in (second or {}).get("circulars") or []]
            check("the next page continues where the first ended", bool(ids) and first
                  and min(ids) > max(c["circular_id"] for c in first), ids=ids[:3])
        for uri in [(event or {}).get("uri")]:
            try:
                read = await conn.read_resource(uri)
                check("resources/read the event's uri", bool(read.get("contents")), uri=uri)
            except Exception as e:
                check("resources/read the event's uri", False, uri=uri, error=f"{type(e).__name__}: {e}")
        if first:
            one = await call(conn, "get_gcn_circular", {"circular_id": first[0]["circular_id"]})
            check("get_gcn_circular reads one circular in full", bool((one or {}).get("body"))
                  and (one or {}).get("circular_id") == first[0]["circular_id"], circular=json.dumps(one)[:200])
        hits = await call(conn, "search_gcn_circulars", {"query": "ZTF afterglow", "dateobs": dateobs})
        circulars = (hits or {}).get("circulars") or []
        check("search_gcn_circulars finds circulars holding every word, with a snippet, without bodies",
              bool(circulars) and all(c.get("snippet") and not c.get("body") for c in circulars),
              count=(hits or {}).get("total"))
        extractions = await call(conn, "get_gcn_event_extractions", {"dateobs": dateobs})
        check("the event's circulars yield extractions", int((extractions or {}).get("total", 0)) > 0,
              total=(extractions or {}).get("total"))
        await call(conn, "get_gcn_circular", {"circular_id": -1}, expect_error="INVALID_ARGUMENT", hard=False,
                   label="an impossible circular id is a tool error")
        await call(conn, "session_close", {})


SEED_002 = ("Research AAPL — pull price history, screen peers, check fundamentals and insider activity, "
            "propose a momentum strategy, and backtest it")


async def fundamentals(args: argparse.Namespace) -> None:
    """Seed 002's research story (issue 25) against a stack loaded with the SEC EDGAR files of
    ../shared/data/fundamentals: prices, a peer screen, point-in-time fundamentals, insider
    activity, a momentum strategy and its backtest held only while TTM EPS grows; every step is
    answered from the real data and its tool call is in the session's trace, in the story's order."""
    async with AsyncExitStack() as stack:
        agent = await connect(stack, args, args.agent_key, "agent")
        await opening(agent, args, {"session_context", "get_price_history", "screen_peers", "get_fundamentals",
                                    "get_filings", "get_insider_activity", "propose_strategy", "run_skill"})
        session = await call(agent, "session_context", {"prompt": SEED_002})
        sid = session["session_id"]
        history = await call(agent, "get_price_history", {"symbol": "AAPL", "start": "2009-07-01", "end": "2010-06-30"})
        step("a year of AAPL's prices", type(history.get("count")) is int and history["count"] > 240, count=history.get("count"))
        screen = await call(agent, "screen_peers", {"symbols": ["AAPL", "MSFT", "IBM", "GOOG"], "date": "2010-06-30"})
        rows = {r.get("symbol"): r for r in (screen or {}).get("rows", [])}
        step("the screen ranks all four", set(rows) == {"AAPL", "MSFT", "IBM", "GOOG"}, rows=sorted(rows))
        pe = {m.get("metric"): m for m in rows["AAPL"].get("metrics", [])}.get("pe") or {}
        check("AAPL's P/E at 2010-06-30 is a number from the bars and TTM EPS",
              isinstance(pe.get("value"), (int, float)) and 5 < pe["value"] < 60, pe=pe)
        facts = await call(agent, "get_fundamentals", {"symbol": "AAPL", "as_of": "2019-02-01"})
        quarter = next((p for p in (facts or {}).get("periods", []) if p.get("period_end") == "2018-12-29"), {})
        items = {i.get("item"): i for i in quarter.get("items", [])}
        check("FY2019 Q1 revenue, net income and diluted EPS as filed",
              [items.get(k, {}).get("value") for k in ("revenue", "net_income", "eps_diluted")]
              == [84310000000, 19965000000, 4.18], items=sorted(items))
        source = items.get("revenue", {}).get("source") or {}
        check("each value names its filing", source.get("form") == "10-Q" and bool(source.get("accession")), source=source)
        earlier = await call(agent, "get_fundamentals", {"symbol": "AAPL", "as_of": "2019-01-15"})
        check("as_of before the 10-Q's filing hides it",
              all(p.get("period_end") != "2018-12-29" for p in (earlier or {}).get("periods", [])))
        try:
            read = await agent.read_resource((facts or {}).get("uri", ""))
            check("the fundamentals URI reads back", bool(read.get("contents")), uri=(facts or {}).get("uri"))
        except Exception as e:
            check("the fundamentals URI reads back", False, uri=(facts or {}).get("uri"), error=f"{type(e).__name__}: {e}")
        filings = await call(agent, "get_filings", {"symbol": "AAPL", "form": "10-K", "limit": 3})
        check("the filing index lists 10-Ks", bool((filings or {}).get("filings")), filings=str(filings)[:200])
        insider = await call(agent, "get_insider_activity", {"symbol": "AAPL", "from": "2012-01-01", "to": "2012-12-31"})
        months = (insider or {}).get("months", [])
        step("Form 4 filings by month in 2012", type((insider or {}).get("form4_filings")) is int
             and insider["form4_filings"] > 0 and sum(m.get("form4_filings", 0) for m in months) == insider["form4_filings"],
             insider=str(insider)[:300])
        await call(agent, "get_fundamentals", {"symbol": "ZZZZ"}, expect_error="NOT_FOUND", hard=False,
                   label="a company with no CIK is a clear tool error")
        strategy = await call(agent, "propose_strategy", {"name": "AAPL 6m momentum", "universe": ["AAPL"],
                                                          "lookback": 126, "rebalance": 21})
        backtest = await call(agent, "run_skill", {"skill_id": "backtest.momentum", "inputs": {
            "strategy_id": strategy["strategy_id"], "fundamental_filter": "ttm_eps_growth",
            "start": "2008-01-01", "end": "2013-12-31"}})
        for _ in range(10):
            if backtest["status"] not in ("queued", "running"):
                break
            backtest = await call(agent, "subscribe_run", {"run_id": backtest["run_id"], "status": backtest["status"],
                                                           "wait_ms": 10000})
        step("the backtest held AAPL only while its TTM EPS grew", backtest["status"] == "succeeded"
             and type(backtest.get("outputs", {}).get("filtered_out")) is int, status=backtest["status"],
             outputs=str(backtest.get("outputs"))[:300])
        await call(agent, "session_close", {})

    base = args.url.rsplit("/mcp", 1)[0]
    events: list[dict[str, Any]] = []

    async def read_trace() -> None:
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {args.human_key}"}, timeout=30.0) as http:
            async with http.stream("GET", f"{base}/api/sessions/{sid}/events/stream?after=0") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))

    try:
        await asyncio.wait_for(read_trace(), timeout=10.0)
    except asyncio.TimeoutError:
        pass
    seqs = [e["seq"] for e in events]
    step("the trace is gap-free from seq 1", bool(seqs) and seqs == list(range(1, len(seqs) + 1)), events=len(seqs))
    called = [e["payload"]["name"] for e in events if e["type"] == "tool_call" and e["payload"]["name"] != "subscribe_run"]
    expected = ["session_context", "get_price_history", "screen_peers", "get_fundamentals", "get_fundamentals",
                "get_filings", "get_insider_activity", "get_fundamentals", "propose_strategy", "run_skill", "session_close"]
    step("every step of the story is in the trace, in order", called == expected, tools=called)
    results = [e for e in events if e["type"] == "tool_result"]
    check("every call's result is recorded", len(results) >= len(expected), results=len(results))


def conn_label(args: argparse.Namespace) -> str:
    return args.mode if MCP_MAJOR >= 2 else (args.protocol_version or "latest")


async def filters(args: argparse.Namespace) -> None:
    """The filter story (issue 11, seed 003) against a stack loaded with the real ZTF alerts: a person
    opens a session on a new filter, the agent joins it and sees the filter's write tools, goes
    defaults -> preview -> version -> validate -> activate, the activation waits for a person, the
    person approves, the version is active, and the record of the answer offers the previewed
    pipeline."""
    async with AsyncExitStack() as stack:
        person = await connect(stack, args, args.human_key, "person")
        agent = await connect(stack, args, args.agent_key, "agent")
        await opening(agent, args, {"session_context", "get_filter_targets", "get_counterpart_search_defaults",
                                    "run_broker_filter", "get_broker_filter"})
        await call(person, "session_context", {"prompt": "Set up a filter for bright transients"})
        targets = await call(person, "get_filter_targets", {})
        group = ((targets or {}).get("groups") or [{}])[0].get("group_id")
        made = await call(person, "post_filter", {"name": f"bright ({SDK} {conn_label(args)} {os.getpid()})", "group_id": group,
                                                   "stream_id": "ztf-public"})
        filter_id = (made or {}).get("filter_id")
        opened = await call(person, "session_context", {"prompt": "Catch bright transients on the public stream",
                                                         "subject_kind": "filter", "subject_id": filter_id})
        session_id = (opened or {}).get("session_id")
        await call(agent, "session_context", {"prompt": "Joining the filter's session", "session_id": session_id})
        names = {t["name"] for t in await agent.list_tools()}
        step("the filter's write tools are offered in its session",
             {"post_broker_filter_version", "activate_broker_filter_version"} <= names)
        defaults = await call(agent, "get_counterpart_search_defaults", {})
        check("the defaults suggest sort_order Ascending", "Ascending" in json.dumps(defaults))
        pipeline = [{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]
        await call(agent, "run_broker_filter", {"filter_id": filter_id,
                                                "pipeline": [{"$match": {"candidate.magpfs": {"$lt": 18.5}}}]},
                   expect_error="INVALID_PIPELINE", hard=False, label="a misspelt path is refused")
        preview = await call(agent, "run_broker_filter", {"filter_id": filter_id, "pipeline": pipeline})
        check("the preview evaluated alerts", isinstance((preview or {}).get("evaluated"), int)
              and preview["evaluated"] > 0, preview=preview)
        verdict = await call(agent, "post_broker_filter_version", {"filter_id": filter_id, "pipeline": pipeline})
        step("the version passes", (verdict or {}).get("passed") is True, verdict=verdict)
        version = (verdict or {}).get("version")
        await call(agent, "validate_broker_filter_version", {"filter_id": filter_id, "version": version})
        pending = await call(agent, "activate_broker_filter_version", {"filter_id": filter_id, "version": version})
        step("an agent's activation waits for a person", (pending or {}).get("status") == "pending_approval",
             pending=pending)
        decided = await call(person, "decide_approval", {"approval_id": (pending or {}).get("approval_id"),
                                                         "decision": "approve", "note": "bright is fine"})
        step("the approved activation ran as the agent", (decided or {}).get("status") == "executed", decided=decided)
        read = await call(agent, "get_broker_filter", {"filter_id": filter_id})
        step("the version is active", (read or {}).get("active_version") == version, read=read)
        record = await person.read_resource(f"doomberg://sessions/{session_id}/record")
        text = ((record.get("contents") or [{}])[0]).get("text") or "{}"
        proposal = json.loads(text).get("proposal") or {}
        check("the record offers the previewed pipeline", proposal.get("pipeline") == pipeline, proposal=proposal)
        # The filter is found by name, taken off the stream and deleted, all from its session.
        name = f"bright ({SDK} {conn_label(args)} {os.getpid()})"
        listed = await call(agent, "list_broker_filters", {"search": name})
        check("list_broker_filters finds the filter by its name",
              [f.get("filter_id") for f in (listed or {}).get("filters") or []] == [filter_id], listed=listed)
        await call(agent, "delete_broker_filter", {"filter_id": filter_id}, expect_error="FILTER_ACTIVE", hard=False,
                   label="a running filter cannot be deleted")
        off = await call(agent, "deactivate_broker_filter", {"filter_id": filter_id})
        check("deactivate_broker_filter names the version it stopped", (off or {}).get("previous_version") == version, off=off)
        gone = await call(agent, "delete_broker_filter", {"filter_id": filter_id})
        check("delete_broker_filter counts what it removed", int((gone or {}).get("versions_deleted", 0)) >= 1, gone=gone)
        await call(agent, "get_broker_filter", {"filter_id": filter_id}, expect_error="UNKNOWN_FILTER", hard=False,
                   label="a deleted filter is gone")
        await call(agent, "session_close", {})


async def story(args: argparse.Namespace) -> None:
    url, agent_key, human_key = args.url, args.agent_key, args.human_key
    async with AsyncExitStack() as stack:
        agent = await connect(stack, args, agent_key, "agent")
        await opening(agent, args, {"session_context", "search_skills", "describe_skill", "get_price_history",
                                    "run_skill", "propose_strategy", "get_artifact", "promote_strategy",
                                    "get_approval", "session_close"})
        templates = await agent.list_resource_templates()
        step("resources/templates/list", "doomberg://runs/{run_id}" in templates, templates=sorted(templates))

        session = await call(agent, "session_context", {"prompt": "Research MSFT momentum: pull prices, check volatility, propose and backtest a strategy."})
        sid = session["session_id"]
        found = await call(agent, "search_skills", {"query": "volatility"})
        step("search finds vol.realized", found["skills"][0]["skill_id"] == "vol.realized")
        await call(agent, "describe_skill", {"skill_id": "backtest.momentum"})
        history = await call(agent, "get_price_history", {"symbol": "MSFT", "start": "2012-01-01", "fields": ["adj_close"]})
        step("price history", int(history["count"]) > 200)
        check("price history count is a JSON integer", type(history["count"]) is int, count=history["count"])
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
        try:
            artifact = await agent.call_tool("get_artifact", {"artifact_id": svg["artifact_id"]})
        except Exception as e:
            step("get_artifact", False, sdk_error=f"{type(e).__name__}: {e}")
        validate_output(agent, "get_artifact", artifact)
        resource = artifact["content"][0]["resource"]
        step("svg artifact", resource["text"].startswith("<svg") and "<polyline" in resource["text"])
        # Every URI a tool hands out can be read back.
        try:
            again = await agent.read_resource(resource["uri"])
            check("the artifact's URI reads back", bool(again.get("contents")), uri=resource["uri"])
        except Exception as e:
            check("the artifact's URI reads back", False, uri=resource["uri"], error=f"{type(e).__name__}: {e}")
        run = await agent.read_resource(f"doomberg://runs/{backtest['run_id']}")
        step("run resource", json.loads(run["contents"][0]["text"])["status"] == "succeeded")

        await call(agent, "promote_strategy", {"strategy_id": strategy["strategy_id"], "mode": "paper"}, expect_error="TRADING_DISABLED")
        done = subprocess.run(args.command, capture_output=True, text=True)
        step("administrator allows paper trading", done.returncode == 0, output=done.stdout + done.stderr)
        accounts = await agent.read_resource("doomberg://accounts")
        await agent.read_resource("doomberg://data/providers")
        if os.environ.get("STORY_SECRETS"):
            listed = json.loads(accounts["contents"][0]["text"])["accounts"]
            step("accounts show only that a credential is configured", bool(listed) and all(a["credential_configured"] for a in listed), accounts=listed)
        policy = await agent.read_resource("doomberg://policies/current")
        step("policy resource", json.loads(policy["contents"][0]["text"])["trading"]["enabled"] is True)
        pending = await call(agent, "promote_strategy", {"strategy_id": strategy["strategy_id"], "mode": "paper"})
        step("pending approval", pending["status"] == "pending_approval")

        human = await connect(stack, args, human_key, "human")
        await human.list_tools()
        await call(human, "session_context", {"prompt": "Review the pending promotion."})
        listed = await call(human, "list_approvals", {"status": "pending"})
        step("the person sees it", any(a["approval_id"] == pending["approval_id"] for a in listed["approvals"]))
        decided = await call(human, "decide_approval", {"approval_id": pending["approval_id"], "decision": "approve", "note": "paper only"})
        step("approved and executed", decided["status"] == "executed")
        polled = await call(agent, "get_approval", {"approval_id": pending["approval_id"]})
        step("the agent sees the outcome", polled["status"] == "executed")
        closed = await call(agent, "session_close", {})
        check("session closed", closed.get("status") == "closed", result=closed)

    # The trace, replayed from seq 0 over SSE with the human key. After session_close the stream
    # should say so (a `session_closed` event) and end.
    base = url.rsplit("/mcp", 1)[0]
    events: list[dict[str, Any]] = []
    upto = None  # index just past get_approval's tool_result
    ended = False

    async def read_trace() -> None:
        nonlocal upto, ended
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {human_key}"}, timeout=30.0) as http:
            async with http.stream("GET", f"{base}/api/sessions/{sid}/events/stream?after=0") as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        last = events[-1]
                        if upto is None and last["type"] == "tool_result" and last["payload"].get("name") == "get_approval":
                            upto = len(events)
                ended = True

    try:
        await asyncio.wait_for(read_trace(), timeout=10.0)
    except asyncio.TimeoutError:
        pass
    step("the trace reaches get_approval", upto is not None, events=len(events))
    seqs = [e["seq"] for e in events]
    step("trace is gap-free from seq 1", seqs == list(range(1, len(seqs) + 1)), seqs=seqs)
    kinds = [e["type"] for e in events[:upto]]
    order = ["session_open", "reasoning", "tool_call", "tool_result", "run_transition", "strategy_proposed",
             "denial", "approval"]
    firsts = [kinds.index(k) if k in kinds else -1 for k in order]
    step("every kind of step, in order", -1 not in firsts and firsts == sorted(firsts), kinds=kinds)
    tools_called = [e["payload"]["name"] for e in events[:upto] if e["type"] == "tool_call"]
    expected = ["session_context", "search_skills", "describe_skill", "get_price_history", "run_skill",
                "propose_strategy", "run_skill", "get_artifact", "promote_strategy", "promote_strategy", "get_approval"]
    # subscribe_run calls depend on timing; the rest is the story's order.
    tools_called = [t for t in tools_called if t != "subscribe_run"]
    step("tool calls in story order", tools_called == expected, tools=tools_called)
    tail = [e["type"] for e in events[upto:]]
    check("after session_close the trace says session_closed and the stream ends",
          "session_closed" in tail and ended, tail=tail, stream_ended=ended)
    # Calls in flight at close may still record how they ended (session_close's own tool_result does),
    # so only results may follow session_closed; nothing new starts after it.
    after = tail[tail.index("session_closed") + 1:] if "session_closed" in tail else []
    check("only results of calls in flight follow session_closed", all(k in ("tool_result", "run_transition", "error") for k in after), tail=tail)

    secrets = [k.split("_", 3)[3] for k in (agent_key, human_key)]
    secrets += [x for x in os.environ.get("STORY_SECRETS", "").split(",") if x]
    leaked = [s for s in secrets if any(s in r for r in responses)]
    step("no response carries a secret", not leaked, responses=len(responses), secrets=len(secrets))


def parse(argv: list[str]) -> argparse.Namespace:
    rest: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", nargs="?")
    p.add_argument("agent_key", nargs="?")
    p.add_argument("human_key", nargs="?")
    p.add_argument("--mode", default="2026-07-28", help="mcp 2.x: Client(mode=...): 2026-07-28 | legacy | auto")
    p.add_argument("--protocol-version", help="mcp 1.x: offer this version in initialize (default: the SDK's latest)")
    p.add_argument("--smoke", action="store_true", help="only the smoke path")
    p.add_argument("--astro", action="store_true", help="the astronomy story (a stack loaded with the ZTF alerts and catalogs)")
    p.add_argument("--gcn", action="store_true", help="the GCN story (a stack loaded with the GCN circulars and notices)")
    p.add_argument("--filters", action="store_true", help="the filter story (a stack loaded with the ZTF alerts; needs HUMAN_KEY)")
    p.add_argument("--fundamentals", action="store_true",
                   help="seed 002's story (a stack loaded with ../shared/data/fundamentals; needs HUMAN_KEY for the trace)")
    p.add_argument("--stdio", action="store_true", help="the smoke path against the stdio server after --")
    p.add_argument("--timeout", type=float, default=300.0)
    a = p.parse_args(argv)
    a.command = rest
    if a.stdio:
        a.smoke = True
        if not rest:
            p.error("--stdio needs a command after --")
        a.stdio = rest
        a.agent_key = a.agent_key or a.url  # optional token for the child (MCP_TOKEN)
        a.url = None
    else:
        a.stdio = None
        if not (a.url and a.agent_key):
            p.error("URL and AGENT_KEY are required")
        if (a.filters or a.fundamentals) and not a.human_key:
            p.error("the filter and fundamentals stories need HUMAN_KEY")
        if not a.smoke and not a.astro and not a.gcn and not a.filters and not a.fundamentals and not (a.human_key and rest):
            p.error("the full story needs HUMAN_KEY and -- POLICY_COMMAND")
    if a.protocol_version and MCP_MAJOR >= 2:
        p.error("--protocol-version is for mcp 1.x; mcp 2.x takes --mode")
    return a


def _leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in _leaves(sub)]
    return [e]


def main() -> None:
    args = parse(sys.argv[1:])
    try:
        main_path = (smoke if args.smoke else astro if args.astro else gcn if args.gcn else filters if args.filters
                     else fundamentals if args.fundamentals else story)
        asyncio.run(asyncio.wait_for(main_path(args), timeout=args.timeout))
    except SystemExit:
        raise
    except BaseException as e:  # connection refused, protocol errors, an SDK that gives up
        for leaf in _leaves(e):
            if isinstance(leaf, SystemExit):
                raise leaf
            failed.append(f"aborted: {type(leaf).__name__}: {leaf}")
    finish()


if __name__ == "__main__":
    main()
