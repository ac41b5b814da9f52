// run: spawn and attach in one WebSocket (GET /v1/run) against a real
// tetherd: output from the first byte, the exit, stdin, spawn refusals with
// the server's code, the idempotency key, reconnects by id, refused options.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import {
  decodeServerFrame,
  HttpError,
  InvalidArgumentError,
  RetryBudgetExhaustedError,
  SUBPROTOCOL,
  TetherClient,
  type Attachment,
  type OutputStream,
  type SpawnRequest,
  type WebSocketConstructor,
} from "@tether/client";
import { closedPort, startAnswerLosingProxy, startCuttingProxy, startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let client: TetherClient;

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(() => server?.stop());

/** Every byte of a stream until its end; bounded. */
async function readAll(stream: OutputStream, ms = 20_000): Promise<Buffer> {
  return within(
    ms,
    (async () => {
      const parts: Buffer[] = [];
      for await (const chunk of stream) {
        assert.equal(chunk.type, "data", "no dropped gap");
        if (chunk.type === "data") parts.push(Buffer.from(chunk.data));
      }
      return Buffer.concat(parts);
    })(),
    "reading a stream to its end",
  );
}

/** A 6 KiB payload with every character a query string must escape, and more. */
const payload = Array.from({ length: 256 }, (_, i) => `${String(i).padStart(4, "0")} &+%=#?é/\\ ok\n`).join("");

/** The processes the server knows whose argv mentions `marker`. */
async function started(marker: string): Promise<number> {
  return (await client.list()).filter((p) => p.argv.join(" ").includes(marker)).length;
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await within(20_000, promise, "the call");
  } catch (e) {
    return e;
  }
  assert.fail("the call succeeded");
}

