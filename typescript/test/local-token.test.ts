// The token of a local tetherd: each server writes its own runtime entry
// (its URL and token) and holds a lock on it while it runs; a client takes
// the one for exactly the origin it talks to. (runtime-entries.test.ts
// holds the trust rules against a real tetherd.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TetherClient } from "@tether/client";
import { holdFlock, type HeldLock } from "./harness.js";

test("a client takes the live runtime entry of its own origin, the newest, and never for a remote host", async () => {
  const runtime = mkdtempSync(join(tmpdir(), "tether-xdg-"));
  const servers = join(runtime, "tether", "servers");
  mkdirSync(servers, { recursive: true, mode: 0o700 });
  chmodSync(join(runtime, "tether"), 0o700);
  const locks: HeldLock[] = [];
  const entry = async (name: string, url: string, token: string, age: number, live = true) => {
    const path = join(servers, name);
    writeFileSync(path, JSON.stringify({ url, token, pid: 1 }), { mode: 0o600 });
    const when = Date.now() / 1000 - age;
    utimesSync(path, when, when);
    if (live) locks.push(await holdFlock(path));
  };
  const saved = { xdg: process.env.XDG_RUNTIME_DIR, file: process.env.TETHER_TOKEN_FILE };
  try {
    await entry("tetherd-1-a.json", "http://127.0.0.1:7001", "first", 10);
    await entry("tetherd-2-b.json", "http://127.0.0.1:7002", "second", 10);
    await entry("tetherd-3-c.json", "http://127.0.0.1:7002", "second-restarted", 1);
    // A newer entry whose server is gone (nobody holds its lock).
    await entry("tetherd-4-d.json", "http://127.0.0.1:7002", "second-stale", 0, false);
    await entry("tetherd-5-e.json", "https://127.0.0.1:443", "tls", 10);
    writeFileSync(join(servers, "tetherd-6-f.json"), "not json", { mode: 0o600 });
    process.env.XDG_RUNTIME_DIR = runtime;
    delete process.env.TETHER_TOKEN_FILE;
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:7001" }).token, "first");
    assert.equal(new TetherClient({ baseUrl: "http://localhost:7001" }).token, undefined);
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:7002/" }).token, "second-restarted");
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:7003" }).token, undefined);
    assert.equal(new TetherClient({ baseUrl: "https://127.0.0.1" }).token, "tls");
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:443" }).token, undefined);
    assert.equal(new TetherClient({ baseUrl: "http://example.com:7001" }).token, undefined);
    // $TETHER_TOKEN_FILE is read instead, for a local server only.
    const file = join(runtime, "token");
    writeFileSync(file, "from-file\n");
    process.env.TETHER_TOKEN_FILE = file;
    assert.equal(new TetherClient({ baseUrl: "http://localhost:7001" }).token, "from-file");
    assert.equal(new TetherClient({ baseUrl: "http://example.com:7001" }).token, undefined);
  } finally {
    for (const lock of locks) await lock.release();
    if (saved.xdg === undefined) delete process.env.XDG_RUNTIME_DIR;
    else process.env.XDG_RUNTIME_DIR = saved.xdg;
    if (saved.file === undefined) delete process.env.TETHER_TOKEN_FILE;
    else process.env.TETHER_TOKEN_FILE = saved.file;
    rmSync(runtime, { recursive: true, force: true });
  }
});
