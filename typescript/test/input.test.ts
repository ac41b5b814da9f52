// Numbered input (the default) against a real tetherd: lines written
// through connections cut at random byte counts (mid-frame included)
// reach the program once each, in order; a resume after the server forgot
// the input stream ends the attachment with `input_expired`.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { connect, createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProtocolError, TetherClient } from "@tether/client";
import { listenOnLoopback, startCuttingProxy, startServer, within, type TestServer } from "./harness.js";

let server: TestServer;
let dir: string;

before(async () => {
  server = await startServer(["--input-ttl-ms", "300"]);
  dir = mkdtempSync(join(tmpdir(), "tether-input-"));
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A proxy that cuts each connection after a random number of bytes (`min..max`) in either direction, forwarding only part of the chunk that crosses it. */
async function startRandomCuts(targetPort: number, min: number, max: number) {
  let seed = 0x2545f491;
  const random = () => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) / 2 ** 32;
  };
  let cuts = 0;
  const server = createServer((client: Socket) => {
    const upstream = connect(targetPort, "127.0.0.1");
    let ended = false;
    const end = (cut: boolean) => {
      if (ended) return;
      ended = true;
      if (cut) cuts += 1;
      client.destroy();
      upstream.destroy();
    };
    const pump = (from: Socket, to: Socket) => {
      let left = Math.floor(min + random() * (max - min));
      from.on("data", (chunk: Buffer) => {
        if (ended) return;
        const part = chunk.subarray(0, left);
        left -= part.length;
        to.write(part);
        if (left <= 0) to.end(() => end(true));
      });
      from.on("error", () => end(false)).on("close", () => end(false));
    };
    pump(client, upstream);
    pump(upstream, client);
  });
  const port = await listenOnLoopback(server);
  return { url: `http://127.0.0.1:${port}`, cuts: () => cuts, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test("lines written through random cuts reach cat once each, in order", { timeout: 120_000 }, async () => {
  const file = join(dir, "got");
  const direct = new TetherClient({ baseUrl: server.url });
  const p = await direct.spawn({ argv: ["sh", "-c", `cat > '${file}'`], stdin: true });
  const proxy = await startRandomCuts(server.port, 600, 5000);
  const client = new TetherClient({ baseUrl: proxy.url });
  const a = await client.attach(p.id, { reconnect: { budgetMs: 60_000, initialBackoffMs: 2, maxBackoffMs: 40 } });
  const lines = Array.from({ length: 3000 }, (_, i) => `line ${String(i).padStart(5, "0")} typed through the cuts\n`);
  for (const line of lines) await a.write(line);
  await a.closeStdin();
  const info = await within(60_000, a.exit, "exit");
  assert.equal(info.exit_code, 0);
  assert.ok(readFileSync(file, "utf8") === lines.join(""), `cat did not get each line once in order after ${proxy.cuts()} cuts`);
  assert.ok(proxy.cuts() >= 40, `only ${proxy.cuts()} cuts`);
  await proxy.close();
});

test("a resume after the input stream expired ends the attachment with input_expired; nothing is applied twice", { timeout: 60_000 }, async () => {
  const file = join(dir, "once");
  const direct = new TetherClient({ baseUrl: server.url });
  const p = await direct.spawn({ argv: ["sh", "-c", `cat > '${file}'`], stdin: true });
  const proxy = await startCuttingProxy(server.port);
  const client = new TetherClient({ baseUrl: proxy.url });
  const a = await client.attach(p.id, { reconnect: { budgetMs: 30_000, initialBackoffMs: 2, maxBackoffMs: 40 } });
  await a.write("once\n");
  // The shell makes the file as it starts, which may come after the spawn's answer.
  const got = () => (existsSync(file) ? readFileSync(file, "utf8") : "");
  await within(10_000, (async () => { while (!got().includes("once")) await new Promise((r) => setTimeout(r, 20)); })(), "first line");
  // Away for longer than the stream's TTL (300 ms): only time passing shows it.
  proxy.refuse();
  proxy.cut();
  await new Promise((r) => setTimeout(r, 1000));
  proxy.restore();
  const error = await within(20_000, a.exit.then(() => undefined, (e: unknown) => e), "failure");
  assert.ok(error instanceof ProtocolError && error.code === "input_expired", String(error));
  assert.equal(readFileSync(file, "utf8"), "once\n");
  await proxy.close();
  await direct.kill(p.id).catch(() => {});
});
