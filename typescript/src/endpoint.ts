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
