// The token of a local tetherd: each server writes its own runtime entry
// (its URL and token); a client takes the one of the server it talks to.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TetherClient } from "@tether/client";

test("a client takes the runtime entry of its own server, the newest, and never for a remote host", () => {
  const runtime = mkdtempSync(join(tmpdir(), "tether-xdg-"));
  const servers = join(runtime, "tether", "servers");
  mkdirSync(servers, { recursive: true });
  const entry = (name: string, url: string, token: string, age: number) => {
    const path = join(servers, name);
    writeFileSync(path, JSON.stringify({ url, token, pid: 1 }));
    const when = Date.now() / 1000 - age;
    utimesSync(path, when, when);
  };
  entry("tetherd-1-a.json", "http://127.0.0.1:7001", "first", 10);
  entry("tetherd-2-b.json", "http://127.0.0.1:7002", "second", 10);
  entry("tetherd-3-c.json", "http://127.0.0.1:7002", "second-restarted", 1);
  writeFileSync(join(servers, "tetherd-4-d.json"), "not json");
  const saved = { xdg: process.env.XDG_RUNTIME_DIR, file: process.env.TETHER_TOKEN_FILE };
  process.env.XDG_RUNTIME_DIR = runtime;
  delete process.env.TETHER_TOKEN_FILE;
  try {
    assert.equal(new TetherClient({ baseUrl: "http://localhost:7001" }).token, "first");
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:7002/" }).token, "second-restarted");
    assert.equal(new TetherClient({ baseUrl: "http://127.0.0.1:7003" }).token, undefined);
    assert.equal(new TetherClient({ baseUrl: "http://example.com:7001" }).token, undefined);
  } finally {
    if (saved.xdg === undefined) delete process.env.XDG_RUNTIME_DIR;
    else process.env.XDG_RUNTIME_DIR = saved.xdg;
    if (saved.file !== undefined) process.env.TETHER_TOKEN_FILE = saved.file;
    rmSync(runtime, { recursive: true, force: true });
  }
});
