// Where the WebSocket implementation comes from, and the little this
// library uses beyond the standard API where `ws` offers it (upgrade
// headers, events such as pings, `terminate`, a refused upgrade's body).
// Browsers (and Node 22+) have a global WebSocket; Node 20 has none, so the
// package's Node entry (node.ts) registers the `ws` package here. A caller
// can always pass its own with `ClientOptions.WebSocket`.

/** The part of the standard WebSocket API the client uses (browsers, Node 22+ and `ws` all have it). */
/**
 * An event handler property, compared bivariantly (as a method is): an
 * implementation's handlers take its own event types (`ws`'s `Event`,
 * `MessageEvent`, `CloseEvent`), which carry more than this interface reads,
 * so `new TetherClient({ WebSocket })` with `ws` type-checks.
 */
type Handler<E> = { bivarianceHack(event: E): void }["bivarianceHack"];

export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  readonly protocol: string;
  onopen: Handler<unknown> | null;
  onmessage: Handler<{ data: unknown }> | null;
  onclose: Handler<{ code: number; reason: string }> | null;
  onerror: Handler<unknown> | null;
  send(data: Uint8Array<ArrayBuffer>): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor with the standard signature (`globalThis.WebSocket`, or `ws`'s default export). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/**
 * A constructor that also takes options: `ws`'s (`new WebSocket(url,
 * protocols, { headers, maxPayload, perMessageDeflate, maxPendingAutoPongs
 * })`), which can send headers and bound the messages it accepts.
 * `maxPendingAutoPongs` 0 turns off the check of recent `ws` versions,
 * which drops a connection with many pongs unsent as if it were lost: the
 * client makes its own ({@link UNSENT_BOUND}), reported as a protocol error
 * with every version.
 */
export type WebSocketWithOptions = new (
  url: string,
  protocols: string | string[],
  options: { headers: Record<string, string>; maxPayload: number; perMessageDeflate: boolean; maxPendingAutoPongs: number },
) => WebSocketLike;

/**
 * Bytes waiting to be sent to the server past which it is taken as
 * flooding: `ws` answers every ping with a pong at once, written whether or
 * not the server reads, and this client's own input waits once 1 MiB is
 * unsent (one 64 KiB frame may pass it); past twice that, only pongs to a
 * server that sends pings and reads nothing can have piled up.
 */
export const UNSENT_BOUND = 2 << 20;

/** Bytes not yet sent on `socket`, where the library says (`ws`, browsers). */
export function unsentBytes(socket: WebSocketLike): number {
  const n = (socket as unknown as { bufferedAmount?: unknown }).bufferedAmount;
  return typeof n === "number" ? n : 0;
}

/**
 * True when `impl` can send request headers on the upgrade: `ws`, whose
 * sockets are Node EventEmitters. The standard WebSocket (browsers, Node
 * 22's global one) cannot, so it cannot carry an `Idempotency-Key`.
 */
export function takesHeaders(impl: WebSocketConstructor): boolean {
  return typeof (impl as { prototype?: { on?: unknown } }).prototype?.on === "function";
}

/** The standard value of `readyState` for an open socket. */
export const OPEN = 1;

let registered: WebSocketConstructor | undefined;

/**
 * Sets the WebSocket implementation used by clients created without a
 * `WebSocket` option. The Node entry of the package calls it with `ws` when
 * there is no global WebSocket; there is rarely a reason to call it yourself.
 */
export function setDefaultWebSocket(impl: WebSocketConstructor | undefined): void {
  registered = impl;
}

/** The implementation to use: the given one, the registered default, or the global one. */
export function resolveWebSocket(given?: WebSocketConstructor): WebSocketConstructor | undefined {
  if (given) return given;
  if (registered) return registered;
  const global = (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  return typeof global === "function" ? global : undefined;
}

/** The most of a refused upgrade's answer read for its error (the server's error bodies are small). */
const MAX_REFUSAL_BODY = 64 * 1024;

/**
 * Listens to a Node-style event of `socket` (`ping`, `unexpected-response`)
 * where the library has them (`ws`); false where it has not (browsers).
 */
export function onSocketEvent(socket: WebSocketLike, event: string, listener: (...args: never[]) => void): boolean {
  const on = (socket as unknown as { on?: (event: string, f: (...args: never[]) => void) => void }).on;
  if (typeof on !== "function") return false;
  on.call(socket, event, listener);
  return true;
}

/**
 * Closes a socket without waiting for anything. A connection taken as lost
 * (`hard`) is torn down at once where the library allows it (`ws`'s
 * `terminate`), rather than waiting out a close handshake nobody answers.
 */
export function closeQuietly(socket: WebSocketLike | undefined, hard = false): void {
  if (!socket) return;
  try {
    const terminate = (socket as unknown as { terminate?: () => void }).terminate;
    if (hard && typeof terminate === "function") terminate.call(socket);
    else if (socket.readyState <= OPEN) socket.close(1000);
  } catch {
    // Already closing: nothing to do.
  }
}

/** The answer to a refused upgrade, as `ws` hands it over (a Node `IncomingMessage`). */
export interface RefusedUpgrade {
  statusCode?: number;
  on(event: "data", f: (chunk: Uint8Array) => void): unknown;
  on(event: "end" | "error" | "close", f: () => void): unknown;
}

/** The body of a refused upgrade, at most {@link MAX_REFUSAL_BODY} bytes (the connect timeout bounds the wait). */
export function readRefusal(response: RefusedUpgrade): Promise<string> {
  return new Promise((resolve) => {
    const parts: Uint8Array[] = [];
    let size = 0;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      const body = new Uint8Array(size);
      let at = 0;
      for (const p of parts) {
        body.set(p, at);
        at += p.length;
      }
      resolve(new TextDecoder().decode(body));
    };
    response.on("data", (chunk) => {
      if (size >= MAX_REFUSAL_BODY) return finish();
      const piece = chunk.subarray(0, MAX_REFUSAL_BODY - size);
      parts.push(piece);
      size += piece.length;
    });
    response.on("end", finish);
    response.on("close", finish);
    response.on("error", finish);
  });
}
