// The Node entry of @tether/client (the `node` export condition): the same
// library, with the `ws` package as WebSocket where the runtime has no
// global one (Node 20; Node 22 and later use their global WebSocket), and
// the token a local tetherd generated, from its runtime entry.

import WebSocket from "ws";
import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, readFileSync, readSync, type BigIntStats } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { setLocalTokenLookup } from "./client.js";
import { isLocalUrl, originOf } from "./endpoint.js";
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

/** Largest runtime entry read (a URL and a token). */
const MAX_ENTRY_BYTES = 16 << 10;

/**
 * True when a runtime entry's URL and `base` name one server: exactly the
 * same origin (scheme, host as the WHATWG URL parser writes it, port, the
 * scheme's default when absent). `localhost` and `127.0.0.1` are not the
 * same: a `localhost` may reach another listener, on `::1`.
 */
export function sameServer(entry: string, base: string): boolean {
  const origin = originOf(entry);
  return origin !== undefined && origin === originOf(base);
}

/**
 * The token of the local server at `baseUrl` (a loopback address or
 * `localhost`; undefined for any other): from `$TETHER_TOKEN_FILE` if set,
 * else from the runtime entry whose URL names exactly `baseUrl`'s origin
 * (the newest, if two do). An entry is a secret on disk, used only
 *
 * - from a trusted folder ({@link runtimeDir}, the `tether` folder above it
 *   and the root above that: real folders, not links, this user's (the root
 *   may be root's), that group and others may not write unless sticky);
 * - from a file opened without following links, a regular file of this
 *   user's that no other may write, of 16 KiB at most;
 * - while its server runs: it holds an exclusive `flock` on its entry for
 *   its life.
 */
export function localTokenFor(baseUrl: string): string | undefined {
  const wanted = originOf(baseUrl);
  if (wanted === undefined || !isLocalUrl(baseUrl)) return undefined;
  const named = localTokenPath();
  if (named) {
    try {
      return readFileSync(named, "utf8").split("\n")[0]?.trim() || undefined;
    } catch {
      return undefined;
    }
  }
  const dir = runtimeDir();
  // A folder that is not there holds no entry; one that is must be trusted.
  try {
    lstatSync(dir);
  } catch {
    return undefined;
  }
  if (untrustedRuntimeDir(dir) !== undefined) return undefined;
  return newestEntry(dir, wanted);
}

/**
 * Why `dir` (the runtime entries' folder) cannot be trusted, if it cannot:
 * each of `servers`, `tether` and the runtime root above them must be a
 * real folder (not a link), owned by this user (the root may be root's),
 * and not writable by group or others unless sticky (`/tmp`). Another user
 * who can write there could plant an entry, or read one.
 */
function untrustedRuntimeDir(dir: string): string | undefined {
  const me = process.geteuid?.();
  if (me === undefined) return "no user ids on this system";
  const folders = [dir, dirname(dir), dirname(dirname(dir))];
  for (const [depth, folder] of folders.entries()) {
    let meta;
    try {
      meta = lstatSync(folder);
    } catch (e) {
      return `${folder}: ${(e as Error).message}`;
    }
    if (!meta.isDirectory()) return `${folder} is not a folder`;
    const isRootFolder = depth === folders.length - 1;
    if (meta.uid !== me && !(isRootFolder && meta.uid === 0)) return `${folder} belongs to uid ${meta.uid}`;
    const sticky = (meta.mode & 0o1000) !== 0;
    if ((meta.mode & 0o022) !== 0 && !sticky) return `others may write to ${folder}`;
  }
  return undefined;
}

/**
 * The token of the newest entry in `dir` for exactly `wanted` that only
 * this user can have written and whose server still runs.
 */
