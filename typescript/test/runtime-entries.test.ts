// A local server's runtime entry (its URL and token) is a secret on disk:
// read only from folders no other user controls, only while its server runs
// (it holds an exclusive flock on its entry; Node reads /proc/locks), and
// its token sent only to exactly the origin it names, as the URL parser
// that makes the request reads the URL. The rules of the Rust client
// (tests/tests/scoped_access/runtime_entries.rs), against a real tetherd.
import { after, afterEach, before, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, chownSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HttpError, InvalidArgumentError, TetherClient, localTokenFor } from "@tether/client";
import { holdFlock, startServer, type HeldLock, type TestServer } from "./harness.js";

const TOKEN = "entry-token-0123456789";
const NOBODY = 65534;
const me = process.geteuid!();

let server: TestServer;
let root: string;
let servers: string;
let entry: string;
let lock: HeldLock | undefined;
const saved = { xdg: process.env.XDG_RUNTIME_DIR, file: process.env.TETHER_TOKEN_FILE };

before(async () => {
  server = await startServer(["--token", TOKEN]);
  root = mkdtempSync(join(tmpdir(), "tether-entries-"));
  process.env.XDG_RUNTIME_DIR = root;
  delete process.env.TETHER_TOKEN_FILE;
});

after(async () => {
  await lock?.release();
  await server?.stop();
  if (saved.xdg === undefined) delete process.env.XDG_RUNTIME_DIR;
  else process.env.XDG_RUNTIME_DIR = saved.xdg;
  if (saved.file !== undefined) process.env.TETHER_TOKEN_FILE = saved.file;
  rmSync(root, { recursive: true, force: true });
});

/** A fresh `<root>/tether/servers` (0700) holding one entry for `url`, locked as its server would hold it while it runs. */
async function plant(url: string): Promise<void> {
  await lock?.release();
  lock = undefined;
  rmSync(join(root, "tether"), { recursive: true, force: true });
  servers = join(root, "tether", "servers");
  mkdirSync(servers, { recursive: true });
  for (const folder of [root, join(root, "tether"), servers]) chmodSync(folder, 0o700);
  entry = join(servers, "tetherd-1-planted.json");
  writeFileSync(entry, JSON.stringify({ url, token: TOKEN, pid: 1 }) + "\n", { mode: 0o600 });
  chmodSync(entry, 0o600);
  lock = await holdFlock(entry);
}

afterEach(async () => {
  await lock?.release();
  lock = undefined;
});

/** Whether a client of `url` given no token gets in (a 401 otherwise), and the token it found. */
async function getsIn(url: string = server.url): Promise<{ ok: boolean; token: string | undefined }> {
  const client = new TetherClient({ baseUrl: url, retry: { budgetMs: 2_000 } });
  try {
    await client.list();
    return { ok: true, token: client.token };
  } catch (e) {
    assert.ok(e instanceof HttpError && e.status === 401, String(e));
    return { ok: false, token: client.token };
  }
}

const used = { ok: true, token: TOKEN };
const unused = { ok: false, token: undefined };

test("a trusted entry of a running server is used", async () => {
  await plant(server.url);
  assert.deepEqual(await getsIn(), used);
  assert.deepEqual(await getsIn(`${server.url}/`), used);
  assert.equal(localTokenFor(server.url), TOKEN);
});

test("an entry in a folder others may write is not used (unless sticky), up to the runtime root", async () => {
  await plant(server.url);
  chmodSync(servers, 0o777);
  assert.deepEqual(await getsIn(), unused);
  chmodSync(servers, 0o1777);
  assert.deepEqual(await getsIn(), used);
  chmodSync(servers, 0o700);
  chmodSync(join(root, "tether"), 0o770);
  assert.deepEqual(await getsIn(), unused);
  chmodSync(join(root, "tether"), 0o700);
  chmodSync(root, 0o757);
  assert.deepEqual(await getsIn(), unused);
  chmodSync(root, 0o700);
  assert.deepEqual(await getsIn(), used);
});

test("an entry in a folder of another user is not used", async () => {
  await plant(server.url);
  chownSync(servers, NOBODY, -1);
  assert.deepEqual(await getsIn(), unused);
  chownSync(servers, me, -1);
  assert.deepEqual(await getsIn(), used);
});

test("an entry in a folder that is a link is not used", async () => {
  await plant(server.url);
  // A link into a folder that is itself trusted.
  const real = join(root, "tether", "real");
  renameSync(servers, real);
  symlinkSync(real, servers);
  assert.deepEqual(await getsIn(), unused);
  unlinkSync(servers);
  renameSync(real, servers);
  assert.deepEqual(await getsIn(), used);
});

