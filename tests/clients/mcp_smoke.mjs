#!/usr/bin/env node
// MCP smoke client built on the official TypeScript client (@modelcontextprotocol/client 2.4.x).
//
// Connects to an MCP server, lists tools, calls `session_context` with {"prompt": ...},
// optionally calls one more named tool, and reads a resource. Exit 0 = every step passed,
// 1 = a step failed, 2 = bad usage.
//
//   .ci/tools/bin/node tests/clients/mcp_smoke.mjs URL [--token T] [--mode auto|legacy|2026-07-28] \
//       [--prompt P] [--session-tool NAME] [--tool NAME --tool-args JSON] [--resource URI] [--header 'N: V']
//   .ci/tools/bin/node tests/clients/mcp_smoke.mjs [options] --stdio CMD [ARGS...]
//
// Env fallbacks: MCP_URL, MCP_TOKEN, MCP_MODE, MCP_PROMPT, MCP_SESSION_TOOL, MCP_TOOL,
// MCP_TOOL_ARGS, MCP_RESOURCE. The package is loaded from $MCP_TOOLS_DIR/node
// (default: <repo>/.ci/tools/node, as laid out by tests/clients/install.sh).
//
// --mode maps to ClientOptions.versionNegotiation.mode: 'legacy' (2025 initialize handshake;
// the SDK default), 'auto' (probe server/discover, fall back to initialize) or a version
// string such as '2026-07-28', sent as { pin: '2026-07-28' } (no fallback).

import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const toolsDir = resolve(process.env.MCP_TOOLS_DIR || join(here, '..', '..', '.ci', 'tools'));

async function importFromTools(spec) {
  // ESM imports do not honour NODE_PATH, so resolve the package inside the tools folder
  // and import its ESM entry (exports[subpath].import.default) by file URL.
  const req = createRequire(join(toolsDir, 'node', 'package.json'));
  const [pkgName, sub] = spec.startsWith('@')
    ? [spec.split('/').slice(0, 2).join('/'), spec.split('/').slice(2).join('/')]
    : [spec.split('/')[0], spec.split('/').slice(1).join('/')];
  let cjsEntry;
  try {
    cjsEntry = req.resolve(pkgName);
  } catch (e) {
    throw new Error(`cannot find ${pkgName} under ${toolsDir}/node (run tests/clients/install.sh or set MCP_TOOLS_DIR): ${e.message}`);
  }
  let pkgDir = dirname(cjsEntry);
  while (!readFileSafe(join(pkgDir, 'package.json'))?.includes(`"name": "${pkgName}"`)) {
    const up = dirname(pkgDir);
    if (up === pkgDir) throw new Error(`package.json of ${pkgName} not found`);
    pkgDir = up;
  }
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  const entry = pkg.exports[sub ? `./${sub}` : '.'].import.default;
  return import(pathToFileURL(join(pkgDir, entry)).href);
}

function readFileSafe(p) {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return undefined;
  }
}

function usage(msg) {
  console.error(`usage error: ${msg}`);
  console.error('usage: mcp_smoke.mjs URL [--token T] [--mode auto|legacy|2026-07-28] [--prompt P] [--session-tool NAME]');
  console.error('       [--tool NAME] [--tool-args JSON] [--resource URI] [--header "Name: value"] [--timeout SEC] [--stdio CMD ARGS...]');
  process.exit(2);
}

function parseArgs(argv) {
  const env = process.env;
  const o = {
    url: env.MCP_URL,
    token: env.MCP_TOKEN,
    mode: env.MCP_MODE || 'auto',
    prompt: env.MCP_PROMPT || 'smoke test: what is this session about?',
    sessionTool: env.MCP_SESSION_TOOL || 'session_context',
    tool: env.MCP_TOOL,
    toolArgs: env.MCP_TOOL_ARGS || '{}',
    resource: env.MCP_RESOURCE,
    headers: {},
    timeout: 60,
    stdio: undefined
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      return argv[++i];
    };
    switch (a) {
      case '--token': o.token = val(); break;
      case '--mode': o.mode = val(); break;
      case '--prompt': o.prompt = val(); break;
      case '--session-tool': o.sessionTool = val(); break;
      case '--tool': o.tool = val(); break;
      case '--tool-args': o.toolArgs = val(); break;
      case '--resource': o.resource = val(); break;
      case '--timeout': o.timeout = Number(val()); break;
      case '--header': {
        const h = val();
        const idx = h.indexOf(':');
        if (idx < 1) usage(`bad --header ${h}`);
        o.headers[h.slice(0, idx).trim()] = h.slice(idx + 1).trim();
        break;
      }
      case '--stdio':
        o.stdio = argv.slice(i + 1);
        if (o.stdio[0] === '--') o.stdio.shift();
        i = argv.length;
        break;
      case '-h':
      case '--help':
        usage('help requested');
        break;
      default:
        if (a.startsWith('--')) usage(`unknown option ${a}`);
        o.url = a;
    }
  }
  if (o.stdio !== undefined && o.stdio.length === 0) usage('--stdio needs a command');
  if (o.stdio === undefined && !o.url) usage('a URL (or MCP_URL, or --stdio CMD) is required');
  try {
    o.toolArgs = JSON.parse(o.toolArgs);
  } catch (e) {
    usage(`--tool-args is not JSON: ${e.message}`);
  }
  if (typeof o.toolArgs !== 'object' || o.toolArgs === null || Array.isArray(o.toolArgs)) usage('--tool-args must be a JSON object');
  return o;
}

