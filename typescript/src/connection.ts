// One connection of an attachment: open the WebSocket, wait for `hello`
// within the connect timeout, check that the server resumed where asked,
// then hand every frame to the attachment, watch that the connection stays
// alive, and say how it ended (lost: resume; ended by the server: stop).
// Failures before `hello` reject with the reason (the server's HTTP error
// where it can be learnt), so the attachment can tell a retry from the end.

import { httpErrorOf, InvalidArgumentError, ProtocolError, TetherError, TransportError } from "./errors.js";
import type { Rejection } from "./attach-options.js";
import { decodeServerFrame, type ServerFrame } from "./protocol.js";
import {
  closeQuietly,
  onSocketEvent,
  readRefusal,
  takesHeaders,
  UNSENT_BOUND,
  unsentBytes,
  type RefusedUpgrade,
  type WebSocketConstructor,
  type WebSocketLike,
  type WebSocketWithOptions,
} from "./websocket.js";

/** The `hello` frame. */
export type Hello = Extract<ServerFrame, { type: "hello" }>;

/** What one attempt needs, and where it reports to. */
export interface ConnectionSpec {
  impl: WebSocketConstructor;
  url: string;
  protocols: string[];
  /** A run's first connections: the `Idempotency-Key` header (only `ws` can send one). */
  idempotencyKey?: string;
  connectTimeoutMs: number;
  /** The largest message accepted, in bytes, where the library bounds it (`ws`'s `maxPayload`; browsers keep their own bounds). */
  maxMessageBytes: number;
  /** The server answered the upgrade (it has been reached). */
  onUpgraded(): void;
  /** The offsets asked for; with `screen`, stdout may start later (where the screen is). */
  wanted: { stdout: number; stderr: number };
  screen: boolean;
  /** Numbered input (`input=ID`): the server sends `input_ack` right after `hello`; the connection is live once it has come. */
  numbered: boolean;
  /** False once the attachment has moved on to another socket: this one's events are then ignored. */
  current(): boolean;
  /** Makes this socket no longer current (it failed before `hello`). */
  abandon(): void;
  /**
   * An attach's one GET of its process (a run has none yet): why the socket
   * closed before `hello`, since a browser does not tell (a process that is
   * gone, a bad token).
   */
  getProcess?: () => Promise<unknown>;
  /**
   * Where the library shows pings (`ws`), a connection that brings nothing
   * for this long is taken as lost (0: never). Browsers hide pings, so there
   * it is off.
   */
  idleTimeoutMs: number;
  /** The last request the server refused, for the message of a close. */
  lastRejection(): Rejection | undefined;
  /** `hello` (and with numbered input the `input_ack` after it: `applied`) arrived: called at once, before any later frame is handed on. `watchdog.stop()` when done with the socket. */
  onHello(socket: WebSocketLike, hello: Hello, watchdog: Watchdog, applied: number | undefined): void;
  /** A frame after `hello`. */
  onFrame(frame: ServerFrame): void;
  /** The live connection is gone (closed, or idle too long): resume. */
  onLost(reason: string): void;
  /** The server ended the attachment, or broke the protocol: stop. */
  onEnded(error: ProtocolError): void;
}

/** The idle check of a live connection. */
export interface Watchdog {
  stop(): void;
}

/** Close codes of a connection that was lost rather than ended by the server (1012: the server restarts, a handover; 1013: try again later). */
const LOST_CODES = [1000, 1001, 1002, 1005, 1006, 1012, 1013];

/** A URL for error messages: the token and a run's spawn request (its command, its env) left out. */
export function shownUrl(url: string): string {
  return url.replace(/access_token=[^&]*/, "access_token=…").replace(/([?&])request=[^&]*/, "$1request=…");
}

