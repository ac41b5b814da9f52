// What a client and the attachments it makes both use, kept below both so
// that neither imports the other: the options every call takes, the
// WebSocket URLs and subprotocols of one server, terminal size checks and
// idempotency keys.

import { InvalidArgumentError } from "./errors.js";
import { SUBPROTOCOL } from "./protocol.js";

/** Options every call takes. */
export interface CallOptions {
  /** Aborts the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * The base URL of the server at `given` as the WHATWG URL parser (the one
 * fetch, node:http and WebSocket make the requests with) serialises it,
 * without a trailing slash. Throws {@link InvalidArgumentError} for a URL
 * that is not `http://` or `https://` with a host, or that holds a user or
 * password, a query (`?`) or a fragment (`#`): what is judged local, and
 * which server a local token is for, is then the host the requests reach (a
 * hand parser once read `http://127.0.0.2:9#@127.0.0.1:7420` as 127.0.0.1).
 */
export function baseUrlOf(given: string): string {
  const invalid = (why: string) => new InvalidArgumentError(`server URL ${JSON.stringify(given)} ${why}`);
  let url: URL;
  try {
    url = new URL(given.trim());
  } catch {
    throw invalid("is not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw invalid("must start with http:// or https://");
  if (!url.hostname) throw invalid("has no host");
  if (url.username || url.password) throw invalid("may not hold a user or password (pass the token option instead)");
  // An empty query or fragment reads as "" yet stays in the URL, where it
  // would swallow the paths appended to it.
  if (url.search || url.hash || url.href.includes("?") || url.href.includes("#")) {
    throw invalid("may not hold a query (`?`) or a fragment (`#`)");
  }
  return url.href.replace(/\/+$/, "");
}

const DEFAULT_PORTS: Record<string, string> = { "http:": "80", "https:": "443", "ws:": "80", "wss:": "443" };

/**
 * A URL's origin as a request is made to it: scheme, host as the WHATWG
 * parser serialises it, and port (the scheme's default when none), as one
 * string; undefined for what is not such a URL.
 */
export function originOf(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  const port = u.port || DEFAULT_PORTS[u.protocol];
  if (!u.hostname || !port) return undefined;
  return `${u.protocol}//${u.hostname}:${port}`;
}

/**
 * True for a URL whose host is a loopback address or `localhost` (or a name
 * under it), as the WHATWG parser reads it (it writes any IPv4 address in
 * dotted decimal, and IPv6 ones compressed in brackets).
 */
export function isLocalUrl(url: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return host === "localhost" || host.endsWith(".localhost") || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Characters a WebSocket subprotocol (an HTTP token) may hold. */
const PROTOCOL_TOKEN = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/;

/** Percent-encodes an id for use as one path segment. */
export const segment = (id: string): string => encodeURIComponent(id);

/**
 * The `ws://` or `wss://` URL of `path` on the server at `baseUrl`, with
 * `query`. Browsers cannot set headers on a WebSocket: the token rides as a
 * `tether.bearer.TOKEN` subprotocol (see {@link subprotocols}), or in the
 * query when it has characters a subprotocol cannot carry.
 */
export function webSocketUrl(baseUrl: string, token: string | undefined, path: string, query: Record<string, string | number>): string {
  const url = new URL(`${baseUrl}${path}`);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, String(v));
  if (token && !PROTOCOL_TOKEN.test(token)) url.searchParams.set("access_token", token);
  return url.toString();
}

/** The subprotocols an attachment offers: `tether.v1`, and the token when it can ride there. */
export function subprotocols(token: string | undefined): string[] {
  return token && PROTOCOL_TOKEN.test(token) ? [SUBPROTOCOL, `tether.bearer.${token}`] : [SUBPROTOCOL];
}

/** Throws for a terminal size outside 1..4096. */
export function checkSize(cols: number, rows: number): void {
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= 4096;
  if (!ok(cols) || !ok(rows)) throw new InvalidArgumentError(`terminal size ${cols}x${rows} is out of range 1..4096`);
}

/** A random idempotency key. */
export function randomKey(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  return Array.from({ length: 4 }, () => Math.random().toString(16).slice(2, 10)).join("-");
}