function negotiation(mode) {
  if (mode === 'legacy' || mode === 'auto') return { mode };
  if (/^\d{4}-\d{2}-\d{2}$/.test(mode)) return { mode: { pin: mode } };
  usage(`--mode must be auto, legacy or a protocol version, got ${mode}`);
}

class StepFailed extends Error {}

function log(step, ok, detail = {}) {
  console.log(JSON.stringify({ step, ok, ...detail }));
}

function summarize(blocks) {
  return (blocks || []).map((b) => {
    const c = { ...b };
    if (typeof c.data === 'string') c.data = `<${c.data.length} base64 chars>`;
    if (typeof c.blob === 'string') c.blob = `<${c.blob.length} base64 chars>`;
    if (typeof c.text === 'string' && c.text.length > 500) c.text = c.text.slice(0, 500) + '...';
    return c;
  });
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const { Client, StreamableHTTPClientTransport } = await importFromTools('@modelcontextprotocol/client');

  const client = new Client(
    { name: 'mcp-smoke-mjs', version: '1.0.0' },
    { capabilities: {}, versionNegotiation: negotiation(o.mode) }
  );

  let transport;
  let target;
  if (o.stdio) {
    const { StdioClientTransport } = await importFromTools('@modelcontextprotocol/client/stdio');
    const env = { ...process.env };
    if (o.token) env.MCP_TOKEN = o.token;
    transport = new StdioClientTransport({ command: o.stdio[0], args: o.stdio.slice(1), env, stderr: 'inherit' });
    target = o.stdio.join(' ');
  } else {
    const headers = { ...o.headers };
    if (o.token) headers.Authorization = `Bearer ${o.token}`;
    // Static headers go in requestInit.headers; an authProvider ({ token: async () => T }) is the
    // alternative when the token can change (it wins over a same-named Authorization header).
    transport = new StreamableHTTPClientTransport(new URL(o.url), { requestInit: { headers } });
    target = o.url;
  }

  const timer = setTimeout(() => {
    console.error(`FAILED: timed out after ${o.timeout}s`);
    process.exit(1);
  }, o.timeout * 1000);

  try {
    await client.connect(transport);
    log('connect', true, {
      target,
      mode: o.mode,
      era: client.getProtocolEra(),
      protocol_version: client.getNegotiatedProtocolVersion(),
      server: client.getServerVersion()
    });

    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    log('tools/list', true, { tools: names });
    for (const wanted of [o.sessionTool, ...(o.tool ? [o.tool] : [])]) {
      if (!names.includes(wanted)) {
        log('tools/list', false, { missing: wanted });
        throw new StepFailed(`tool ${wanted} not listed`);
      }
    }

    const calls = [[o.sessionTool, { prompt: o.prompt }]];
    if (o.tool) calls.push([o.tool, o.toolArgs]);
    let sessionId;
    for (const [name, args] of calls) {
      const r = await client.callTool({ name, arguments: args });
      if (name === o.sessionTool && r.structuredContent) sessionId = r.structuredContent.session_id;
      const detail = { tool: name, is_error: r.isError === true, content: summarize(r.content) };
      if (r.structuredContent !== undefined) detail.structured = r.structuredContent;
      log('tools/call', r.isError !== true, detail);
      if (r.isError === true) throw new StepFailed(`tool ${name} returned isError`);
    }

    // `{session_id}` in --resource is the id session_context returned.
    let uri = o.resource && sessionId ? o.resource.replace('{session_id}', sessionId) : o.resource;
    if (!uri) {
      const { resources } = await client.listResources();
      if (!resources.length) {
        log('resources/list', false, { error: 'server lists no resources and --resource was not given' });
        throw new StepFailed('no resource to read');
      }
      uri = resources[0].uri;
      log('resources/list', true, { resources: resources.map((r) => r.uri) });
    }
    const read = await client.readResource({ uri });
    const ok = Array.isArray(read.contents) && read.contents.length > 0;
    log('resources/read', ok, { uri, contents: summarize(read.contents) });
    if (!ok) throw new StepFailed(`resource ${uri} returned no contents`);
    console.error('OK: all steps passed');
    return 0;
  } catch (e) {
    console.error(`FAILED: ${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`);
    return 1;
  } finally {
    clearTimeout(timer);
    await client.close().catch(() => {});
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`FAILED: ${e?.stack ?? e}`);
    process.exit(1);
  }
);