/** Opens one connection; resolves once `hello` has arrived and `onHello` has taken the socket. */
export function connect(spec: ConnectionSpec): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const shown = shownUrl(spec.url);
    let socket: WebSocketLike;
    try {
      if (takesHeaders(spec.impl)) {
        // `ws`: a bound on each message (the whole of a fragmented one,
        // and counted before it is buffered), no compression.
        const withOptions = spec.impl as unknown as WebSocketWithOptions;
        const headers: Record<string, string> = spec.idempotencyKey === undefined ? {} : { "Idempotency-Key": spec.idempotencyKey };
        socket = new withOptions(spec.url, spec.protocols, {
          headers,
          maxPayload: spec.maxMessageBytes,
          perMessageDeflate: false,
          maxPendingAutoPongs: 0,
        });
      } else {
        if (spec.idempotencyKey !== undefined) throw new InvalidArgumentError("run needs a WebSocket that can send the Idempotency-Key header");
        socket = new spec.impl(spec.url, spec.protocols);
      }
    } catch (e) {
      reject(e instanceof TetherError ? e : new TransportError(shown, `cannot open a WebSocket: ${(e as Error).message}`));
      return;
    }
    socket.binaryType = "arraybuffer";
    const wanted = { ...spec.wanted };
    let lastSeen = Date.now();
    let opened = false;
    let settled = false;
    /** What the library reported last: the cause of a close (a refused connection, a message over the bound). */
    let lastError: unknown;
    /** Set when this client refused what the server sent: the connection is ended, not lost. */
    let refused: ProtocolError | undefined;
    /** Ends the connection for what the server did: a protocol error, not resumed. */
    const refuse = (error: ProtocolError) => {
      if (refused !== undefined) return;
      refused = error;
      closeQuietly(socket, true);
      if (!opened) settle(error);
      else spec.onEnded(error);
    };
    /** Numbered input: the `hello` that waits for its `input_ack`. */
    let hello: Hello | undefined;
    const settle = (error?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(connectTimer);
      if (error === undefined) return resolve();
      // This socket is abandoned: its late events are ignored.
      if (spec.current()) spec.abandon();
      closeQuietly(socket, true);
      reject(error);
    };
    const connectTimer = setTimeout(() => {
      if (!opened) settle(new TransportError(shown, `no hello within ${spec.connectTimeoutMs} ms`, true));
    }, spec.connectTimeoutMs);
    // `ws` shows pings; they keep a quiet connection counted as alive. It
    // answers each with a pong at once, whether or not the server reads:
    // pongs piling up unsent are a flood, refused.
    const showsPings = onSocketEvent(socket, "ping", () => {
      lastSeen = Date.now();
      const unsent = unsentBytes(socket);
      if (unsent > UNSENT_BOUND && spec.current()) {
        refuse(new ProtocolError(`the server sends pings faster than it reads their pongs (${unsent} bytes unsent): a ping flood`));
      }
    });
    // A refused run (the spawn failed, a bad request) is an HTTP answer to
    // the upgrade: `ws` shows it, so the error carries the server's code.
    if (spec.idempotencyKey !== undefined) {
      onSocketEvent(socket, "unexpected-response", (_request: unknown, response: RefusedUpgrade) => {
        void readRefusal(response).then((text) => settle(httpErrorOf(response.statusCode ?? 0, text)));
      });
    }

    socket.onopen = () => spec.current() && spec.onUpgraded();
    socket.onerror = (event) => {
      // A close event follows; `ws` says here why (ECONNREFUSED, or its own
      // refusal of what the server sent: WS_ERR_...).
      lastError = (event as { error?: unknown }).error ?? event;
      const code = String((lastError as { code?: unknown }).code ?? "");
      if (code.startsWith("WS_ERR_") && spec.current()) {
        refuse(new ProtocolError(`the server broke the WebSocket protocol: ${(lastError as Error).message} (${code})`));
      }
    };
    socket.onmessage = (event) => {
      if (!spec.current() || refused !== undefined) return;
      lastSeen = Date.now();
      let frame: ServerFrame;
      try {
        if (!(event.data instanceof ArrayBuffer)) throw new ProtocolError("a text message from the server");
        frame = decodeServerFrame(event.data);
      } catch (e) {
        const error = e instanceof ProtocolError ? e : new ProtocolError(`bad frame from the server: ${(e as Error).message}`);
        if (!opened) settle(error);
        else spec.onEnded(error);
        return;
      }
      if (opened) return spec.onFrame(frame);
      if (hello !== undefined && frame.type === "input_ack") {
        opened = true;
        settle();
        spec.onHello(socket, hello, watch(spec, showsPings, () => lastSeen), frame.applied);
      } else if (hello === undefined && frame.type === "hello") {
        // With `screen`, stdout starts where the screen frame says.
        if (spec.screen) wanted.stdout = frame.stdout;
        if (frame.stdout !== wanted.stdout || frame.stderr !== wanted.stderr) {
          return settle(new ProtocolError(`the server resumed at offsets ${frame.stdout}/${frame.stderr}, asked for ${wanted.stdout}/${wanted.stderr}`));
        }
        if (spec.numbered) {
          hello = frame;
          return;
        }
        opened = true;
        settle();
        spec.onHello(socket, frame, watch(spec, showsPings, () => lastSeen), undefined);
      } else if (frame.type === "error") {
        settle(new ProtocolError(`attach refused: ${frame.code}: ${frame.message}`, frame.code));
      } else {
        settle(new ProtocolError(`expected ${hello ? "input_ack" : "hello"}, got ${frame.type}`));
      }
    };
    socket.onclose = (event) => {
      if (!spec.current() || refused !== undefined) return;
      // A browser does not tell why an upgrade failed; ask over HTTP, so
      // that a process that is gone or a bad token ends the attachment
      // instead of retrying.
      if (!opened) return void explain(spec, shown, event.code, lastError).then(settle);
      if (LOST_CODES.includes(event.code)) return spec.onLost(`connection closed (code ${event.code})`);
      const rejection = spec.lastRejection();
      const detail = rejection ? `${rejection.code}: ${rejection.message}` : "no error frame";
      spec.onEnded(new ProtocolError(`the server closed the attachment with code ${event.code} (${detail})`, rejection?.code));
    };
  });
}

/** Starts the idle check of a live connection (where pings are shown). */
function watch(spec: ConnectionSpec, showsPings: boolean, lastSeen: () => number): Watchdog {
  const idle = spec.idleTimeoutMs;
  if (idle <= 0 || !showsPings) return { stop() {} };
  const timer = setInterval(() => {
    if (!spec.current()) return clearInterval(timer);
    if (Date.now() - lastSeen() <= idle) return;
    clearInterval(timer);
    spec.onLost(`no message for ${idle} ms`);
  }, Math.max(10, Math.floor(idle / 4)));
  return { stop: () => clearInterval(timer) };
}

/** Why a socket closed before `hello`: the HTTP error of a GET of the process, or a transient transport error (its cause what the library said). */
async function explain(spec: ConnectionSpec, url: string, code: number, cause: unknown): Promise<TetherError> {
  // A run has no process to ask about yet (its refusals come through
  // `unexpected-response`): retry with the same key, which attaches to
  // the process a lost answer started rather than starting another.
  if (spec.getProcess) {
    try {
      await spec.getProcess();
    } catch (e) {
      if (e instanceof TetherError) return e;
      return new TransportError(url, String(e));
    }
  }
  const said = cause instanceof Error && cause.message ? `: ${cause.message}` : "";
  return new TransportError(url, `the connection closed before hello (code ${code})${said}`, false, cause);
}
