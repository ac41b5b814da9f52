// The server hands over to a new binary in place (issue 43) under an
// attached TypeScript client: the attachment is closed with 1012, the
// client reconnects by itself, and every output byte and input line
// arrives once, in order.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TetherClient } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let dir: string;

before(async () => {
  server = await startServer();
  dir = mkdtempSync(join(tmpdir(), "tether-handover-"));
});

after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The server's handover count; -1 when the call found a connection the
 * old binary closed (fetch keeps idle connections for reuse). */
async function handovers(): Promise<number> {
  try {
    const answer = await fetch(`${server.url}/v1/admin/server`);
    return ((await answer.json()) as { handovers: number }).handovers;
  } catch {
    return -1;
  }
}

test("output and numbered input cross two handovers once each, in order", { timeout: 120_000 }, async () => {
  const file = join(dir, "got");
  const client = new TetherClient({ baseUrl: server.url });
  const reconnect = { budgetMs: 30_000, initialBackoffMs: 5, maxBackoffMs: 100 };
  const counter = await client.spawn({ argv: ["sh", "-c", "i=1; while [ $i -le 300 ]; do echo $i; i=$((i+1)); sleep 0.01; done"] });
  const cat = await client.spawn({ argv: ["sh", "-c", `cat > '${file}'`], stdin: true });
  const reading = await client.attach(counter.id, { reconnect });
  const writing = await client.attach(cat.id, { reconnect });
  const output = reading.stdout.readAll();
  const lines = Array.from({ length: 400 }, (_, i) => `line ${String(i).padStart(4, "0")}\n`);
  const handOver = async (round: number) => {
    const ask = () => fetch(`${server.url}/v1/admin/upgrade`, { method: "POST", body: "{}" });
    // A connection kept from before the last handover is closed: ask again
    // on a new one (the request never reached a server).
    const answer = await ask().catch(ask);
    assert.equal(answer.status, 202, await answer.text());
    // The new binary serves once the count has moved (bounded).
    await within(20_000, (async () => {
      while ((await handovers()) < round) await new Promise((r) => setTimeout(r, 10));
    })(), "the new binary");
  };
  // Half the lines before the first handover, the rest while it runs.
  for (const line of lines.slice(0, 200)) await writing.write(line);
  const first = handOver(1);
  for (const line of lines.slice(200)) await writing.write(line);
  await first;
  await handOver(2);
  await writing.closeStdin();
  const text = new TextDecoder().decode(await within(30_000, output, "the counter's output"));
  assert.equal(text, Array.from({ length: 300 }, (_, i) => `${i + 1}\n`).join(""));
  assert.equal((await within(30_000, writing.exit, "cat's exit")).exit_code, 0);
  assert.equal((await within(30_000, reading.exit, "the counter's exit")).exit_code, 0);
  assert.equal(readFileSync(file, "utf8"), lines.join(""));
});