/** Opens GET /v1/run with `key` by hand and returns the first frame (the hello) and the socket, or the HTTP refusal. */
function rawRun(request: SpawnRequest, key: string): Promise<{ ws: WebSocket; hello: ReturnType<typeof decodeServerFrame> } | { status: number; body: string }> {
  const url = `${server.url.replace(/^http/, "ws")}/v1/run?${new URLSearchParams({ request: JSON.stringify(request), window: "65536" })}`;
  return within(
    10_000,
    new Promise((resolve, reject) => {
      const ws = new WebSocket(url, [SUBPROTOCOL], { headers: { "Idempotency-Key": key } });
      ws.binaryType = "arraybuffer";
      ws.once("message", (data: ArrayBuffer) => resolve({ ws, hello: decodeServerFrame(data) }));
      ws.once("unexpected-response", (_req, res) => {
        let body = "";
        res.on("data", (c: Buffer) => (body += c.toString()));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.once("error", reject);
    }),
    "GET /v1/run",
  );
}

test("run reads a command that prints and exits at once from its first byte, with its exit", async () => {
  const marker = "run-first-byte";
  const a = await client.run({ command: `printf '%s' '${payload}'; printf '%s' '${payload}' >&2; exit 7 # ${marker}` });
  assert.equal(a.connections, 1);
  assert.ok(a.process, "the hello's process is on the attachment");
  assert.equal(a.id, a.process.id);
  assert.match(a.id, /^[0-9a-f]{32}$/);
  assert.deepEqual(a.process.argv.slice(0, 2), ["/bin/sh", "-c"]);
  const [out, err] = await Promise.all([readAll(a.stdout), readAll(a.stderr)]);
  assert.ok(out.equals(Buffer.from(payload)), `stdout: ${out.length} bytes, expected ${Buffer.byteLength(payload)}, every byte checked`);
  assert.ok(err.equals(Buffer.from(payload)), "stderr complete too");
  const info = await within(10_000, a.exit, "exit");
  assert.deepEqual([info.exit_code, info.reason, info.id], [7, "exit", a.id]);
  assert.equal(await started(marker), 1);
});

test("run's stdin reaches cat and its end closes it", async () => {
  const a = await client.run({ argv: ["cat"], stdin: true });
  await a.write("through cat\n");
  await a.write(payload);
  await a.closeStdin();
  const out = await readAll(a.stdout);
  assert.equal(out.toString(), `through cat\n${payload}`);
  const info = await within(10_000, a.exit, "exit");
  assert.deepEqual([info.exit_code, info.reason], [0, "exit"]);
});

test("a refused spawn rejects run with the server's HTTP error and code", async () => {
  const cases: Array<[SpawnRequest, number, string]> = [
    [{ argv: ["/nonexistent/tether-run-test"] }, 422, "spawn_failed"],
    [{ argv: ["/etc"] }, 422, "cannot_execute"],
    [{ command: "true", bogus: 1 } as unknown as SpawnRequest, 400, "invalid_request"],
    [{ argv: [] }, 400, "invalid_request"],
  ];
  for (const [request, status, code] of cases) {
    const error = await failure(client.run(request));
    assert.ok(error instanceof HttpError, `${JSON.stringify(request)}: ${String(error)}`);
    assert.deepEqual([error.status, error.code], [status, code], JSON.stringify(request));
  }
  // A name in use: 409 name_taken, and the first process is untouched.
  const first = await client.run({ argv: ["cat"], stdin: true, name: "run-name-test" });
  const taken = await failure(client.run({ command: "true", name: "run-name-test" }));
  assert.ok(taken instanceof HttpError, String(taken));
  assert.deepEqual([taken.status, taken.code], [409, "name_taken"]);
  await first.closeStdin();
  assert.equal((await within(10_000, first.exit, "exit")).exit_code, 0);
});

test("the same Idempotency-Key on two GET /v1/run connections starts one process, both attached from byte 0", async () => {
  const marker = "run-same-key";
  const request: SpawnRequest = { command: `printf 'once\\n'; cat # ${marker}`, stdin: true };
  const key = `test-key-${Date.now()}`;
  const first = await rawRun(request, key);
  const second = await rawRun(request, key);
  assert.ok("hello" in first && "hello" in second, "both upgraded");
  assert.equal(first.hello.type, "hello");
  assert.equal(second.hello.type, "hello");
  if (first.hello.type !== "hello" || second.hello.type !== "hello") return;
  assert.equal(second.hello.process.id, first.hello.process.id, "the second attaches to the first's process");
  assert.deepEqual([second.hello.stdout, second.hello.stderr], [0, 0]);
  assert.equal(await started(marker), 1);
  // The same key with another request is refused before the upgrade.
  const conflict = await rawRun({ command: "true" }, key);
  assert.ok("status" in conflict, "refused");
  assert.equal(conflict.status, 422);
  assert.equal(JSON.parse(conflict.body).error.code, "idempotency_conflict");
  first.ws.terminate();
  second.ws.terminate();
  await client.kill(first.hello.process.id);
});

test("a run whose first answer is lost is retried with the same key and starts once", async () => {
  const proxy = await startAnswerLosingProxy(server.port, 1);
  try {
    const marker = "run-lost-answer";
    const viaProxy = new TetherClient({ baseUrl: proxy.url, retry: { initialBackoffMs: 10 } });
    const a = await within(20_000, viaProxy.run({ command: `printf '%s' '${payload}' # ${marker}` }), "run");
    assert.equal(proxy.lost, 1, "the first answer was lost");
    const runs = proxy.requests.filter((r) => r.startsWith("GET /v1/run?"));
    assert.equal(runs.length, 2, `two attempts: ${proxy.requests.join(" | ")}`);
    assert.ok((await readAll(a.stdout)).equals(Buffer.from(payload)), "output from the first byte");
    assert.equal((await within(10_000, a.exit, "exit")).exit_code, 0);
    assert.equal(await started(marker), 1, "one process for both attempts");
  } finally {
    await proxy.close();
  }
});

test("a run's reconnect attaches to its process by id, never running it again", async () => {
  const proxy = await startCuttingProxy(server.port);
  try {
    const marker = "run-reconnect";
    const viaProxy = new TetherClient({ baseUrl: proxy.url, retry: { initialBackoffMs: 10 } });
    let resumed: () => void = () => {};
    const resumedOnce = new Promise<void>((r) => (resumed = r));
    const a: Attachment = await viaProxy.run(
      { command: `cat # ${marker}`, stdin: true },
      { pollExit: false, onOpen: (_p, isResume) => isResume && resumed() },
    );
    const it = a.stdout[Symbol.asyncIterator]();
    const readLine = async (want: string) => {
      let seen = "";
      while (!seen.includes(want)) {
        const { value, done } = await within(10_000, it.next(), `reading ${want}`);
        assert.ok(!done, `stream ended before ${want}`);
        if (value.type === "data") seen += Buffer.from(value.data).toString();
      }
      return seen;
    };
    await a.write("before the cut\n");
    assert.equal(await readLine("before the cut\n"), "before the cut\n");
    proxy.cut();
    // Input handed to the connection that broke may be lost (never repeated): write once resumed.
    await within(10_000, resumedOnce, "the resume");
    await a.write("after the cut\n");
    assert.equal(await readLine("after the cut\n"), "after the cut\n", "no repeat, no gap");
    assert.ok(a.connections >= 2, `${a.connections} connections`);
    const [runLine, ...rest] = proxy.requests;
    assert.match(runLine ?? "", /^GET \/v1\/run\?/);
    assert.ok(rest.length >= 1);
    for (const line of rest) assert.match(line, new RegExp(`^GET /v1/processes/${a.id}/attach\\?stdout=\\d+&stderr=0&`), "by id");
    assert.equal(await started(marker), 1);
    await a.closeStdin();
    assert.equal((await within(10_000, a.exit, "exit")).exit_code, 0);
  } finally {
    await proxy.close();
  }
});

test("screen, readonly and offsets are refused before anything starts", async () => {
  const marker = "run-refused-option";
  const request: SpawnRequest = { command: `true # ${marker}` };
  for (const options of [{ readonly: true }, { screen: true }, { offsets: { stdout: 5 } }]) {
    const error = await failure(client.run(request, options));
    assert.ok(error instanceof InvalidArgumentError, `${JSON.stringify(options)}: ${String(error)}`);
  }
  assert.equal(await started(marker), 0);
});

test("run goes through a token as attach does, and a wrong one is a 401", async () => {
  const secured = await startServer(["--token", "run-secret"]);
  try {
    const right = new TetherClient({ baseUrl: secured.url, token: "run-secret" });
    const a = await right.run({ command: "printf token-ok" });
    assert.equal((await readAll(a.stdout)).toString(), "token-ok");
    const wrong = new TetherClient({ baseUrl: secured.url, token: "wrong" });
    const error = await failure(wrong.run({ command: "true" }));
    assert.ok(error instanceof HttpError, String(error));
    assert.deepEqual([error.status, error.code], [401, "unauthorized"]);
  } finally {
    await secured.stop();
  }
});

test("with a WebSocket that cannot send headers, run spawns with the key over HTTP, then attaches", async () => {
  // The standard WebSocket API (browsers, Node 22's global one): no headers.
  class StandardOnly {
    constructor(url: string, protocols?: string | string[]) {
      return new WebSocket(url, protocols);
    }
  }
  const proxy = await startCuttingProxy(server.port);
  try {
    const standard = new TetherClient({ baseUrl: proxy.url, WebSocket: StandardOnly as unknown as WebSocketConstructor });
    const a = await standard.run({ command: `printf '%s' '${payload}'; exit 3` });
    assert.ok((await readAll(a.stdout)).equals(Buffer.from(payload)));
    assert.equal((await within(10_000, a.exit, "exit")).exit_code, 3);
    assert.ok(proxy.requests.some((r) => r.startsWith("POST /v1/processes ")), proxy.requests.join(" | "));
    assert.ok(!proxy.requests.some((r) => r.startsWith("GET /v1/run")), "no run without its key");
    const error = await failure(standard.run({ argv: ["/nonexistent/tether-run-test"] }));
    assert.ok(error instanceof HttpError && error.code === "spawn_failed", String(error));
  } finally {
    await proxy.close();
  }
});

test("a run that cannot connect fails after the budget, without its request in the message", async () => {
  const port = await closedPort();
  const nobody = new TetherClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { budgetMs: 300 } });
  const error = await failure(nobody.run({ argv: ["echo", "secret-argument"] }));
  assert.ok(error instanceof RetryBudgetExhaustedError, String(error));
  assert.ok(error.isUnreachable);
  assert.match(error.message, /\/v1\/run\?request=…&window=/);
  assert.doesNotMatch(error.message, /secret-argument/);
});
