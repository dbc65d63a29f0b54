#!/usr/bin/env node
// The research story (the same as story.py) through the Node SDK 1.x line,
// `@modelcontextprotocol/sdk` (`Client` + `StreamableHTTPClientTransport` / `StdioClientTransport`),
// the client most deployed JavaScript agents run. It validates `structuredContent` against the
// tool's `outputSchema` on every call, errors included.
//
//   node story.mjs --sdk PREFIX [--protocol-version V] URL AGENT_KEY HUMAN_KEY -- POLICY_COMMAND...   the full story
//   node story.mjs --sdk PREFIX [--protocol-version V] --smoke URL AGENT_KEY                          the smoke path
//   node story.mjs --sdk PREFIX [--protocol-version V] --stdio -- CMD ARGS...                          smoke over stdio
//
// PREFIX is an npm prefix holding node_modules/@modelcontextprotocol/sdk (tests/clients/install.sh
// makes DIR/node-sdk1 and DIR/node-sdk1-old). --protocol-version makes the client offer V in
// `initialize` instead of the SDK's LATEST_PROTOCOL_VERSION (the request is rewritten on its way out).
// STORY_SECRETS (comma-separated) are further strings no response may contain.
//
// A failed *step* ends the run; a failed *check* is reported and the run goes on. One JSON line per
// step/check on stdout, a FAILED line per failure at the end. Exit 0 when everything passed.

import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { spawnSync } from 'node:child_process';

function usage(msg) {
  console.error(`usage error: ${msg}`);
  console.error('usage: story.mjs --sdk PREFIX [--protocol-version V] [--smoke] URL AGENT_KEY [HUMAN_KEY -- POLICY_COMMAND...]');
  console.error('       story.mjs --sdk PREFIX [--protocol-version V] --stdio -- CMD ARGS...');
  process.exit(2);
}

function parseArgs(argv) {
  const o = { sdk: process.env.MCP_NODE_SDK_DIR, protocolVersion: undefined, smoke: false, stdio: undefined, timeout: 300, pos: [], command: [] };
  const dd = argv.indexOf('--');
  if (dd >= 0) {
    o.command = argv.slice(dd + 1);
    argv = argv.slice(0, dd);
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => (i + 1 < argv.length ? argv[++i] : usage(`${a} needs a value`));
    switch (a) {
      case '--sdk': o.sdk = val(); break;
      case '--protocol-version': o.protocolVersion = val(); break;
      case '--smoke': o.smoke = true; break;
      case '--stdio': o.stdio = true; break;
      case '--timeout': o.timeout = Number(val()); break;
      default:
        if (a.startsWith('--')) usage(`unknown option ${a}`);
        o.pos.push(a);
    }
  }
  if (!o.sdk) usage('--sdk PREFIX (or MCP_NODE_SDK_DIR) is required');
  [o.url, o.agentKey, o.humanKey] = o.pos;
  if (o.stdio) {
    o.smoke = true;
    if (!o.command.length) usage('--stdio needs a command after --');
    o.stdio = o.command;
  } else {
    if (!o.url || !o.agentKey) usage('URL and AGENT_KEY are required');
    if (!o.smoke && (!o.humanKey || !o.command.length)) usage('the full story needs HUMAN_KEY and -- POLICY_COMMAND');
  }
  return o;
}

const o = parseArgs(process.argv.slice(2));
const sdkRoot = join(resolve(o.sdk), 'node_modules', '@modelcontextprotocol', 'sdk');
const SDK_VERSION = JSON.parse(readFileSync(join(sdkRoot, 'package.json'), 'utf8')).version;
const SDK = `node sdk ${SDK_VERSION}`;
const esm = (sub) => import(pathToFileURL(join(sdkRoot, 'dist', 'esm', sub)).href);
const { Client } = await esm('client/index.js');
const { StreamableHTTPClientTransport } = await esm('client/streamableHttp.js');
const { StdioClientTransport } = await esm('client/stdio.js');
const { LATEST_PROTOCOL_VERSION } = await esm('types.js');

