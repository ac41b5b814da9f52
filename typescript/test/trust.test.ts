// The bounds of issue 48 one by one, beyond the shared hostile list
// (hostile.test.ts): each against the real tetherd where it is normal
// behaviour, against a fake server where the point is a lying one.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import {
  DEFAULT_MAX_ANSWER_BYTES,
  EXEC_SILENCE_GRACE_MS,
  MAX_DEPTH,
  MAX_ITEMS,
  ProtocolError,
  TetherClient,
  TransportError,
  decodeServerFrame,
  setDefaultTransport,
  type TransportRequest,
} from "@tether/client";
import { Encoder } from "@msgpack/msgpack";
import { repoRoot, startServer, within, type TestServer } from "./harness.js";
import { ACTS, HostileServer, PROCESS } from "./hostile-server.js";

let server: TestServer;
let client: TetherClient;

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(() => server?.stop());

const failure = (p: Promise<unknown>) => within(20_000, p.then(() => undefined, (e: unknown) => e), "the call");

test("an answer over the bound is a protocol error, read no further and never retried", async () => {
  assert.equal(DEFAULT_MAX_ANSWER_BYTES, 64 << 20);
  const p = await client.spawn({ argv: ["true"] });
  assert.equal((await client.get(p.id)).id, p.id); // the default bound reads it
  // A process object is a few hundred bytes: 64 is too few.
  const small = new TetherClient({ baseUrl: server.url, maxAnswerBytes: 64 });
  const started = Date.now();
  const error = await failure(small.get(p.id));
  assert.ok(error instanceof ProtocolError, String(error));
  assert.match(error.message, /longer than 64 bytes \(maxAnswerBytes\)/);
  assert.ok(Date.now() - started < 1000, "retried as if transient");
  assert.throws(() => new TetherClient({ baseUrl: server.url, maxAnswerBytes: 0 }), /maxAnswerBytes/);
});

test("readOutput reads what is retained, and ends at its timeout", async () => {
  const p = await client.spawn({ command: "printf abc; printf err >&2" });
  await within(20_000, client.wait(p.id), "wait");
  assert.equal(new TextDecoder().decode(await client.readOutput(p.id)), "abc");
  assert.equal(new TextDecoder().decode(await client.readOutput(p.id, "stderr", 1, { timeoutMs: 5_000 })), "rr");
  const trickle = await new HostileServer("http_trickle").start();
  try {
    const slow = new TetherClient({ baseUrl: trickle.url, token: "t" });
    const started = Date.now();
    const error = await failure(slow.readOutput(p.id, "stdout", 0, { timeoutMs: 500 }));
    assert.ok(error instanceof TransportError && error.timeout, String(error));
    assert.ok(Date.now() - started < 2_000, `took ${Date.now() - started} ms`);
  } finally {
    await trickle.stop();
  }
});

test("exec without a deadline is bounded by the silence of its answer, and the Node transport enforces it", async () => {
  // What exec asks of the transport: no total bound, a bound on silence.
  const node = client.transport;
  const seen: TransportRequest[] = [];
  setDefaultTransport({ request: (r) => (seen.push(r), node.request(r)), longestAnswerMs: node.longestAnswerMs });
  let recording: TetherClient;
  try {
    recording = new TetherClient({ baseUrl: server.url, requestTimeoutMs: 5_000 });
  } finally {
    setDefaultTransport(node);
  }
  const out = await recording.exec("echo hi");
  assert.equal(out.stdoutText, "hi\n");
  const execRequest = seen.find((r) => r.url.endsWith("/v1/exec"));
  assert.equal(execRequest?.idleTimeoutMs, 5_000 + EXEC_SILENCE_GRACE_MS);
  assert.equal(execRequest?.maxAnswerBytes, DEFAULT_MAX_ANSWER_BYTES);
  // The Node transport ends a request whose answer stays silent that long.
  const silent = await new HostileServer("http_silent").start();
  try {
    const started = Date.now();
    const error = await failure(node.request({ method: "GET", url: `${silent.url}/v1/processes`, headers: {}, signal: new AbortController().signal, idleTimeoutMs: 300 }));
    assert.match(String(error), /stopped for 300 ms/);
    assert.ok(Date.now() - started < 2_000, `took ${Date.now() - started} ms`);
  } finally {
    await silent.stop();
  }
});

