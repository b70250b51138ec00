// Drives `sbx mcp` with the Model Context Protocol's own TypeScript client.
//   node mcp_client.mjs stdio SBX_BINARY CALLS_JSON   (SBX_URL and SBX_API_KEY from the environment)
//   node mcp_client.mjs http URL CALLS_JSON [TOKEN]
// CALLS_JSON is a list of {"name", "arguments"} (or of lists of them, run at once); prints one JSON object: the server's
// info, its tools and each call's result (or the error the client raised).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [mode, target, callsJson, token] = process.argv.slice(2);
const calls = JSON.parse(callsJson);
const client = new Client({ name: 'sbx-tests', version: '1.0.0' });
const transport =
  mode === 'stdio'
    ? new StdioClientTransport({ command: target, args: ['mcp'], env: { ...process.env }, stderr: 'inherit' })
    : new StreamableHTTPClientTransport(new URL(target), {
        requestInit: token ? { headers: { Authorization: `Bearer ${token}` } } : undefined,
      });
await client.connect(transport);
const out = {
  server: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  session: mode === 'http' ? transport.sessionId ?? null : null,
  tools: (await client.listTools()).tools,
  ping: await client.ping(),
  results: [],
};
const call = async (c) => {
  try {
    return await client.callTool({ name: c.name, arguments: c.arguments });
  } catch (e) {
    return { thrown: String(e.message), code: e.code ?? null };
  }
};
// An entry that is a list runs its calls at the same time (its results come as a list).
// `timings` has the milliseconds each entry took.
out.timings = [];
for (const c of calls) {
  const t0 = performance.now();
  out.results.push(Array.isArray(c) ? await Promise.all(c.map(call)) : await call(c));
  out.timings.push(performance.now() - t0);
}
if (mode === 'http') await transport.terminateSession();
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