const responses = [];
const failed = [];
class Abort extends Error {}

function emit(kind, name, ok, detail) {
  console.log(JSON.stringify({ [kind]: name, ok, ...detail }).slice(0, 600));
}
function step(name, ok, detail = {}) {
  emit('step', name, ok, detail);
  if (!ok) {
    failed.push(`${name}: ${JSON.stringify(detail).slice(0, 400)}`);
    throw new Abort(name);
  }
}
function check(name, ok, detail = {}) {
  emit('check', name, ok, detail);
  if (!ok) failed.push(`${name}: ${JSON.stringify(detail).slice(0, 400)}`);
  return ok;
}
const errText = (e) => `${e?.constructor?.name ?? 'Error'}: ${e?.message ?? e}`;

// One connection. The transport is wrapped to (a) offer --protocol-version in initialize and
// (b) see the negotiated version in the initialize answer (1.11 has no getter for it).
async function connect(key) {
  let transport;
  if (o.stdio) {
    const env = { ...process.env };
    if (key) env.MCP_TOKEN = key;
    transport = new StdioClientTransport({ command: o.stdio[0], args: o.stdio.slice(1), env, stderr: 'inherit' });
  } else {
    transport = new StreamableHTTPClientTransport(new URL(o.url), { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
  }
  const conn = { protocolVersion: undefined, initId: undefined };
  const send = transport.send.bind(transport);
  transport.send = (msg, opts) => {
    if (msg?.method === 'initialize') {
      conn.initId = msg.id;
      if (o.protocolVersion) msg = { ...msg, params: { ...msg.params, protocolVersion: o.protocolVersion } };
    }
    return send(msg, opts);
  };
  let handler;
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    get: () => (handler ? (m, extra) => {
      if (m && m.id !== undefined && m.id === conn.initId && m.result) conn.protocolVersion = m.result.protocolVersion;
      return handler(m, extra);
    } : undefined),
    set: (h) => { handler = h; }
  });
  const client = new Client({ name: 'ithaca-story-node', version: '1.0.0' }, { capabilities: {} });
  await client.connect(transport);
  conn.client = client;
  return conn;
}

