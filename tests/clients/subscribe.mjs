// Legacy resource subscriptions through the Node SDK 1.x (`@modelcontextprotocol/sdk`), as deployed
// agents run it. The edge keeps no protocol session (no Mcp-Session-Id), so updates go to the
// caller's GET stream, which this SDK opens after `initialized` whether or not the server issued a
// session id. Against an edge fronting the conformance fixture, whose `test://watched-resource`
// changes every second: `resources/subscribe`, a `notifications/resources/updated` for the URI
// must arrive, and none after `resources/unsubscribe`.
//
//   node subscribe.mjs --sdk PREFIX URL
//
// PREFIX is an npm prefix holding node_modules/@modelcontextprotocol/sdk (tests/clients/install.sh
// makes DIR/node-sdk1). Exits 0 when every step passes, 1 otherwise.
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const args = process.argv.slice(2);
const at = args.indexOf('--sdk');
if (at < 0 || args.length !== 3) {
  console.error('usage: subscribe.mjs --sdk PREFIX URL');
  process.exit(2);
}
const sdk = args[at + 1];
const url = args.filter((_, i) => i !== at && i !== at + 1)[0];
const sdkRoot = join(resolve(sdk), 'node_modules', '@modelcontextprotocol', 'sdk');
const esm = (sub) => import(pathToFileURL(join(sdkRoot, 'dist', 'esm', sub)).href);
const { Client } = await esm('client/index.js');
const { StreamableHTTPClientTransport } = await esm('client/streamableHttp.js');
const { ResourceUpdatedNotificationSchema } = await esm('types.js');

const URI = 'test://watched-resource';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const step = (name, ok, detail) => console.log(JSON.stringify({ step: name, ok, ...detail }));

const updates = [];
const client = new Client({ name: 'ithaca-subscribe-node', version: '1.0.0' });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));
let failed = false;
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  step('connect', true, { server: client.getServerVersion()?.name });
  await client.subscribeResource({ uri: URI });
  for (let i = 0; i < 100 && !updates.includes(URI); i++) await sleep(100);
  step('updated', updates.includes(URI), { updates });
  if (!updates.includes(URI)) failed = true;
  await client.unsubscribeResource({ uri: URI });
  // One change may have been on its way while unsubscribing.
  await sleep(1000);
  updates.length = 0;
  await sleep(3000);
  step('unsubscribed', updates.length === 0, { updates });
  if (updates.length) failed = true;
} catch (e) {
  step('error', false, { error: String(e) });
  failed = true;
} finally {
  await client.close().catch(() => {});
}
console.error(failed ? 'FAILED' : 'OK: all steps passed');
process.exit(failed ? 1 : 0);
