// Files as a process sees them, against a real tetherd: upload and download
// run beside the process (`beside`), with its user and its working
// directory; errors carry the remote program's words; bounds hold.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileTooLargeError, FileTransferError, HttpError, InvalidArgumentError, TetherClient, type Attachment, type ProcessInfo, type SpawnRequest } from "@tether/client";
import { startServer, within, type TestServer } from "./harness.js";

const WAIT = 20_000;
let server: TestServer;
let client: TetherClient;
const dirs: string[] = [];

before(async () => {
  server = await startServer();
  client = new TetherClient({ baseUrl: server.url });
});
after(async () => {
  await server?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "tether-files-"));
  dirs.push(dir);
  return dir;
}

/** `size` random bytes with runs of NULs, a lone CR and invalid UTF-8 in them. */
function binary(size: number): Buffer {
  const data = randomBytes(size);
  for (let at = 0; at < size; at += 4096) data.fill(0, at, Math.min(size, at + 16));
  data.set([0xff, 0x0d, 0x00, 0x0a, 0x00], size - 5);
  return data;
}

function sha(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** A process that makes `d` in `dir`, `cd`s into it and waits; resolved once it said so (its cwd is then `dir/d`). */
async function target(on: TetherClient, dir: string, name?: string): Promise<ProcessInfo> {
  const request: SpawnRequest = { command: "mkdir -p d && cd d && echo ready && exec sleep 60", cwd: dir };
  if (name) request.name = name;
  const process = await on.spawn(request);
  const attachment = await on.attach(process.id);
  try {
    await within(
      WAIT,
      (async () => {
        let seen = "";
        const text = new TextDecoder();
        for await (const chunk of attachment.stdout) {
          if (chunk.type === "data") seen += text.decode(chunk.data, { stream: true });
          if (seen.includes("ready\n")) return;
        }
        assert.fail(`the target ended before it was ready: ${JSON.stringify(seen)}`);
      })(),
      "the target saying ready",
    );
  } finally {
    attachment.close();
  }
  return process;
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await within(WAIT, promise, "the call");
  } catch (e) {
    return e;
  }
  assert.fail("the call succeeded");
}