function newestEntry(dir: string, wanted: string): string | undefined {
  const me = process.geteuid?.();
  if (me === undefined) return undefined;
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch {
    return undefined;
  }
  let locks: ExclusiveFlocks | undefined;
  let best: { mtime: bigint; token: string } | undefined;
  for (const name of names) {
    if (!name.startsWith("tetherd-") || !name.endsWith(".json")) continue;
    let fd: number;
    try {
      fd = openSync(join(dir, name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch {
      continue;
    }
    try {
      const meta = fstatSync(fd, { bigint: true });
      if (!meta.isFile() || meta.size > BigInt(MAX_ENTRY_BYTES) || meta.uid !== BigInt(me) || (meta.mode & 0o022n) !== 0n) continue;
      const buffer = Buffer.alloc(MAX_ENTRY_BYTES);
      let length = 0;
      while (length < buffer.length) {
        const n = readSync(fd, buffer, length, buffer.length - length, null);
        if (n === 0) break;
        length += n;
      }
      const entry = JSON.parse(buffer.subarray(0, length).toString("utf8")) as { url?: unknown; token?: unknown } | null;
      if (typeof entry?.url !== "string" || typeof entry.token !== "string" || !entry.token) continue;
      if (originOf(entry.url) !== wanted) continue;
      locks ??= exclusiveFlocks();
      if (!locks.held(meta)) continue;
      if (!best || meta.mtimeNs > best.mtime) best = { mtime: meta.mtimeNs, token: entry.token };
    } catch {
      continue;
    } finally {
      closeSync(fd);
    }
  }
  return best?.token;
}

/** The files someone holds an exclusive `flock` on, as `/proc/locks` lists them. */
interface ExclusiveFlocks {
  /** True when the file `meta` describes is among them. */
  held(meta: BigIntStats): boolean;
}

/**
 * Whether an entry's server still runs: it holds an exclusive `flock` on
 * its entry for its whole life (a pid would mean nothing across pid
 * namespaces). Node has no `flock`, so where the Rust and Python clients
 * try for a shared lock (and fail while the server holds its own), this
 * reads `/proc/locks` (Linux) and takes an entry as live only if a `FLOCK`
 * `WRITE` lock (not a waiter's `->` line) is listed on its device and inode;
 * `/proc/locks` prints `MAJOR:MINOR:INODE`, the device numbers in hex. Where
 * there is no `/proc/locks`, or a file system's `stat` device is not the one
 * the kernel lists (btrfs subvolumes, some overlays), no entry is taken:
 * give the token (`TETHER_TOKEN`, `$TETHER_TOKEN_FILE`) instead.
 */
function exclusiveFlocks(): ExclusiveFlocks {
  const listed = new Set<string>();
  let text = "";
  try {
    text = readFileSync("/proc/locks", "latin1");
  } catch {
    // Nothing listed: every entry is taken as stale.
  }
  for (const line of text.split("\n")) {
    const m = /^\d+:\s+(?:(->)\s+)?(\S+)\s+\S+\s+(\S+)\s+\S+\s+([0-9a-f]+):([0-9a-f]+):(\d+)\s/i.exec(line);
    if (!m || m[1] || m[2] !== "FLOCK" || m[3] !== "WRITE") continue;
    listed.add(`${BigInt(`0x${m[4]}`)}:${BigInt(`0x${m[5]}`)}:${BigInt(m[6]!)}`);
  }
  return {
    held(meta: BigIntStats): boolean {
      // Linux's dev_t: glibc's major() and minor().
      const dev = meta.dev;
      const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & 0xfffff000n);
      const minor = (dev & 0xffn) | ((dev >> 12n) & 0xffffff00n);
      return listed.has(`${major}:${minor}:${meta.ino}`);
    },
  };
}

setLocalTokenLookup(localTokenFor);
setDefaultTransport(nodeTransport);

if (typeof (globalThis as { WebSocket?: unknown }).WebSocket !== "function") {
  setDefaultWebSocket(WebSocket as unknown as WebSocketConstructor);
}

export * from "./index.js";
