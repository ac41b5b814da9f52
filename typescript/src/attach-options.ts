// What an attachment is given: how to attach (the options a caller passes),
// what it needs of the client that makes it (AttachHost: URLs, the
// WebSocket implementation, a few HTTP calls), and the small types its
// public face reports (state, rejections).

import type { CallOptions } from "./endpoint.js";
import type { ProcessInfo, SpawnRequest } from "./protocol.js";
import type { Backoff, RetryPolicy } from "./retry.js";
import type { WebSocketConstructor } from "./websocket.js";

/**
 * What an attachment needs of the client that made it: {@link TetherClient}
 * is one. An interface rather than the class, so that attachments sit below
 * the client and never import it.
 */
export interface AttachHost {
  /** The server's base URL, for error messages. */
  readonly baseUrl: string;
  /** The client's retry policy: the default reconnect budget. */
  readonly retry: RetryPolicy;
  /** The WebSocket URL of an attachment to process `id` with its query. */
  attachUrl(id: string, query: Record<string, string | number>): string;
  /** The WebSocket URL of `GET /v1/run` with its query. */
  runUrl(query: Record<string, string | number>): string;
  /** The subprotocols to offer (`tether.v1`, and the token when it can ride there). */
  attachProtocols(): string[];
  /** The WebSocket implementation; throws when there is none. */
  webSocket(): WebSocketConstructor;
  /** Starts a process over HTTP (a `run` whose WebSocket cannot send headers). */
  spawn(request: SpawnRequest, options?: CallOptions): Promise<ProcessInfo>;
  /** One GET of the process, without retries: why an upgrade failed. */
  getOnce(id: string, options?: CallOptions): Promise<ProcessInfo>;
  /** Waits for the exit (the long-poll beside the socket). */
  wait(id: string, options?: CallOptions): Promise<ProcessInfo>;
  /** A backoff of `policy` that knows whether the server has answered yet (a refused first contact is retried only briefly). */
  backoff(policy: RetryPolicy): Backoff;
  /** Records that the server answered (an upgrade). */
  noteContact(): void;
}

/** What a `run` attachment opens its first connection with: the spawn request and its idempotency key. */
export interface RunTarget {
  /** The spawn request as JSON (the `request` query parameter). */
  request: string;
  /** The `Idempotency-Key` of every attempt until the first `hello`. */
  key: string;
}

/** How to attach. Every field is optional. */
export interface AttachOptions {
  /** Offsets to start from (default 0: replay everything the server retains). */
  offsets?: { stdout?: number; stderr?: number };
  /** Credit window per stream in bytes: at most this much of each stream is buffered in the client (default 256 KiB). */
  window?: number;
  /**
   * PTY only: start from the terminal screen (`screen=1`) rather than
   * replaying bytes, and on a reconnect whose offset was evicted, get the
   * screen instead of a `dropped` gap (`screen=evicted`). stdout then
   * yields a `screen` chunk first.
   */
  screen?: boolean;
  /** Read-only attachment (`readonly=1`): `write`, `closeStdin`, `resize` and `signal` throw. */
  readonly?: boolean;
  /**
   * Numbered input (default true; `input=ID`, docs/PROTOCOL.md): every
   * write, close, resize and signal is applied once, in order, across
   * reconnects. false: unnumbered, for servers without it (what a broken
   * connection carried may be lost).
   */
  numberedInput?: boolean;
  /**
   * Retry budget for connecting and for each reconnect after a drop
   * (default: the client's `retry`, 30 s with backoff 100 ms to 2 s;
   * `budgetMs: Infinity` never gives up). Every reconnect waits its
   * backoff; a connection that brought data or lived a second starts the
   * budget afresh.
   */
  reconnect?: Partial<RetryPolicy>;
  /** Timeout of one connection attempt until `hello` (and `input_ack`), in ms (default 10 000), cut to what is left of the reconnect budget. */
  connectTimeoutMs?: number;
  /**
   * The largest message accepted from the server, in bytes (default: the
   * window + 2 MiB, room for a `hello` whose argv filled the server's 1 MiB
   * body). Applied where the WebSocket library can bound it (`ws`, before
   * a message is buffered); browsers keep their own bounds.
   */
  maxMessageBytes?: number;
  /**
   * Where the WebSocket library shows pings (`ws` in Node), a connection
   * that brings nothing for this long (the server pings every 20 s) is taken
   * as lost and resumed (default 90 000 ms; 0 turns it off). Browsers hide
   * pings, so there it is off.
   */
  idleTimeoutMs?: number;
  /**
   * Long-poll `wait` beside the socket (default true), so a stream ends as
   * soon as the process has exited and that stream is read, even while the
   * other stream is unread. Costs one HTTP connection per attachment.
   */
  pollExit?: boolean;
  /** Ends the attachment: readers and `exit` reject with the signal's reason. The process keeps running. */
  signal?: AbortSignal;
  /** A `hello` arrived: the attachment is live (`resumed` after a reconnect). */
  onOpen?(process: ProcessInfo, resumed: boolean): void;
  /** The connection is gone; another attempt follows in `delayMs`. */
  onReconnecting?(delayMs: number, attempt: number, reason: string): void;
  /** The server refused a request without closing (a bad resize, stdin to a read-only attachment...). */
  onRejected?(code: string, message: string): void;
}

/** Where an attachment is in its life. */
export type AttachState = "connecting" | "open" | "reconnecting" | "exited" | "closed";

/** A request the server refused without ending the attachment. */
export interface Rejection {
  /** The error code, such as `not_running` or `invalid_request`. */
  code: string;
  /** What the server said. */
  message: string;
}