test("fetch (browsers) reads answers within the same bound, and bodiless answers", async () => {
  const node = client.transport;
  setDefaultTransport(undefined);
  let viaFetch: TetherClient;
  let smallFetch: TetherClient;
  const endless = await new HostileServer("http_endless_body").start();
  let lying: TetherClient;
  try {
    viaFetch = new TetherClient({ baseUrl: server.url });
    smallFetch = new TetherClient({ baseUrl: server.url, maxAnswerBytes: 64 });
    lying = new TetherClient({ baseUrl: endless.url, token: "t", maxAnswerBytes: 1 << 20 });
  } finally {
    setDefaultTransport(node);
  }
  try {
    assert.equal(viaFetch.transport.longestAnswerMs, 240_000); // fetch's
    const p = await viaFetch.spawn({ command: "cat", stdin: true });
    await viaFetch.writeStdin(p.id, "x"); // 204: no body to read
    await viaFetch.closeStdin(p.id);
    assert.equal((await within(20_000, viaFetch.wait(p.id), "wait")).stdout_bytes, 1);
    const small = await failure(smallFetch.get(p.id));
    assert.ok(small instanceof ProtocolError && /longer than 64 bytes/.test(small.message), String(small));
    const started = Date.now();
    const error = await failure(lying.list());
    assert.ok(error instanceof ProtocolError && /longer than 1048576 bytes/.test(error.message), String(error));
    assert.equal(endless.requests, 1, "retried");
    assert.ok(Date.now() - started < 5_000);
  } finally {
    await endless.stop();
  }
});

test("decoded counts are bounded, not only bytes: items at every level together, and nesting", () => {
  const encoder = new Encoder();
  const hello = (argv: string[], extra: object = {}) =>
    encoder.encode({ type: "hello", version: 1, process: { ...PROCESS, argv }, stdout: 0, stderr: 0, ...extra });
  assert.equal((decodeServerFrame(hello(new Array(1000).fill(""))) as { process: { argv: string[] } }).process.argv.length, 1000);
  assert.throws(() => decodeServerFrame(hello(new Array(MAX_ITEMS + 1).fill(""))), (e: Error & { code?: string }) => e.code === "invalid_frame" && /items/.test(e.message));
  // Map entries count too, at any level: a field the client ignores holds
  // as many as the argv would.
  const half = MAX_ITEMS / 2;
  const wide = Object.fromEntries(Array.from({ length: half }, (_, i) => [`f${i}`, 0]));
  assert.throws(() => decodeServerFrame(encoder.encode({ type: "error", code: "x", message: "y", a: new Array(half).fill(0), b: wide })), /items/);
  assert.equal(decodeServerFrame(encoder.encode({ type: "error", code: "x", message: "y", a: new Array(half).fill(0) })).type, "error");
  // A field the client does not know is ignored, unless it nests too deep.
  const nest = (depth: number): unknown => (depth === 0 ? null : [nest(depth - 1)]);
  assert.equal(decodeServerFrame(hello(["a"], { later: nest(90) })).type, "hello");
  const tooDeep = new Uint8Array(MAX_DEPTH + 2).fill(0x91);
  tooDeep[MAX_DEPTH + 1] = 0xc0;
  assert.throws(() => decodeServerFrame(tooDeep), /nested deeper than 1024/);
});

test("a screen frame asked for (screen: true) starts the stdout of a PTY", async () => {
  const p = await client.spawn({ command: "printf 'on the screen'; sleep 30", tty: true });
  try {
    // Once the text is out (read from a plain attachment), the screen shows it.
    const plain = await client.attach(p.id);
    let seen = "";
    for await (const chunk of plain.stdout) {
      if (chunk.type === "data") seen += new TextDecoder().decode(chunk.data);
      if (seen.includes("on the screen")) break;
    }
    plain.close();
    const a = await client.attach(p.id, { screen: true });
    const it = a.stdout[Symbol.asyncIterator]();
    const first = await within(20_000, it.next(), "the first chunk");
    assert.equal(first.value?.type, "screen");
    assert.match(new TextDecoder().decode((first.value as { data: Uint8Array }).data), /on the screen/);
    a.close();
  } finally {
    await client.kill(p.id);
  }
});

test("every act of the fake server is one the list documents", () => {
  const readme = readFileSync(resolve(repoRoot, "tests/hostile/README.md"), "utf8");
  for (const act of [...Object.keys(ACTS), "tcp_refused"]) assert.ok(readme.includes(`\`${act}\``), act);
});
