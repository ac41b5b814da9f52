// exec: run to completion against a real tetherd, with exact streams, exit
// codes and reasons, a clear error for a program that cannot start, and
// 64 MiB streamed with bounded memory.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { HttpError, TetherClient } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

// A full collection on demand, without a command-line flag.
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

let server: TestServer;
let client: TetherClient;

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(() => server?.stop());

test("exec gives the exact stdout, stderr and exit code", async () => {
  const out = await within(20_000, client.exec("sh -c 'echo out; echo err >&2; exit 3'"), "exec");
  assert.equal(out.stdoutText, "out\n");
  assert.equal(out.stderrText, "err\n");
  assert.deepEqual([out.exitCode, out.reason, out.signal], [3, "exit", null]);
  assert.equal(out.success, false);
  assert.equal(out.timedOut, false);
  assert.equal(out.incomplete, false);
  assert.equal(out.process.overflow, "block");
});

test("an argv runs without a shell, and stdin is written then closed", async () => {
  const out = await within(20_000, client.exec(["sh", "-c", 'read -r line; echo "got:$line"; cat'], { stdin: "hello\nrest" }), "exec");
  assert.equal(out.stdoutText, "got:hello\nrest");
  assert.equal(out.exitCode, 0);
  assert.ok(out.success);
});

test("a deadline gives reason timeout and exit code 124, distinct from a signal", async () => {
  const out = await within(20_000, client.exec("echo started; sleep 30", { timeoutMs: 300 }), "exec");
  assert.deepEqual([out.reason, out.exitCode, out.timedOut], ["timeout", 124, true]);
  assert.equal(out.stdoutText, "started\n");
  const killed = await within(20_000, client.exec("kill -TERM $$"), "exec");
  assert.deepEqual([killed.reason, killed.exitCode, killed.signal, killed.timedOut], ["signal", 143, "TERM", false]);
});

test("a program that does not exist is a clear error with the server's code", async () => {
  const error = await within(20_000, client.exec(["/nonexistent/tether-test-program"]).then(() => undefined, (e: unknown) => e), "exec");
  assert.ok(error instanceof HttpError, String(error));
  assert.equal(error.status, 422);
  assert.equal(error.code, "spawn_failed");
  assert.match(error.message, /tether-test-program/);
});

test("64 MiB streamed through exec arrive complete, with memory bounded by the window", { timeout: 180_000 }, async (t) => {
  const size = 64 * 1024 * 1024;
  const line = "tether streams every byte exactly once\n";
  const expected = createHash("sha256");
  const pattern = Buffer.from(line.repeat(4096));
  for (let left = size; left > 0; left -= pattern.length) expected.update(left >= pattern.length ? pattern : pattern.subarray(0, left));

  // Live memory (heap and array buffers after a full collection) is what
  // the library holds; garbage awaiting collection is not.
  const live = () => {
    gc();
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  const hash = createHash("sha256");
  let received = 0;
  let nextSample = 0;
  const base = live();
  const baseRss = process.memoryUsage().rss;
  let peak = 0;
  const out = await client.exec(`yes '${line.trimEnd()}' | head -c ${size}`, {
    onStdout: (data) => {
      hash.update(data);
      received += data.length;
      if (received >= nextSample) {
        nextSample += 4 * 1024 * 1024;
        peak = Math.max(peak, live() - base);
      }
    },
  });
  const rss = process.memoryUsage().rss - baseRss;
  t.diagnostic(`live memory growth peak ${(peak / 1048576).toFixed(1)} MiB, rss growth ${(rss / 1048576).toFixed(1)} MiB, streaming ${size / 1048576} MiB`);
  assert.equal(out.exitCode, 0);
  assert.equal(received, size);
  assert.equal(out.process.stdout_bytes, size);
  assert.equal(out.stdout.length, 0, "streamed output is not also collected");
  assert.equal(hash.digest("hex"), expected.digest("hex"));
  // A client that buffered the stream would grow by at least 64 MiB.
  assert.ok(peak < 16 * 1024 * 1024, `live memory grew by ${peak} bytes`);
});

test("aborting exec rejects with the reason and ends the process", async () => {
  const controller = new AbortController();
  const exec = client.exec("echo ready; sleep 30", {
    signal: controller.signal,
    onStdout: () => controller.abort(new Error("caller gave up")),
  });
  const error = await within(20_000, exec.then(() => undefined, (e: unknown) => e), "aborted exec");
  assert.equal((error as Error).message, "caller gave up");
  // exec killed what it started: nothing with that command line runs on.
  const running = (await client.list()).filter((p) => p.argv.join(" ").includes("echo ready; sleep 30") && p.status === "running");
  assert.deepEqual(running, []);
});