// What an agent reads: the structured content, or (2024-11-05/2025-03-26 have none) the JSON text.
function payload(r) {
  if (r.structuredContent !== undefined && r.structuredContent !== null) return r.structuredContent;
  try {
    return JSON.parse(text(r));
  } catch {
    return undefined;
  }
}
const text = (r) => (r?.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');

async function call(conn, tool, args, { expectError, hard = true, label } = {}) {
  const judge = hard ? step : check;
  const name = label ?? tool;
  let r;
  try {
    r = await conn.client.callTool({ name: tool, arguments: args });
  } catch (e) {
    // The SDK refused the answer (e.g. "Structured content does not match the tool's output schema")
    // or the server answered a protocol error.
    judge(name, false, { sdk_error: errText(e) });
    return undefined;
  }
  responses.push(JSON.stringify(r));
  const data = payload(r);
  if (expectError) {
    const ok = r.isError === true && (data?.error === expectError || text(r).includes(expectError));
    judge(name, ok, { expected: expectError, is_error: r.isError, structured: data, text: text(r).slice(0, 200) });
    return r;
  }
  judge(name, r.isError !== true, { result: data ?? text(r).slice(0, 300) });
  if (data === undefined) judge(`${name}: the result carries its data (structured or JSON text)`, false, { text: text(r).slice(0, 300) });
  return data;
}

async function read(conn, uri, hard = false) {
  try {
    const r = await conn.client.readResource({ uri });
    responses.push(JSON.stringify(r));
    return r;
  } catch (e) {
    (hard ? step : check)(`resources/read ${uri}`, false, { error: errText(e) });
    return undefined;
  }
}

async function opening(conn, wanted) {
  step('initialize', true, { sdk: SDK, offered: o.protocolVersion ?? LATEST_PROTOCOL_VERSION, protocol_version: conn.protocolVersion });
  if (o.protocolVersion) {
    check('the server negotiates the version offered', conn.protocolVersion === o.protocolVersion,
      { offered: o.protocolVersion, negotiated: conn.protocolVersion });
  }
  const { tools } = await conn.client.listTools();
  const names = new Set(tools.map((t) => t.name));
  const missing = [...wanted].filter((n) => !names.has(n));
  step('tools/list', missing.length === 0, { missing });
  if (['2024-11-05', '2025-03-26'].includes(conn.protocolVersion)) {
    const withSchema = tools.filter((t) => t.outputSchema).map((t) => t.name);
    check(`no outputSchema at ${conn.protocolVersion}`, withSchema.length === 0, { tools: withSchema.slice(0, 8) });
  }
  // The error path: a gated tool before session_context must be a clean tool error the SDK accepts.
  // Sessions belong to the key, so a run that aborted earlier may have left one open: close it first.
  const gated = await call(conn, 'get_price_history', { symbol: 'MSFT', start: '2012-01-02' }, { expectError: 'no_active_session', hard: false });
  if (gated && gated.isError !== true) {
    failed.pop();
    console.log(JSON.stringify({ note: 'a session was left open for this key; closing it and trying again' }));
    await conn.client.callTool({ name: 'session_close', arguments: {} }).catch(() => {});
    await call(conn, 'get_price_history', { symbol: 'MSFT', start: '2012-01-02' }, { expectError: 'no_active_session', hard: false });
  }
}

async function smoke() {
  const conn = await connect(o.agentKey);
  try {
    await opening(conn, ['session_context', 'get_price_history', 'run_skill', 'session_close']);
    const session = await call(conn, 'session_context', { prompt: 'Smoke: MSFT prices and volatility.' });
    const sid = session.session_id;
    if (o.stdio) {
      let reachable;
      if (session.trace_stream) {
        try {
          reachable = (await fetch(session.trace_stream, { signal: AbortSignal.timeout(3000) })).status;
        } catch (e) {
          reachable = `${errText(e)} ${e?.cause?.code ?? ''}`;
        }
      }
      check('stdio: trace_stream is absent or reachable', !session.trace_stream || typeof reachable === 'number',
        { trace_stream: session.trace_stream, got: reachable });
    }
    const history = await call(conn, 'get_price_history', { symbol: 'MSFT', start: '2012-01-02', fields: ['adj_close'] });
    check('price history count is a JSON integer', Number.isInteger(history?.count), { count: history?.count });
    const vol = await call(conn, 'run_skill', { skill_id: 'vol.realized', inputs: { symbol: 'MSFT', window: 21 } });
    check('volatility', Number(vol.outputs.volatility) > 0 && Number(vol.outputs.volatility) < 2, { outputs: vol.outputs });
    // Optional inputs may be omitted (corr.peers without peers), and a long-poll may wait past 10 s.
    await call(conn, 'run_skill', { skill_id: 'corr.peers', inputs: { symbol: 'AAPL' } },
      { hard: false, label: 'run_skill corr.peers without the optional peers' });
    await call(conn, 'subscribe_run', { run_id: vol.run_id, status: vol.status, wait_ms: 12000 }, { hard: false, label: 'subscribe_run waiting 12 s' });
    for (const uri of [`doomberg://sessions/${sid}`, `doomberg://runs/${vol.run_id}`]) {
      const r = await read(conn, uri);
      if (r) check(`resources/read ${uri.split('/')[2]}`, r.contents?.length > 0, { uri });
    }
    const closed = await call(conn, 'session_close', {});
    check('session closed', closed?.status === 'closed', { result: closed });
  } finally {
    await conn.client.close().catch(() => {});
  }
}

async function story() {
  const agent = await connect(o.agentKey);
  let human;
  let sid;
  try {
    await opening(agent, ['session_context', 'search_skills', 'describe_skill', 'get_price_history', 'run_skill',
      'propose_strategy', 'get_artifact', 'promote_strategy', 'get_approval', 'session_close']);
    const { resourceTemplates } = await agent.client.listResourceTemplates();
    const templates = resourceTemplates.map((t) => t.uriTemplate);
    step('resources/templates/list', templates.includes('doomberg://runs/{run_id}'), { templates });

    const session = await call(agent, 'session_context', { prompt: 'Research MSFT momentum: pull prices, check volatility, propose and backtest a strategy.' });
    sid = session.session_id;
    const found = await call(agent, 'search_skills', { query: 'volatility' });
    step('search finds vol.realized', found.skills[0].skill_id === 'vol.realized');
    await call(agent, 'describe_skill', { skill_id: 'backtest.momentum' });
    const history = await call(agent, 'get_price_history', { symbol: 'MSFT', start: '2012-01-01', fields: ['adj_close'] });
    step('price history', Number(history.count) > 200);
    check('price history count is a JSON integer', Number.isInteger(history.count), { count: history.count });
    const vol = await call(agent, 'run_skill', { skill_id: 'vol.realized', inputs: { symbol: 'MSFT', window: 63 } });
    step('volatility', vol.outputs.volatility > 0 && vol.outputs.volatility < 2);
    const strategy = await call(agent, 'propose_strategy', { name: 'MSFT 6m momentum', universe: ['MSFT'], lookback: 126, rebalance: 21 });
    let backtest = await call(agent, 'run_skill', { skill_id: 'backtest.momentum', inputs: { strategy_id: strategy.strategy_id } });
    for (let i = 0; i < 10 && ['queued', 'running'].includes(backtest.status); i++) {
      backtest = await call(agent, 'subscribe_run', { run_id: backtest.run_id, status: backtest.status, wait_ms: 10000 });
    }
    step('backtest finished', backtest.status === 'succeeded', { status: backtest.status });
    const svg = backtest.artifacts.find((a) => a.mime_type === 'image/svg+xml');
    let artifact;
    try {
      artifact = await agent.client.callTool({ name: 'get_artifact', arguments: { artifact_id: svg.artifact_id } });
      responses.push(JSON.stringify(artifact));
    } catch (e) {
      step('get_artifact', false, { sdk_error: errText(e) });
    }
    const resource = artifact.content[0].resource;
    step('svg artifact', resource.text.startsWith('<svg') && resource.text.includes('<polyline'));
    const again = await read(agent, resource.uri);
    if (again) check("the artifact's URI reads back", again.contents?.length > 0, { uri: resource.uri });
    const run = await read(agent, `doomberg://runs/${backtest.run_id}`, true);
    step('run resource', JSON.parse(run.contents[0].text).status === 'succeeded');

    await call(agent, 'promote_strategy', { strategy_id: strategy.strategy_id, mode: 'paper' }, { expectError: 'TRADING_DISABLED' });
    const done = spawnSync(o.command[0], o.command.slice(1), { encoding: 'utf8' });
    step('administrator allows paper trading', done.status === 0, { output: `${done.stdout}${done.stderr}` });
    const accounts = await read(agent, 'doomberg://accounts', true);
    await read(agent, 'doomberg://data/providers', true);
    if (process.env.STORY_SECRETS) {
      const listed = JSON.parse(accounts.contents[0].text).accounts;
      step('accounts show only that a credential is configured', listed.length > 0 && listed.every((a) => a.credential_configured), { accounts: listed });
    }
    const policy = await read(agent, 'doomberg://policies/current', true);
    step('policy resource', JSON.parse(policy.contents[0].text).trading.enabled === true);
    const pending = await call(agent, 'promote_strategy', { strategy_id: strategy.strategy_id, mode: 'paper' });
    step('pending approval', pending.status === 'pending_approval');

    human = await connect(o.humanKey);
    await human.client.listTools();
    await call(human, 'session_context', { prompt: 'Review the pending promotion.' });
    const listed = await call(human, 'list_approvals', { status: 'pending' });
    step('the person sees it', listed.approvals.some((a) => a.approval_id === pending.approval_id));
    const decided = await call(human, 'decide_approval', { approval_id: pending.approval_id, decision: 'approve', note: 'paper only' });
    step('approved and executed', decided.status === 'executed');
    const polled = await call(agent, 'get_approval', { approval_id: pending.approval_id });
    step('the agent sees the outcome', polled.status === 'executed');
    const closed = await call(agent, 'session_close', {});
    check('session closed', closed?.status === 'closed', { result: closed });
  } finally {
    await agent.client.close().catch(() => {});
    await human?.client.close().catch(() => {});
  }

  // The trace over SSE from seq 0, with the human key; after session_close it should end with session_closed.
  const base = o.url.replace(/\/mcp$/, '');
  const events = [];
  let upto;
  let ended = false;
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 10000);
  try {
    const res = await fetch(`${base}/api/sessions/${sid}/events/stream?after=0`, { headers: { Authorization: `Bearer ${o.humanKey}` }, signal: ac.signal });
    const decoder = new TextDecoder();
    let buf = '';
    for await (const chunk of res.body) {
      buf += decoder.decode(chunk, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line.startsWith('data: ')) {
          const e = JSON.parse(line.slice(6));
          events.push(e);
          if (upto === undefined && e.type === 'tool_result' && e.payload?.name === 'get_approval') upto = events.length;
        }
      }
    }
    ended = true;
  } catch (e) {
    if (e.name !== 'AbortError') check('trace stream', false, { error: errText(e) });
  } finally {
    clearTimeout(timer);
  }
  step('the trace reaches get_approval', upto !== undefined, { events: events.length });
  const seqs = events.map((e) => e.seq);
  step('trace is gap-free from seq 1', seqs.every((s, i) => s === i + 1), { seqs });
  const kinds = events.slice(0, upto).map((e) => e.type);
  const order = ['session_open', 'reasoning', 'tool_call', 'tool_result', 'run_transition', 'strategy_proposed', 'denial', 'approval'];
  const firsts = order.map((k) => kinds.indexOf(k));
  step('every kind of step, in order', !firsts.includes(-1) && firsts.every((f, i) => i === 0 || firsts[i - 1] <= f), { kinds });
  const called = events.slice(0, upto).filter((e) => e.type === 'tool_call').map((e) => e.payload.name).filter((t) => t !== 'subscribe_run');
  const expected = ['session_context', 'search_skills', 'describe_skill', 'get_price_history', 'run_skill',
    'propose_strategy', 'run_skill', 'get_artifact', 'promote_strategy', 'promote_strategy', 'get_approval'];
  step('tool calls in story order', JSON.stringify(called) === JSON.stringify(expected), { tools: called });
  const tail = events.slice(upto).map((e) => e.type);
  check('after session_close the trace says session_closed and the stream ends', tail.includes('session_closed') && ended,
    { tail, stream_ended: ended });
  // Calls in flight at close may still record how they ended (session_close's own tool_result does),
  // so only results may follow session_closed; nothing new starts after it.
  const after = tail.includes('session_closed') ? tail.slice(tail.indexOf('session_closed') + 1) : [];
  check('only results of calls in flight follow session_closed',
    after.every((k) => ['tool_result', 'run_transition', 'error'].includes(k)), { tail });

  const secrets = [o.agentKey, o.humanKey].map((k) => k.split('_').slice(3).join('_'));
  secrets.push(...(process.env.STORY_SECRETS ?? '').split(',').filter(Boolean));
  const leaked = secrets.filter((s) => responses.some((r) => r.includes(s)));
  step('no response carries a secret', leaked.length === 0, { responses: responses.length, secrets: secrets.length });
}

const timer = setTimeout(() => {
  failed.push(`timed out after ${o.timeout}s`);
  for (const f of failed) console.log(`FAILED: [${SDK}] ${f}`);
  process.exit(1);
}, o.timeout * 1000);
try {
  await (o.smoke ? smoke() : story());
} catch (e) {
  if (!(e instanceof Abort)) failed.push(`aborted: ${errText(e)}`);
}
clearTimeout(timer);
for (const f of failed) console.log(`FAILED: [${SDK}] ${f}`);
if (!failed.length) console.log(`OK: [${SDK}] every step passed`);
process.exit(failed.length ? 1 : 0);
