// exec in one request (POST /v1/exec): output past the answer's cap read
// back from retention, what retention lost counted, abort kills, and the
// fetch transport (browsers) attaching where it could not wait.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { setDefaultTransport, TetherClient, type HttpTransport } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

const CAP = 1 << 20;
let server: TestServer;
let small: TestServer;
let client: TetherClient;
const RETAIN = 64 << 10;
// seq 1 400000: 2.5 MB of numbered lines, so any missing or repeated range shows.
const SEQ = Buffer.from(Array.from({ length: 400_000 }, (_, i) => `${i + 1}\n`).join(""));

before(async () => {
  server = await startServer();
  small = await startServer(["--retain-bytes", String(RETAIN)]);
  client = new TetherClient({ baseUrl: server.url });
});
after(() => {
  server?.stop();
  small?.stop();
});

test("output past the answer's cap arrives complete on both streams", async () => {
  const size = 3 * CAP + 12345;
  const out = await within(
    30_000,
    client.exec(`exec 3>&1; head -c ${size} /dev/urandom | tee /dev/fd/3 | sha256sum >&2; yes stderr-line | head -c 2097152 >&2`),
    "exec",
  );
  assert.ok(out.success);
  assert.equal(out.dropped, 0);
  assert.equal(out.stdout.length, size);
  const checksum = `${createHash("sha256").update(out.stdout).digest("hex")}  -\n`;
  assert.equal(Buffer.from(out.stderr.subarray(0, checksum.length)).toString(), checksum, "stdout is not what was written");
  assert.deepEqual(Buffer.from(out.stderr.subarray(checksum.length)), Buffer.from("stderr-line\n".repeat(200_000)).subarray(0, 2097152));
});

test("a stream longer than the cap and its retention loses its middle, counted in dropped", async () => {
  const c = new TetherClient({ baseUrl: small.url });
  const out = await within(30_000, c.exec("seq 1 400000"), "exec");
  const tail = out.stdout.length - CAP;
  assert.ok(tail >= RETAIN, `only ${tail} bytes of the retained end came back`);
  assert.deepEqual(Buffer.from(out.stdout), Buffer.concat([SEQ.subarray(0, CAP), SEQ.subarray(SEQ.length - tail)]));
  assert.equal(out.dropped, SEQ.length - out.stdout.length);
  assert.ok(out.incomplete);
  // Given a retention, exec attaches and paces the program: every byte.
  const paced = await within(30_000, c.exec("seq 1 400000", { retainBytes: RETAIN }), "exec");
  assert.deepEqual([Buffer.from(paced.stdout).equals(SEQ), paced.dropped], [true, 0]);
});

test("aborting exec kills the command", async () => {
  const marker = `tether-abort-${process.hrtime.bigint()}`;
  const controller = new AbortController();
  const running = client.exec(["sh", "-c", "sleep 60; echo never", marker], { signal: controller.signal });
  const rejected = running.then(
    () => assert.fail("exec resolved after its abort"),
    (e: unknown) => e,
  );
  let id: string | undefined;
  for (const deadline = Date.now() + 20_000; !id && Date.now() < deadline; ) {
    id = (await client.list()).find((p) => p.argv.includes(marker))?.id;
    if (!id) await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(id, "the exec's process never appeared");
  controller.abort(new Error("given up"));
  assert.match(String(await within(20_000, rejected, "abort")), /given up/);
  const final = await within(20_000, client.wait(id), "wait");
  assert.equal(final.reason, "killed");
});

test("bytes for stdin and a PTY in one request", async () => {
  const raw = await within(20_000, client.exec("cat", { stdin: new Uint8Array([0, 255, 1, 32, 98]) }), "exec");
  assert.deepEqual([...raw.stdout], [0, 255, 1, 32, 98]);
  const tty = await within(20_000, client.exec({ command: "read x; echo got $x; exit 4", tty: true }, { stdin: "hi\n" }), "exec");
  assert.match(tty.stdoutText, /got hi/);
  assert.equal(tty.exitCode, 4);
});

test("under fetch (browsers) exec is one request when its deadline fits fetch's wait, else it attaches", async () => {
  const nodeTransport: HttpTransport = client.transport;
  setDefaultTransport(undefined);
  const c = new TetherClient({ baseUrl: small.url });
  setDefaultTransport(nodeTransport);
  assert.equal(c.transport.longestAnswerMs, 240_000);
  // With a deadline of seconds: one request (retention's loss shows it).
  const once = await within(30_000, c.exec("seq 1 400000", { timeoutMs: 20_000 }), "exec");
  assert.ok(once.dropped > 0, "not one request");
  // Without a deadline fetch could give up first: exec attaches, and the
  // attachment paces the program, so nothing is lost.
  const attached = await within(30_000, c.exec("seq 1 400000"), "exec");
  assert.deepEqual([Buffer.from(attached.stdout).equals(SEQ), attached.dropped], [true, 0]);
});

test("a server with a smaller answer cap still gives the whole output", async () => {
  const capped = await startServer(["--max-exec-output-bytes", "65536"]);
  try {
    const out = await within(30_000, new TetherClient({ baseUrl: capped.url }).exec("seq 1 40000"), "exec");
    const expected = Buffer.from(Array.from({ length: 40_000 }, (_, i) => `${i + 1}\n`).join(""));
    assert.deepEqual([Buffer.from(out.stdout).equals(expected), out.dropped, out.exitCode], [true, 0, 0]);
  } finally {
    capped.stop();
  }
});

test("stdin too large for one request is streamed instead", async () => {
  // 2 MiB: over the server's default --max-body-bytes (1 MiB) even before base64.
  const big = new Uint8Array(2 << 20).map((_, i) => i & 0xff);
  const out = await within(30_000, client.exec("sha256sum", { stdin: big }), "exec");
  assert.equal(out.stdoutText.split(" ")[0], createHash("sha256").update(big).digest("hex"));
  // A server with a smaller bound refuses the body before starting anything
  // (413): exec attaches instead, and the command runs once.
  const bounded = await startServer(["--max-body-bytes", "4096"]);
  try {
    const c = new TetherClient({ baseUrl: bounded.url });
    const wc = await within(30_000, c.exec("wc -c", { stdin: "x".repeat(5000) }), "exec");
    assert.deepEqual([wc.stdoutText.trim(), wc.exitCode], ["5000", 0]);
    assert.equal((await c.list()).filter((p) => p.argv.at(-1) === "wc -c").length, 1, "started once");
  } finally {
    bounded.stop();
  }
});

test("an answer that starts before the exit (spaces, then the document) is read whole", async () => {
  const pinging = await startServer(["--ping-interval-ms", "200"]);
  try {
    const out = await within(30_000, new TetherClient({ baseUrl: pinging.url }).exec("sleep 1; echo late; exit 3"), "exec");
    assert.deepEqual([out.stdoutText, out.exitCode, out.reason], ["late\n", 3, "exit"]);
  } finally {
    pinging.stop();
  }
});