test("upload then download is byte-exact for a few MiB of binary, and an empty file", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const data = binary(3 << 20);
    const where = join(dir, "blob.bin");
    assert.equal(await within(WAIT, client.upload(process.id, where, data), "upload"), data.length);
    assert.equal(sha(readFileSync(where)), sha(data), "the file on disk is what was sent");
    const back = await within(WAIT, client.download(process.id, where), "download");
    assert.equal(back.length, data.length);
    assert.equal(sha(back), sha(data));
    assert.equal(await client.upload(process.id, join(dir, "empty"), new Uint8Array(0)), 0);
    assert.equal(readFileSync(join(dir, "empty")).length, 0);
    assert.equal((await client.download(process.id, join(dir, "empty"))).length, 0);
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("a relative path resolves against the directory the process cd'd into, by id or by name", async () => {
  const dir = freshDir();
  const name = `ts-files-${Math.random().toString(36).slice(2, 10)}`;
  const process = await target(client, dir, name);
  try {
    await client.upload(process.id, "x.txt", "made beside\n");
    assert.equal(readFileSync(join(dir, "d", "x.txt"), "utf8"), "made beside\n");
    assert.ok(!existsSync(join(dir, "x.txt")), "not the directory it started in");
    assert.equal(new TextDecoder().decode(await client.download(name, "x.txt")), "made beside\n");
    assert.equal(new TextDecoder().decode(await client.download(name, "../d/x.txt")), "made beside\n");
    // beside for anything: exec runs in that directory; cwd still wins.
    assert.equal((await client.exec({ argv: ["pwd"], beside: name })).stdoutText, `${join(dir, "d")}\n`);
    const other = join(dir, "elsewhere");
    mkdirSync(other);
    assert.equal((await client.exec({ argv: ["pwd"], beside: process.id, cwd: other })).stdoutText, `${other}\n`);
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("a missing file is a FileTransferError with cat's own words; so is a directory", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const e = await failure(client.download(process.id, "no-such-file"));
    assert.ok(e instanceof FileTransferError && !(e instanceof FileTooLargeError), String(e));
    assert.equal(e.exitCode, 1);
    assert.equal(e.reason, "exit");
    assert.match(e.stderr, /No such file or directory/);
    assert.match(e.message, /no-such-file.*No such file or directory/);
    const dirError = await failure(client.download(process.id, "."));
    assert.ok(dirError instanceof FileTransferError);
    assert.match(dirError.message, /Is a directory/);
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("an upload into a missing directory is a FileTransferError and creates nothing", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    // More than the 1 MiB sent ahead of acknowledgements: the shell has ended while the data is still going.
    const e = await failure(client.upload(process.id, "no-dir/x.txt", binary(3 << 20)));
    assert.ok(e instanceof FileTransferError, String(e));
    assert.ok(e.exitCode !== 0 && e.exitCode !== undefined && e.exitCode !== null);
    assert.match(e.stderr, /no-dir\/x\.txt/);
    assert.match(e.stderr, /nonexistent|No such file/);
    assert.ok(!existsSync(join(dir, "d", "no-dir")));
    // A small one, which the shell has whole before it fails.
    const small = await failure(client.upload(process.id, "no-dir/y.txt", "small"));
    assert.ok(small instanceof FileTransferError);
    assert.match(small.message, /no-dir/);
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("a download over maxBytes is a FileTooLargeError, never a short file, and the remote cat is gone", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const data = binary(300 << 10);
    writeFileSync(join(dir, "d", "big"), data);
    const e = await failure(client.download(process.id, "big", { maxBytes: data.length - 1 }));
    assert.ok(e instanceof FileTooLargeError, String(e));
    assert.equal(e.maxBytes, data.length - 1);
    assert.equal(sha(await client.download(process.id, "big", { maxBytes: data.length })), sha(data), "exactly the bound is fine");
    const streamed = await failure(
      (async () => {
        for await (const _ of client.downloadStream(process.id, "big", { maxBytes: 100 << 10 })) void _;
      })(),
    );
    assert.ok(streamed instanceof FileTooLargeError);
    const running = (await client.list()).filter((p) => p.argv[0] === "cat" && p.status === "running");
    assert.deepEqual(running, [], "the remote cat was killed and forgotten");
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("downloadStream gives chunks of at most the window, and leaving it early kills the remote cat", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const data = binary(8 << 20);
    writeFileSync(join(dir, "d", "large"), data);
    const hash = createHash("sha256");
    let largest = 0;
    let total = 0;
    await within(
      WAIT,
      (async () => {
        for await (const chunk of client.downloadStream(process.id, "large", { window: 64 << 10 })) {
          largest = Math.max(largest, chunk.length);
          total += chunk.length;
          hash.update(chunk);
        }
      })(),
      "streaming 8 MiB",
    );
    assert.equal(total, data.length);
    assert.equal(hash.digest("hex"), sha(data));
    assert.ok(largest > 0 && largest <= 64 << 10, `largest chunk ${largest}`);
    // A missing file fails at the end of the iteration.
    const e = await failure(
      (async () => {
        for await (const _ of client.downloadStream(process.id, "missing")) void _;
      })(),
    );
    assert.ok(e instanceof FileTransferError);
    assert.match(e.stderr, /No such file/);
    // A break: the cat still holding 8 MiB back is killed, not left waiting.
    for await (const _ of client.downloadStream(process.id, "large", { window: 64 << 10 })) break;
    const running = (await client.list()).filter((p) => p.argv[0] === "cat" && p.status === "running");
    assert.deepEqual(running, []);
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("upload takes a string, a Blob, a Node read stream, an iterable and a mode", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const remote = join(dir, "d");
    const data = binary(200 << 10);
    const source = join(dir, "source.bin");
    writeFileSync(source, data);
    assert.equal(await client.upload(process.id, "from-stream", createReadStream(source), { mode: 0o751 }), data.length);
    assert.equal(sha(readFileSync(join(remote, "from-stream"))), sha(data));
    assert.equal(statSync(join(remote, "from-stream")).mode & 0o7777, 0o751);
    assert.equal(await client.upload(process.id, "from-blob", new Blob([new Uint8Array(data)])), data.length);
    assert.equal(sha(readFileSync(join(remote, "from-blob"))), sha(data));
    const pieces = [data.subarray(0, 1000), data.subarray(1000)];
    assert.equal(await client.upload(process.id, "from-iterable", pieces), data.length);
    assert.equal(sha(readFileSync(join(remote, "from-iterable"))), sha(data));
    assert.equal(await client.upload(process.id, "text", "é\n"), 3);
    assert.equal(readFileSync(join(remote, "text"), "utf8"), "é\n");
    // Refused before anything runs: the remote file keeps its content.
    assert.ok((await failure(client.upload(process.id, "from-blob", 42 as unknown as string))) instanceof InvalidArgumentError);
    assert.ok((await failure(client.upload(process.id, "x", "", { mode: 0o10000 }))) instanceof InvalidArgumentError);
    assert.ok((await failure(client.download(process.id, ""))) instanceof InvalidArgumentError);
    assert.equal(sha(readFileSync(join(remote, "from-blob"))), sha(data));
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("beside with user is a 400 HttpError; an unknown process is a 404", async () => {
  const dir = freshDir();
  const process = await target(client, dir);
  try {
    const request = { argv: ["true"], beside: process.id, user: "nobody" } as SpawnRequest;
    const refused = await failure(client.spawn(request));
    assert.ok(refused instanceof HttpError, String(refused));
    assert.equal(refused.status, 400);
    assert.equal(refused.code, "invalid_request");
    assert.match(refused.message, /beside/);
    const overRun = await failure(client.run(request));
    assert.ok(overRun instanceof HttpError && overRun.status === 400, String(overRun));
    const unknown = await failure(client.upload("no-such-process", "x", "data"));
    assert.ok(unknown instanceof HttpError && unknown.status === 404, String(unknown));
    const unknownDownload = await failure(client.download("no-such-process", "x"));
    assert.ok(unknownDownload instanceof HttpError && unknownDownload.isNotFound, String(unknownDownload));
  } finally {
    await client.remove(process.id, { force: true });
  }
});

test("a token scoped to the process cannot copy files; the operator's can", async () => {
  const token = `t-${Math.random().toString(36).slice(2)}`;
  const guarded = await startServer(["--token", token]);
  try {
    const operator = new TetherClient({ baseUrl: guarded.url, token });
    const dir = freshDir();
    const process = await target(operator, dir);
    try {
      const minted = await operator.mintToken(process.id, ["read", "write", "kill"], 60_000);
      const scoped = new TetherClient({ baseUrl: guarded.url, token: minted.token });
      const e = await failure(scoped.upload(process.id, "x.txt", "no"));
      assert.ok(e instanceof HttpError && e.status === 403, String(e));
      const d = await failure(scoped.download(process.id, "x.txt"));
      assert.ok(d instanceof HttpError && d.status === 403, String(d));
      assert.ok(!existsSync(join(dir, "d", "x.txt")));
      await operator.upload(process.id, "x.txt", "yes");
      assert.equal(readFileSync(join(dir, "d", "x.txt"), "utf8"), "yes");
    } finally {
      await operator.remove(process.id, { force: true });
    }
  } finally {
    await guarded.stop();
  }
});

/** A client whose `run` of `cat` says what a lying server would: the chunks given, then an exit with `stdoutBytes`. */
class Told extends TetherClient {
  removed: string[] = [];
  constructor(
    private readonly chunks: Array<{ type: "data"; offset: number; data: Uint8Array } | { type: "dropped"; offset: number; length: number }>,
    private readonly stdoutBytes: number,
  ) {
    super({ baseUrl: "http://127.0.0.1:9" });
  }
  override run(request: SpawnRequest): Promise<Attachment> {
    assert.deepEqual(request.argv, ["cat", "--", "f"]);
    assert.equal(request.beside, "target");
    const chunks = this.chunks;
    const exit = { id: "f".repeat(32), status: "exited", exit_code: 0, reason: "exit", stdout_bytes: this.stdoutBytes, stderr_bytes: 0 };
    const fake = {
      id: "f".repeat(32),
      stdout: {
        async *[Symbol.asyncIterator]() {
          yield* chunks;
        },
      },
      stderr: {
        async *bytes() {},
      },
      exit: Promise.resolve(exit),
      close() {},
    };
    return Promise.resolve(fake as unknown as Attachment);
  }
  override remove(id: string): Promise<ProcessInfo> {
    this.removed.push(id);
    return Promise.resolve({} as ProcessInfo);
  }
}

test("a loss the server reports is an error, never a short file", async () => {
  const bytes = (s: string) => new TextEncoder().encode(s);
  const lost = new Told(
    [
      { type: "data", offset: 0, data: bytes("abc") },
      { type: "dropped", offset: 3, length: 5 },
      { type: "data", offset: 8, data: bytes("xyz") },
    ],
    11,
  );
  const e = await failure(lost.download("target", "f"));
  assert.ok(e instanceof FileTransferError);
  assert.match(e.message, /lost 5 bytes at offset 3/);
  const short = await failure(new Told([{ type: "data", offset: 0, data: bytes("abc") }], 4).download("target", "f"));
  assert.ok(short instanceof FileTransferError);
  assert.match(short.message, /3 bytes came of the 4/);
  assert.equal(new TextDecoder().decode(await new Told([{ type: "data", offset: 0, data: bytes("abcd") }], 4).download("target", "f")), "abcd");
});