test("an entry file of another user, or that others may write, or that is a link, is not used", async () => {
  await plant(server.url);
  chownSync(entry, NOBODY, -1);
  assert.deepEqual(await getsIn(), unused);
  chownSync(entry, me, -1);
  chmodSync(entry, 0o622);
  assert.deepEqual(await getsIn(), unused);
  chmodSync(entry, 0o600);
  assert.deepEqual(await getsIn(), used);
  // The lock stays on the file it was taken on, now reached through a link.
  const elsewhere = join(root, "tether", "elsewhere.json");
  renameSync(entry, elsewhere);
  symlinkSync(elsewhere, entry);
  assert.deepEqual(await getsIn(), unused);
});

test("a stale entry (nobody holds its lock) is not used", async () => {
  await plant(server.url);
  assert.deepEqual(await getsIn(), used);
  await lock!.release();
  lock = undefined;
  assert.deepEqual(await getsIn(), unused);
});

test("an entry is used only for exactly its own origin: localhost is not 127.0.0.1", async () => {
  assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  await plant(server.url);
  // localhost may be another listener (on ::1): not the entry's origin.
  assert.deepEqual(await getsIn(server.url.replace("127.0.0.1", "localhost")), unused);
  assert.equal(localTokenFor(server.url.replace("127.0.0.1", "127.0.0.2")), undefined);
  assert.equal(localTokenFor(server.url.replace("http:", "https:")), undefined);
  assert.equal(localTokenFor(`http://127.0.0.1:${server.port - 1}`), undefined);
  assert.deepEqual(await getsIn(), used);
});

/** A listener on 127.0.0.2 (standing in for another host) that answers 404 and keeps each request head it got. */
async function otherHost(): Promise<{ address: string; accepted: () => number; heads: string[]; close: () => Promise<void> }> {
  const heads: string[] = [];
  const sockets = new Set<Socket>();
  let accepted = 0;
  const listener = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket)).on("error", () => socket.destroy());
    let head = "";
    socket.on("data", (chunk: Buffer) => {
      head += chunk.toString("latin1");
      if (head.includes("\r\n\r\n")) {
        heads.push(head);
        socket.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
      }
    });
  });
  await new Promise<void>((r) => listener.listen(0, "127.0.0.2", r));
  const port = (listener.address() as { port: number }).port;
  return {
    address: `127.0.0.2:${port}`,
    accepted: () => accepted,
    heads,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        listener.close(() => r());
      }),
  };
}

test("a local token reaches no other host however the URL is written", async () => {
  await plant(server.url);
  const other = await otherHost();
  try {
    const local = server.url.replace("http://", "");
    // What a hand-made "is it local?" check read as the local server, and
    // the URL parser sends to the other host.
    for (const [url, why] of [
      [`http://${other.address}#@${local}`, "may not hold a query (`?`) or a fragment (`#`)"],
      [`http://${other.address}/?@${local}`, "may not hold a query (`?`) or a fragment (`#`)"],
      [`http://${other.address}?@${local}`, "may not hold a query (`?`) or a fragment (`#`)"],
      [`http://user@${local}`, "may not hold a user or password"],
      [`http://user:secret@${local}`, "may not hold a user or password"],
    ] as const) {
      assert.throws(
        () => new TetherClient({ baseUrl: url }),
        (e: unknown) => e instanceof InvalidArgumentError && e.message.includes("server URL") && e.message.includes(why),
        url,
      );
      assert.throws(() => new TetherClient(url), InvalidArgumentError, url);
    }
    // Nor does a lookup read them as the local server: 127.0.0.2 is
    // loopback, but no entry names it.
    assert.equal(localTokenFor(`http://${other.address}#@${local}`), undefined);
    assert.equal(localTokenFor(`http://${other.address}/?@${local}`), undefined);
    // Give any stray connection time to land before counting.
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(other.accepted(), 0, "a connection reached the other host");
    // The other host named plainly is reached, without the local token.
    const plain = new TetherClient({ baseUrl: `http://${other.address}`, retry: { budgetMs: 500 } });
    assert.equal(plain.token, undefined);
    await assert.rejects(plain.list());
    assert.ok(other.accepted() >= 1 && other.heads.length >= 1);
    for (const head of other.heads) {
      assert.ok(head.startsWith("GET /"), head);
      assert.ok(!head.toLowerCase().includes("authorization"), head);
    }
  } finally {
    await other.close();
  }
});
