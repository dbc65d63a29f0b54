#!/usr/bin/env python3
"""The official Python SDK's OAuth client (`mcp` 2.3, `OAuthClientProvider`) against `ithaca up`,
with a person at headless Chromium (browser.py, WebDriver).

What happens, each step checked:

1. The client's first request is refused (401); it reads the protected resource metadata the
   `WWW-Authenticate` header names, then the authorization server's metadata.
2. It registers (dynamic client registration, `POST /register`), or with `--cimd` uses the URL
   of a client metadata document this script serves on loopback as its client_id (no
   registration; the server fetches the document).
3. It sends the person to `/authorize`: the browser signs in to the console with the human key
   and presses Allow on the consent page, which names the app.
4. It exchanges the code (PKCE) at `/token`, lists tools and calls `session_context` and
   `session_close`.
5. It refreshes: the SDK's own expiry clock is set past the access token's life (what ten
   minutes would do), so its next request first spends the refresh token at `/token`; the new
   access and refresh tokens differ from the old (rotation) and the call works.
6. The person revokes the app under Connected apps (`/console/apps`) in the browser. The edge
   then answers 401 to the access token (within its cache bound), the refresh token is refused
   (`invalid_grant`), and the SDK client, refused with 401, is sent back to consent.

Usage: oauth_client.py URL HUMAN_KEY [--mode 2026-07-28|legacy] [--cimd]
Exits 0 when every step passed, 1 otherwise.

About `--cimd`: the SDK accepts only an https client_metadata_url (as the spec asks of real
clients), and this build's server fetches documents only over plain HTTP from loopback, and only
when the stack runs with ITHACA_OAUTH_ALLOW_PRIVATE_METADATA=1 (its test mode). So the URL is set
on the provider's context after construction, skipping only the constructor's https check; the
SDK's own CIMD path (server advertises `client_id_metadata_document_supported`, no registration,
the URL is the client_id) then runs unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import httpx2
from browser import Browser
from mcp.client import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp_types import Implementation

# How long the edge may keep accepting a revoked token (its key-cache bound is 5 s), with room.
REVOCATION_BOUND_SECS = 20.0


class StepFailed(Exception):
    pass


class SentToConsentAgain(Exception):
    """The SDK asked for the person's consent again (after the app was revoked)."""


def log(step: str, ok: bool = True, **detail: Any) -> None:
    print(json.dumps({"step": step, "ok": ok, **detail}, default=str), flush=True)


def check(cond: bool, what: str, **detail: Any) -> None:
    log(what, cond, **detail)
    if not cond:
        raise StepFailed(what)


