// The HTTP calls: wait across long-poll expiries and 503 answers, the
// unattached timeout set while a process runs, and the
// clear errors of bad input (unknown id, wrong token, no server).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { HttpError, RetryBudgetExhaustedError, TetherClient } from "@tether/client";
import { closedPort, startFlakyFront, startLossyFront, startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let client: TetherClient;
const token = `t-${Math.random().toString(36).slice(2)}`;
let secured: TestServer;

before(async () => {
  // Long-polls expire after 100 ms, so one wait spans many of them.
  server = await startServer(["--max-wait-ms", "100"]);
  client = new TetherClient({ baseUrl: server.url });
  secured = await startServer(["--token", token]);
});
after(async () => {
  await server?.stop();
  await secured?.stop();
});

const failure = (p: Promise<unknown>) => within(15_000, p.then(() => undefined, (e: unknown) => e), "the call");

test("wait spans server-side long-poll expiries and returns the real exit", async () => {
  const p = await client.spawn({ command: "sleep 1; exit 5" });
  // A single poll comes back still running: the server capped it.
  const early = await client.wait(p.id, { timeoutMs: 50 });
  assert.equal(early.status, "running");
  const done = await within(20_000, client.wait(p.id), "wait");
  assert.deepEqual([done.status, done.exit_code, done.reason], ["exited", 5, "exit"]);
});

test("wait retries through 503 answers of a front and returns the real exit", async () => {
  const front = await startFlakyFront(server.port, 3, /\/wait/);
  try {
    const viaFront = new TetherClient({ baseUrl: front.url, retry: { initialBackoffMs: 20 } });
    const p = await viaFront.spawn({ command: "exit 9" });
    const done = await within(20_000, viaFront.wait(p.id), "wait");
    assert.equal(front.refused, 3);
    assert.deepEqual([done.exit_code, done.reason], [9, "exit"]);
  } finally {
    await front.close();
  }
});

test("503 answers outlasting the budget end in a clear error, not a hang or a fake exit", async () => {
  const front = await startFlakyFront(server.port, 1_000_000, /\/wait/);
  try {
    const viaFront = new TetherClient({ baseUrl: front.url, retry: { budgetMs: 500, initialBackoffMs: 20 } });
    const p = await viaFront.spawn({ command: "exit 0" });
    const error = await failure(viaFront.wait(p.id));
    assert.ok(error instanceof RetryBudgetExhaustedError, String(error));
    assert.equal(error.status, 503);
  } finally {
    await front.close();
  }
});

test("an unknown id is a 404 not_found from get, wait, signal, kill and attach", async () => {
  const id = "0123456789abcdef0123456789abcdef";
  for (const call of [() => client.get(id), () => client.wait(id), () => client.signal(id, "TERM"), () => client.kill(id), () => client.attach(id)]) {
    const error = await failure(call());
    assert.ok(error instanceof HttpError, String(error));
    assert.equal(error.status, 404);
    assert.ok(error.isNotFound);
  }
});

test("a wrong token is a 401 unauthorized, over HTTP and for an attachment", async () => {
  const wrong = new TetherClient({ baseUrl: secured.url, token: "wrong" });
  const error = await failure(wrong.spawn({ command: "true" }));
  assert.ok(error instanceof HttpError, String(error));
  assert.deepEqual([error.status, error.code], [401, "unauthorized"]);

  const right = new TetherClient({ baseUrl: secured.url, token });
  const p = await right.spawn({ command: "echo secret" });
  const attachError = await failure(wrong.attach(p.id));
  assert.ok(attachError instanceof HttpError, String(attachError));
  assert.equal(attachError.status, 401);
  const out = await right.exec("echo ok");
  assert.equal(out.stdoutText, "ok\n");
});

test("a server that is not running is a clear error in well under a second, not after the retry budget", async () => {
  const port = await closedPort();
  // The default policy: a refused connection to a server that never
  // answered is retried 400 ms (firstContactRefusedMs), not the 30 s budget.
  const nobody = new TetherClient({ baseUrl: `http://127.0.0.1:${port}` });
  for (const call of [() => nobody.get("x"), () => nobody.exec("true"), () => nobody.wait("x"), () => nobody.attach("x"), () => nobody.run({ argv: ["true"] })]) {
    const started = Date.now();
    const error = await failure(call());
    const took = Date.now() - started;
    assert.ok(error instanceof RetryBudgetExhaustedError, String(error));
    assert.ok(error.isUnreachable && error.attempts >= 2, String(error));
    assert.match(error.message, /ECONNREFUSED|refused/i);
    assert.ok(took < 1000, `${error.message}: took ${took} ms`);
  }
  // Calls that are never retried fail at the first refusal.
  const once = await failure(nobody.kill("x"));
  assert.equal((once as Error).name, "TransportError");
});

test("a bad server URL is rejected before anything is sent", () => {
  assert.throws(() => new TetherClient("ftp://127.0.0.1"), /must start with http/);
  assert.throws(() => new TetherClient("not a url"), /not a URL/);
});

test("wait honours an AbortSignal", async () => {
  const p = await client.spawn({ command: "sleep 30" });
  const controller = new AbortController();
  const waiting = client.wait(p.id, { signal: controller.signal });
  controller.abort(new Error("enough"));
  const error = await failure(waiting);
  assert.equal((error as Error).message, "enough");
  await client.kill(p.id);
});

test("a spawn whose answer is lost is retried with the same key and starts once", async () => {
  const front = await startLossyFront(server.port, 2, "POST", /^\/v1\/processes$/);
  try {
    const viaFront = new TetherClient({ baseUrl: front.url, retry: { initialBackoffMs: 20 } });
    const marker = `spawned-once-${Math.random().toString(36).slice(2)}`;
    const p = await within(20_000, viaFront.spawn({ command: `echo ${marker}` }), "spawn");
    assert.equal(front.lost, 2);
    const started = (await client.list()).filter((q) => q.argv.join(" ").includes(marker));
    assert.deepEqual(started.map((q) => q.id), [p.id]);
  } finally {
    await front.close();
  }
});

test("signal and stdin over HTTP reach the process", async () => {
  const p = await client.spawn({ command: "trap 'echo got-usr1; exit 4' USR1; read -r line; echo \"line:$line\"; while :; do sleep 0.05; done", stdin: true });
  await client.writeStdin(p.id, "hello\n");
  const a = await client.attach(p.id);
  const it = a.stdout[Symbol.asyncIterator]();
  let seen = "";
  while (!seen.includes("line:hello\n")) {
    const r = await within(10_000, it.next(), "line");
    if (r.done) break;
    if (r.value.type === "data") seen += Buffer.from(r.value.data).toString();
  }
  await client.signal(p.id, "USR1");
  const done = await within(10_000, a.exit, "exit");
  assert.deepEqual([done.exit_code, done.reason], [4, "exit"]);
  // A signal to an exited process is refused, not silently dropped.
  const late = await failure(client.signal(p.id, "TERM"));
  assert.ok(late instanceof HttpError);
  assert.equal(late.code, "not_running");
});

test("setUnattachedTimeout ends an unattached process, and null keeps one that would have ended", async () => {
  const ending = await client.spawn({ argv: ["sleep", "30"] });
  assert.equal((await client.setUnattachedTimeout(ending.id, 200)).id, ending.id);
  const final = await within(20_000, client.wait(ending.id), "wait");
  assert.equal(final.reason, "unattached");
  const kept = await client.spawn({ argv: ["sleep", "30"], unattached_timeout_ms: 1000 });
  await client.setUnattachedTimeout(kept.id, null);
  assert.equal((await client.wait(kept.id, { timeoutMs: 2000 })).status, "running");
  await client.remove(kept.id, { force: true });
  const gone = await failure(client.setUnattachedTimeout(ending.id, null));
  assert.ok(gone instanceof HttpError && gone.status === 409 && gone.code === "not_running", String(gone));
  await assert.rejects(client.setUnattachedTimeout(ending.id, -1), /whole number/);
});
