// The Node entry of @tether/client (the `node` export condition): the same
// library, with the `ws` package as WebSocket where the runtime has no
// global one (Node 20). Node 22 and later use their global WebSocket.

import WebSocket from "ws";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { setLocalTokenLookup } from "./client.js";
import { setDefaultWebSocket, type WebSocketConstructor } from "./websocket.js";
import { nodeTransport } from "./node-http.js";
import { setDefaultTransport } from "./transport.js";

/**
 * The one token file a user named, `$TETHER_TOKEN_FILE`: read instead of
 * the runtime entries.
 */
export function localTokenPath(): string | undefined {
  return process.env.TETHER_TOKEN_FILE || undefined;
}

/**
 * Where each local tetherd with a generated token writes its runtime entry
 * (the server's rule): `$XDG_RUNTIME_DIR/tether/servers`, else
 * `~/.local/state/tether/servers`; one `tetherd-PID-HEX.json` per server
 * with its `url` and `token`.
 */
export function runtimeDir(): string {
  if (process.env.XDG_RUNTIME_DIR) return join(process.env.XDG_RUNTIME_DIR, "tether", "servers");
  return join(process.env.HOME || homedir(), ".local", "state", "tether", "servers");
}

const MAX_ENTRY_BYTES = 16 << 10;

function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  return h === "localhost" || h.endsWith(".localhost") || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** True when a runtime entry's URL and `base` name one local server: scheme, port, and host alike or both loopback. */
export function sameServer(entry: string, base: string): boolean {
  let a: URL;
  let b: URL;
  try {
    a = new URL(entry);
    b = new URL(base);
  } catch {
    return false;
  }
  const port = (u: URL) => u.port || (u.protocol === "https:" ? "443" : "80");
  const hostsAlike = a.hostname.toLowerCase() === b.hostname.toLowerCase() || (isLoopbackHost(a.hostname) && isLoopbackHost(b.hostname));
  return a.protocol === b.protocol && port(a) === port(b) && hostsAlike;
}

/**
 * The token of the local server at `baseUrl`: from `$TETHER_TOKEN_FILE` if
 * set, else from the runtime entry whose URL is that server (the newest, if
 * a killed server left one behind).
 */
export function localTokenFor(baseUrl: string): string | undefined {
  const named = localTokenPath();
  if (named) {
    try {
      return readFileSync(named, "utf8").split("\n")[0]?.trim() || undefined;
    } catch {
      return undefined;
    }
  }
  let best: { mtime: number; token: string } | undefined;
  let names: string[];
  try {
    names = readdirSync(runtimeDir());
  } catch {
    return undefined;
  }
  for (const name of names) {
    if (!name.startsWith("tetherd-") || !name.endsWith(".json")) continue;
    try {
      const path = join(runtimeDir(), name);
      const stat = statSync(path);
      if (!stat.isFile() || stat.size > MAX_ENTRY_BYTES) continue;
      const entry = JSON.parse(readFileSync(path, "utf8")) as { url?: unknown; token?: unknown };
      if (typeof entry.url !== "string" || typeof entry.token !== "string" || !entry.token) continue;
      if (!sameServer(entry.url, baseUrl)) continue;
      if (!best || stat.mtimeMs > best.mtime) best = { mtime: stat.mtimeMs, token: entry.token };
    } catch {
      continue;
    }
  }
  return best?.token;
}

setLocalTokenLookup(localTokenFor);
setDefaultTransport(nodeTransport);

if (typeof (globalThis as { WebSocket?: unknown }).WebSocket !== "function") {
  setDefaultWebSocket(WebSocket as unknown as WebSocketConstructor);
}

export * from "./index.js";