class Loopback:
    """The client's own loopback server: the OAuth redirect (`/callback`) and, for `--cimd`,
    its client metadata document (`/client-<name>.json`)."""

    def __init__(self, client_name: str) -> None:
        self.callbacks: queue.Queue[dict[str, str]] = queue.Queue()
        self.document_fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                path, _, query = self.path.partition("?")
                if path == "/callback":
                    outer.callbacks.put(dict(urllib.parse.parse_qsl(query)))
                    self._reply(200, "text/plain", b"Signed in; you can close this page.")
                elif path == outer.document_path:
                    outer.document_fetches += 1
                    self._reply(200, "application/json", json.dumps(outer.document()).encode())
                else:
                    self._reply(404, "text/plain", b"not found")

            def _reply(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.redirect_uri = f"{self.base}/callback"
        self.client_name = client_name
        self.document_path = f"/client-{int(time.time() * 1000)}.json"
        self.document_url = f"{self.base}{self.document_path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def document(self) -> dict[str, Any]:
        return {
            "client_id": self.document_url,
            "client_name": self.client_name,
            "redirect_uris": [self.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class MemoryStorage:
    """Token storage that remembers every token set it was given."""

    def __init__(self) -> None:
        self.tokens: list[OAuthToken] = []
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def raw(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def list_tools_raw(url: str, token: str) -> tuple[int, dict[str, str]]:
    """A well-formed 2026-07-28 tools/list with `token`; the status and headers."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "oauth-client-check", "version": "1"},
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}).encode()
    status, headers, _ = raw(
        "POST",
        url,
        body,
        {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/list",
        },
    )
    return status, headers


async def run(args: argparse.Namespace) -> None:
    url = args.url
    issuer = url.removesuffix("/mcp")
    name = f"Ithaca OAuth test ({'CIMD' if args.cimd else 'DCR'}, {args.mode})"
    loopback = Loopback(name)
    person = await anyio.to_thread.run_sync(Browser)
    storage = MemoryStorage()
    seen: list[tuple[str, str, int, str]] = []  # method, url, status, form grant_type
    consents: list[dict[str, str]] = []
    revoked = False

    async def on_response(response: httpx2.Response) -> None:
        request = response.request
        grant = ""
        if request.method == "POST" and str(request.url).endswith("/token"):
            grant = dict(urllib.parse.parse_qsl(request.content.decode())).get("grant_type", "")
        seen.append((request.method, str(request.url).split("?")[0], response.status_code, grant))

    async def redirect_handler(authorization_url: str) -> None:
        parsed = urllib.parse.urlsplit(authorization_url)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        log("sent to consent", True, endpoint=f"{parsed.scheme}://{parsed.netloc}{parsed.path}",
            client_id=query.get("client_id"), resource=query.get("resource"), scope=query.get("scope"))  # fmt: skip
        if revoked:
            consents.append({"again": "true"})
            raise SentToConsentAgain("the client was sent to the person's consent again")
        check(authorization_url.startswith(f"{issuer}/authorize?"), "the authorization endpoint is the edge's")
        check(query.get("resource") == url, "the authorization request names the MCP URL as resource")
        check(query.get("code_challenge_method") == "S256", "PKCE S256")

        def consent() -> dict[str, str]:
            person.goto(authorization_url)
            shown = person.consent(args.human_key)
            shown["landed"] = person.url().split("?")[0]
            return shown

        shown = await anyio.to_thread.run_sync(consent)
        consents.append(shown)
        log("the person allowed", True, **shown)

    async def callback_handler() -> AuthorizationCodeResult:
        params = await anyio.to_thread.run_sync(lambda: loopback.callbacks.get(timeout=60))
        check("code" in params, "the redirect carries a code", error=params.get("error"))
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    metadata = OAuthClientMetadata(
        client_name=name,
        redirect_uris=[loopback.redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    if args.cimd:
        # See the module docstring: only the constructor's https check is skipped.
        provider.context.client_metadata_url = loopback.document_url

    @asynccontextmanager
    async def connect() -> AsyncIterator[Client]:
        """The SDK client over streamable HTTP, authenticated by `provider`."""
        async with httpx2.AsyncClient(
            auth=provider, timeout=httpx2.Timeout(30.0, read=120.0), event_hooks={"response": [on_response]}
        ) as http:
            async with Client(
                streamable_http_client(url, http_client=http),
                mode=args.mode,
                client_info=Implementation(name="oauth-client-py", version="1.0.0"),
            ) as client:
                yield client

    try:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(connect())
            tools = [t.name for t in (await client.list_tools()).tools]
            log("connected", True, protocol_version=client.protocol_version, tools=len(tools))

            # 1-4: discovery, registration, consent, code exchange, as the SDK did them.
            check(seen[0][1] == url and seen[0][2] == 401, "the first request is refused with 401", first=seen[0])
            gets = [u for m, u, s, _ in seen if m == "GET" and s == 200]
            check(f"{issuer}/.well-known/oauth-protected-resource/mcp" in gets
                  or f"{issuer}/.well-known/oauth-protected-resource" in gets,
                  "the protected resource metadata was read", gets=gets)  # fmt: skip
            prm = provider.context.protected_resource_metadata
            check(prm is not None and str(prm.resource) == url, "the SDK accepted the protected resource metadata")
            check(provider.context.auth_server_url == issuer, "the authorization server is the one it names",
                  auth_server=provider.context.auth_server_url)  # fmt: skip
            check(f"{issuer}/.well-known/oauth-authorization-server" in gets
                  or f"{issuer}/.well-known/openid-configuration" in gets,
                  "the authorization server metadata was read", gets=gets)  # fmt: skip
            registrations = [s for m, u, s, _ in seen if m == "POST" and u == f"{issuer}/register"]
            client_id = storage.client_info.client_id if storage.client_info else ""
            if args.cimd:
                check(registrations == [], "no registration (client metadata document)")
                check(client_id == loopback.document_url, "the client_id is the document's URL", client_id=client_id)
                check(loopback.document_fetches >= 1, "the server fetched the document",
                      fetches=loopback.document_fetches)  # fmt: skip
            else:
                check(registrations == [201], "registered once (dynamic client registration)", statuses=registrations)
            check(len(consents) == 1, "the person was asked once")
            check(consents[0]["signed_in_here"] == "true", "the person signed in at the browser")
            check(consents[0]["client_id"] == client_id, "the consent page names the client id")
            check(consents[0]["client_name"].strip("“”") == name, "the consent page names the app")
            check(consents[0]["landed"] == loopback.redirect_uri, "Allow sends the browser back to the client")
            exchanges = [s for m, u, s, g in seen if u == f"{issuer}/token" and g == "authorization_code"]
            check(exchanges == [200], "the code was exchanged", statuses=exchanges)
            check(len(storage.tokens) == 1 and bool(storage.tokens[0].refresh_token), "an access and a refresh token")
            check("session_context" in tools and "session_close" in tools, "tools listed", tools=len(tools))

            opened = await client.call_tool("session_context", {"prompt": f"oauth research ({args.mode})"})
            session_id = (opened.structured_content or {}).get("session_id")
            check(not opened.is_error and bool(session_id), "session_context called", session_id=session_id)

            # 5: refresh. The SDK's clock says the access token is past its life.
            first = storage.tokens[-1]
            provider.context.token_expiry_time = time.time() - 1
            closed = await client.call_tool("session_close", {})
            refreshes = [s for m, u, s, g in seen if u == f"{issuer}/token" and g == "refresh_token"]
            check(refreshes == [200], "the SDK refreshed at /token", statuses=refreshes)
            second = storage.tokens[-1]
            check(len(storage.tokens) == 2, "new tokens stored")
            check(second.access_token != first.access_token, "a new access token")
            check(bool(second.refresh_token) and second.refresh_token != first.refresh_token,
                  "the refresh token rotated")  # fmt: skip
            check(not closed.is_error, "session_close called with the refreshed token",
                  structured=closed.structured_content)  # fmt: skip
            check(list_tools_raw(url, second.access_token)[0] == 200, "the refreshed token works")

        # 6: the person revokes the app in the console.
        n = await anyio.to_thread.run_sync(lambda: person.revoke_app(issuer, args.human_key, client_id))
        check(n == 1, "the person revoked the app under Connected apps", grants=n)
        revoked = True
        deadline = time.monotonic() + REVOCATION_BOUND_SECS
        while True:
            status, headers = list_tools_raw(url, second.access_token)
            if status == 401 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.25)
        challenge = headers.get("WWW-Authenticate", headers.get("www-authenticate", ""))
        check(status == 401 and "resource_metadata=" in challenge,
              "the revoked access token is refused with 401", status=status, challenge=challenge)  # fmt: skip
        form = urllib.parse.urlencode(
            {"grant_type": "refresh_token", "refresh_token": second.refresh_token or "", "client_id": client_id}
        ).encode()
        status, _, body = raw("POST", f"{issuer}/token", form,
                              {"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        error = json.loads(body or b"{}").get("error")
        check(status == 400 and error == "invalid_grant", "the refresh token is refused", status=status, error=error)
        # The SDK client, holding the revoked tokens, tries again in a new connection.
        before = len(seen)
        failure: list[BaseException] = []
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(connect())
                await client.call_tool("session_context", {"prompt": "after revocation"})
        except Exception as e:  # the SDK surfaces the consent failure through its transport's task group
            failure = leaves(e)
            log("the SDK client's call failed", True, errors=[f"{type(x).__name__}: {x}"[:200] for x in failure])
        after = [(m, u, s) for m, u, s, _ in seen[before:]]
        check(bool(failure), "the SDK client's call is refused after revocation", responses=after)
        check(("POST", url, 401) in after, "the edge answered the SDK client 401", responses=after)
        check(any(isinstance(x, SentToConsentAgain) for x in failure) and consents[-1] == {"again": "true"},
              "the SDK client was sent back to consent")  # fmt: skip
    finally:
        await anyio.to_thread.run_sync(person.close)
        loopback.close()


def leaves(e: BaseException) -> list[BaseException]:
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in leaves(sub)]
    return [e]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("human_key")
    p.add_argument("--mode", default="2026-07-28", choices=["2026-07-28", "legacy"])
    p.add_argument("--cimd", action="store_true", help="a client metadata document instead of registration")
    args = p.parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), timeout=300))
    except Exception as e:
        for leaf in leaves(e):
            print(f"FAILED: {type(leaf).__name__}: {leaf}", file=sys.stderr)
        return 1
    print("OK: all steps passed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
