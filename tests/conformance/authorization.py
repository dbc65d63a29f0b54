#!/usr/bin/env python3
"""The official MCP conformance suite's authorization-server scenarios against the built-in
authorization server of a running `ithaca up`, with a person consenting in headless Chromium.

`conformance authorization` runs `authorization-server-metadata-endpoint` (RFC 8414 metadata at
the issuer's well-known URL) and then `authorization-code-grant`: it starts a callback server on
http://127.0.0.1:PORT/callback, prints the authorization URL for a person to open, waits for the
redirect, and exchanges the code with PKCE at the token endpoint. The suite takes a client id
that is already registered, so this script registers one first (dynamic client registration,
the same way an agent does). The person is played by the browser: it opens the printed URL,
signs in to the console with the human key, and presses Allow on the consent page. Nothing on
the server side is relaxed for the test.

Usage: authorization.py CONFORMANCE_BIN ISSUER HUMAN_KEY OUT_DIR
Exit status: the suite's (0 when every check passed), 1 on any other failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from browser import Browser, free_port  # noqa: E402

SCENARIOS = ("authorization-server-metadata-endpoint", "authorization-code-grant")


def register(issuer: str, redirect_uri: str) -> str:
    body = json.dumps(
        {"client_name": "MCP conformance suite", "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none"}
    ).encode()
    req = urllib.request.Request(
        f"{issuer}/register", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status != 201:
            raise SystemExit(f"authorization: /register answered {r.status}")
        return json.loads(r.read())["client_id"]


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    conformance, issuer, human_key, out = sys.argv[1:]
    issuer = issuer.rstrip("/")
    os.makedirs(out, exist_ok=True)
    port = free_port()
    client_id = register(issuer, f"http://127.0.0.1:{port}/callback")
    cmd = [
        conformance, "authorization",
        "--url", issuer,
        "--client-id", client_id,
        "--resource", f"{issuer}/mcp",
        "--port", str(port),
        "-o", out,
    ]  # fmt: skip
    print("authorization: " + " ".join(cmd), flush=True)
    suite = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    auth_url: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert suite.stdout is not None
        for line in suite.stdout:
            lines.append(line)
            if line.startswith(f"{issuer}/authorize?") and not auth_url:
                auth_url.append(line.strip())
                seen.set()
        seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    status = 1
    shown: dict[str, str] = {}
    try:
        # The suite prints the URL once its metadata scenario has passed; it waits 5 minutes at most.
        if not seen.wait(300) or not auth_url:
            print("authorization: the suite printed no authorization URL", file=sys.stderr)
        else:
            with Browser() as person:
                person.goto(auth_url[0])
                shown = person.consent(human_key)
                # The browser is now at the suite's callback page.
                landed = person.url()
                if not landed.startswith(f"http://127.0.0.1:{port}/callback?"):
                    print(f"authorization: after Allow the browser is at {landed}", file=sys.stderr)
        status = suite.wait(120)
    except subprocess.TimeoutExpired:
        print("authorization: the suite did not finish", file=sys.stderr)
        status = 1
    finally:
        if suite.poll() is None:
            suite.kill()
            suite.wait()
        reader.join(10)
    output = "".join(lines)
    print(output)
    if shown:
        print(f"authorization: the consent page showed {json.dumps(shown)}")
    # Every scenario ran, and none of its checks failed (the exit status says the latter).
    for scenario in SCENARIOS:
        if f"=== Running scenario: {scenario} ===" not in output:
            print(f"authorization: scenario {scenario} did not run", file=sys.stderr)
            status = status or 1
    if shown.get("client_id") != client_id:
        print(f"authorization: the consent page did not name client {client_id}", file=sys.stderr)
        status = status or 1
    print(f"authorization: {'ok' if status == 0 else 'FAILED'} (results in {out})")
    return 0 if status == 0 else 1


if __name__ == "__main__":
    start = time.monotonic()
    rc = main()
    print(f"authorization: {time.monotonic() - start:.1f} s")
    sys.exit(rc)
