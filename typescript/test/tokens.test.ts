// mintToken: a scoped token for one process, against a real tetherd with an
// operator token: what it names, what it may read, what it is refused.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { HttpError, TetherClient, type OutputStream } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

const token = `t-${Math.random().toString(36).slice(2)}`;
let server: TestServer;
let operator: TetherClient;

before(async () => {
  server = await startServer(["--token", token]);
  operator = new TetherClient({ baseUrl: server.url, token });
});
after(() => server?.stop());

const failure = (p: Promise<unknown>) => within(15_000, p.then(() => undefined, (e: unknown) => e), "the call");

/** The text of a stream until it contains `needle`; bounded. */
async function until(stream: OutputStream, needle: string): Promise<string> {
  return within(
    15_000,
    (async () => {
      let text = "";
      for await (const chunk of stream) {
        if (chunk.type === "data") text += Buffer.from(chunk.data).toString();
        if (text.includes(needle)) return text;
      }
      return text;
    })(),
    `waiting for ${needle}`,
  );
}

test("a minted token names its process, its rights and its expiry", async () => {
  const p = await operator.spawn({ command: "sleep 30" });
  const before = Date.now();
  const minted = await operator.mintToken(p.id, ["read"], 60_000);
  assert.equal(minted.process, p.id);
  assert.deepEqual(minted.rights, ["read"]);
  assert.ok(minted.token.length > 0 && minted.token !== token);
  assert.ok(minted.expires_at_ms >= before + 50_000 && minted.expires_at_ms <= Date.now() + 61_000, String(minted.expires_at_ms));
  await operator.kill(p.id);
});

test("a read-only token reads its process's output and is refused its stdin", async () => {
  const p = await operator.spawn({ argv: ["cat"], stdin: true });
  const minted = await operator.mintToken(p.id, ["read"], 60_000);
  const reader = new TetherClient({ baseUrl: server.url, token: minted.token });
  assert.equal((await reader.get(p.id)).id, p.id);
  const attachment = await reader.attach(p.id, { readonly: true });
  await operator.writeStdin(p.id, "from-the-operator\n");
  assert.match(await until(attachment.stdout, "from-the-operator"), /from-the-operator/);
  const refused = await failure(reader.writeStdin(p.id, "from-the-reader\n"));
  assert.ok(refused instanceof HttpError, String(refused));
  assert.deepEqual([refused.status, refused.code], [403, "missing_right"]);
  attachment.close();
  await operator.kill(p.id);
});

test("a token for one process is out of scope for any other, and for spawn and list", async () => {
  const mine = await operator.spawn({ command: "sleep 30" });
  const other = await operator.spawn({ command: "sleep 30" });
  const minted = await operator.mintToken(mine.id, ["read", "write"], 60_000);
  const scoped = new TetherClient({ baseUrl: server.url, token: minted.token });
  for (const call of [() => scoped.get(other.id), () => scoped.kill(other.id), () => scoped.attach(other.id)]) {
    const error = await failure(call());
    assert.ok(error instanceof HttpError, String(error));
    assert.deepEqual([error.status, error.code], [403, "out_of_scope"]);
  }
  for (const call of [() => scoped.spawn({ command: "true" }), () => scoped.list()]) {
    const error = await failure(call());
    assert.ok(error instanceof HttpError, String(error));
    assert.equal(error.status, 403);
  }
  assert.equal((await operator.get(other.id)).status, "running", "the other process was left alone");
  await operator.kill(mine.id);
  await operator.kill(other.id);
});

test("bad rights and lifetimes are refused, and an unknown token is a 401", async () => {
  const p = await operator.spawn({ command: "sleep 30" });
  for (const [rights, ttl] of [[["root"], 60_000], [["read"], 0]] as const) {
    const error = await failure(operator.mintToken(p.id, [...rights], ttl));
    assert.ok(error instanceof HttpError, String(error));
    assert.equal(error.status, 400, `${rights} ${ttl}`);
  }
  const forged = new TetherClient({ baseUrl: server.url, token: "tether.v1.forged" });
  const error = await failure(forged.get(p.id));
  assert.ok(error instanceof HttpError, String(error));
  assert.equal(error.status, 401);
  await operator.kill(p.id);
});
