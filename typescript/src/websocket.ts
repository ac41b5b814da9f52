// Where the WebSocket implementation comes from. Browsers (and Node 22+)
// have a global WebSocket; Node 20 has none, so the package's Node entry
// (node.ts) registers the `ws` package here. A caller can always pass its
// own with `ClientOptions.WebSocket`.

/** The part of the standard WebSocket API the client uses (browsers, Node 22+ and `ws` all have it). */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  readonly protocol: string;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: Uint8Array<ArrayBuffer>): void;
  close(code?: number, reason?: string): void;
}

/** A WebSocket constructor with the standard signature (`globalThis.WebSocket`, or `ws`'s default export). */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** A constructor that also takes options with headers: `ws`'s (`new WebSocket(url, protocols, { headers })`). */
export type WebSocketWithHeaders = new (url: string, protocols: string | string[], options: { headers: Record<string, string> }) => WebSocketLike;

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
