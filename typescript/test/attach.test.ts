// Attachments against a real tetherd: resume through a connection cut
// mid-stream, credit per stream, an interactive PTY, dropped notices, abort.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { ClosedError, InvalidArgumentError, setDefaultWebSocket, TetherClient, type Chunk, type WebSocketConstructor } from "@tether/client";
import { startCuttingProxy, startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let client: TetherClient;

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(() => server?.stop());

const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");

/** Reads chunks from `it` until the text read since the call matches `pattern`; bounded. */
async function readUntil(it: AsyncIterator<Chunk>, pattern: RegExp, ms = 20_000): Promise<string> {
  let seen = "";
  return within(
    ms,
    (async () => {
      for (;;) {
        const { value, done } = await it.next();
        if (done) throw new Error(`stream ended before ${pattern}; got ${JSON.stringify(seen)}`);
        if (value.type === "data") seen += text(value.data);
        if (pattern.test(seen)) return seen;
      }
    })(),
    `waiting for ${pattern}`,
  );
}

test("a connection gone silent is taken as lost after idleTimeoutMs and resumed", { timeout: 60_000 }, async () => {
  const proxy = await startCuttingProxy(server.port);
  try {
    const viaProxy = new TetherClient({ baseUrl: proxy.url });
    const reasons: string[] = [];
    let resumed!: () => void;
    const resumedOnce = new Promise<void>((r) => (resumed = r));
    const a = await viaProxy.start(
      { command: "echo one; read -r x; echo \"two:$x\"", stdin: true },
      {
        idleTimeoutMs: 300,
        onReconnecting: (_ms, _attempt, reason) => reasons.push(reason),
        onOpen: (_process, wasResumed) => wasResumed && resumed(),
      },
    );
    const it = a.stdout[Symbol.asyncIterator]();
    await readUntil(it, /one\n/);
    // Nothing flows and nothing closes: only the idle check can notice.
    proxy.stall();
    await within(20_000, resumedOnce, "the resume");
    assert.equal(a.connections, 2);
    assert.ok(reasons.includes("no message for 300 ms"), `reasons: ${JSON.stringify(reasons)}`);
    await a.write("back\n");
    assert.match(await readUntil(it, /two:back\n/), /two:back\n/);
    assert.equal((await within(20_000, a.exit, "exit")).exit_code, 0);
  } finally {
    await proxy.close();
  }
});

test("a connection cut mid-stream resumes with exactly the bytes written", { timeout: 120_000 }, async () => {
  const proxy = await startCuttingProxy(server.port);
  try {
    const viaProxy = new TetherClient({ baseUrl: proxy.url });
    // Block mode and a small retention: nothing may be evicted, so every
    // byte must come through one connection or the next.
    const lines = 200_000;
    const a = await viaProxy.start({ argv: ["seq", "1", String(lines)], overflow: "block", retain_bytes: 64 * 1024 }, { window: 16 * 1024 });
    const parts: Buffer[] = [];
    let received = 0;
    const cuts = [100_000, 400_000, 900_000];
    for await (const chunk of a.stdout) {
      assert.equal(chunk.type, "data");
      if (chunk.type !== "data") continue;
      parts.push(Buffer.from(chunk.data));
      received += chunk.data.length;
      if (cuts.length > 0 && received >= cuts[0]!) {
        cuts.shift();
        proxy.cut();
      }
    }
    const expected = Array.from({ length: lines }, (_, i) => `${i + 1}\n`).join("");
    assert.equal(Buffer.concat(parts).toString(), expected, "no byte repeated or missing");
    assert.deepEqual(cuts, [], "every cut happened mid-stream");
    assert.ok(a.connections >= 4, `${a.connections} connections`);
    assert.equal((await a.exit).exit_code, 0);
  } finally {
    await proxy.close();
  }
});

test("stderr keeps arriving while stdout reads are withheld (credit per stream)", { timeout: 60_000 }, async () => {
  const size = 8 * 1024 * 1024;
  const window = 128 * 1024;
  // Block mode: unread stdout stops its writer, never stderr's.
  const a = await client.start(
    { command: `head -c ${size} /dev/zero & head -c ${size} /dev/zero >&2; wait`, overflow: "block" },
    { window },
  );
  let stderrBytes = 0;
  const it = a.stderr[Symbol.asyncIterator]();
  await within(
    30_000,
    (async () => {
      while (stderrBytes < size) {
        const { value, done } = await it.next();
        if (done) throw new Error(`stderr ended at ${stderrBytes}`);
        if (value.type === "data") stderrBytes += value.data.length;
      }
    })(),
    "all of stderr",
  );
  assert.equal(stderrBytes, size);
  // stdout waited on the server, not in the client.
  assert.ok(a.stats().stdout.maxBuffered <= window, `stdout buffered ${a.stats().stdout.maxBuffered}`);
  assert.ok(a.stats().stdout.received < size / 2, `stdout received ${a.stats().stdout.received} while unread`);
  const stdout = await within(30_000, a.stdout.readAll(), "stdout");
  assert.equal(stdout.length, size);
  assert.equal((await it.next()).done, true);
  assert.equal((await a.exit).exit_code, 0);
});

test("an interactive PTY: arithmetic, resize and the exit code", { timeout: 60_000 }, async () => {
  const a = await client.start({ argv: ["sh"], tty: true, cols: 80, rows: 24 });
  assert.equal(a.process?.tty, true);
  const it = a.stdout[Symbol.asyncIterator]();
  await a.write("echo $((6*7))\r");
  // The command line shows `$((6*7))`; only the output has 42. (Typed keys
  // may be echoed before the shell's prompt, so the output need not start
  // a line.)
  await readUntil(it, /(?<!\d)42\r\n/);
  await a.resize(100, 30);
  await a.write("stty size\r");
  await readUntil(it, /(?<!\d)30 100\r\n/);
  // The same over HTTP.
  await client.resize(a.id, 90, 20);
  await a.write("stty size\r");
  await readUntil(it, /(?<!\d)20 90\r\n/);
  await a.write("exit 7\r");
  const info = await within(20_000, a.exit, "exit");
  assert.deepEqual([info.exit_code, info.reason], [7, "exit"]);
  // The rest of the output (the echo of `exit 7`) and then the end.
  for (let r = await it.next(); !r.done; r = await it.next());
  await assert.rejects(a.write("late"), ClosedError);
});

test("bytes evicted before the attach arrive as one dropped chunk with the exact range", async () => {
  const p = await client.spawn({ command: "head -c 200000 /dev/zero; echo tail", retain_bytes: 4096 });
  const done = await client.wait(p.id);
  const total = done.stdout_bytes;
  assert.equal(total, 200_005);
  const a = await client.attach(p.id);
  const chunks: Chunk[] = [];
  for await (const chunk of a.stdout) chunks.push(chunk);
  const first = chunks[0]!;
  assert.equal(first.type, "dropped");
  assert.equal(first.offset, 0);
  const data = Buffer.concat(chunks.filter((c) => c.type === "data").map((c) => Buffer.from((c as { data: Uint8Array }).data)));
  assert.equal((first as { length: number }).length + data.length, total);
  assert.ok(data.toString().endsWith("tail\n"));
  assert.equal(a.stats().stdout.dropped, (first as { length: number }).length);
});

test("attaching from saved offsets gets only the new bytes", async () => {
  const p = await client.spawn({ command: "echo one; read x; echo two", stdin: true });
  const first = await client.attach(p.id);
  const it = first.stdout[Symbol.asyncIterator]();
  await readUntil(it, /one\n/);
  const offsets = first.offsets;
  first.close();
  await assert.rejects(first.exit, ClosedError);
  const second = await client.attach(p.id, { offsets });
  await second.write("go\n");
  assert.equal(await within(20_000, second.stdout.text(), "stdout"), "two\n");
  assert.equal((await second.exit).exit_code, 0);
});

test("an aborted attachment rejects its readers and exit with the reason; the process runs on", async () => {
  const p = await client.spawn({ command: "sleep 30" });
  const controller = new AbortController();
  const a = await client.attach(p.id, { signal: controller.signal });
  const reading = a.stdout.readAll();
  controller.abort(new Error("stop"));
  await assert.rejects(within(5_000, reading, "reader"), /stop/);
  await assert.rejects(within(5_000, a.exit, "exit"), /stop/);
  assert.equal((await client.get(p.id)).status, "running");
  await client.kill(p.id);
});

test("output evicted while disconnected comes back as one dropped chunk, then the tail", { timeout: 60_000 }, async () => {
  const proxy = await startCuttingProxy(server.port);
  try {
    const viaProxy = new TetherClient({ baseUrl: proxy.url, retry: { initialBackoffMs: 50, maxBackoffMs: 200 } });
    // Drop mode with a small retention: what nobody reads in time is evicted.
    const p = await client.spawn({ command: "echo first; read -r x; head -c 100000 /dev/zero; echo tail", stdin: true, retain_bytes: 4096 });
    const reconnecting: string[] = [];
    const a = await viaProxy.attach(p.id, { onReconnecting: (_ms, _n, reason) => reconnecting.push(reason) });
    const it = a.stdout[Symbol.asyncIterator]();
    await readUntil(it, /^first\n$/);
    proxy.refuse();
    proxy.cut();
    // Past the proxy, the process writes 100 kB and exits while the
    // attachment cannot reconnect.
    await client.writeStdin(p.id, "go\n");
    const done = await client.wait(p.id);
    proxy.restore();
    const rest: Chunk[] = [];
    for (let r = await it.next(); !r.done; r = await it.next()) rest.push(r.value);
    assert.ok(reconnecting.length > 0, "the attachment saw the connection go");
    const [gap, ...tail] = rest;
    assert.equal(gap?.type, "dropped");
    assert.equal(gap.offset, "first\n".length);
    const data = Buffer.concat(tail.map((c) => (c.type === "data" ? Buffer.from(c.data) : Buffer.alloc(0))));
    assert.ok(tail.every((c) => c.type === "data"), "one dropped chunk, then data");
    assert.equal(gap.offset + (gap as { length: number }).length + data.length, done.stdout_bytes);
    assert.ok(data.toString().endsWith("tail\n"));
    assert.ok(a.connections >= 2);
  } finally {
    await proxy.close();
  }
});

test("the WebSocket implementation is injectable, and its absence is a clear error", async () => {
  let made = 0;
  class CountingWebSocket extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols);
      made += 1;
    }
  }
  const counted = new TetherClient({ baseUrl: server.url, WebSocket: CountingWebSocket as unknown as WebSocketConstructor });
  // Streaming to a callback: exec attaches (without one it is a single POST).
  let streamed = "";
  await counted.exec("echo via-injected", { onStdout: (d) => void (streamed += Buffer.from(d).toString()) });
  assert.equal(streamed, "via-injected\n");
  assert.equal(made, 1);

  // A runtime with no global WebSocket (Node 20) and nothing registered.
  const global = Object.getOwnPropertyDescriptor(globalThis, "WebSocket");
  if (global) delete (globalThis as { WebSocket?: unknown }).WebSocket;
  setDefaultWebSocket(undefined);
  try {
    const p = await client.spawn({ command: "true" });
    await assert.rejects(client.attach(p.id), (e: unknown) => e instanceof InvalidArgumentError && /no WebSocket implementation/.test(e.message));
  } finally {
    if (global) Object.defineProperty(globalThis, "WebSocket", global);
    else setDefaultWebSocket(WebSocket as unknown as WebSocketConstructor);
  }
});

test("a read-only attachment refuses input locally and still reads", async () => {
  const p = await client.spawn({ command: "echo watched", stdin: true });
  const a = await client.attach(p.id, { readonly: true });
  await assert.rejects(a.write("x"), InvalidArgumentError);
  await assert.rejects(a.signal("TERM"), InvalidArgumentError);
  assert.equal(await a.stdout.text(), "watched\n");
  assert.equal((await a.exit).exit_code, 0);
});

test("reconnect() resumes at once from the saved offsets, without a repeat", async () => {
  const p = await client.spawn({ command: "echo one; read -r x; echo two", stdin: true });
  const opened: boolean[] = [];
  const a = await client.attach(p.id, { onOpen: (_p, resumed) => opened.push(resumed) });
  const it = a.stdout[Symbol.asyncIterator]();
  await readUntil(it, /^one\n$/);
  a.reconnect();
  await a.write("go\n"); // queued or sent, once either way
  assert.equal(await readUntil(it, /two\n/), "two\n");
  assert.deepEqual(opened, [false, true]);
  assert.equal(a.connections, 2);
  assert.equal((await a.exit).exit_code, 0);
});
