// One connection attempt of an attachment: open the WebSocket, wait for
// `hello` within the connect timeout, check that the server resumed where
// asked, and from then on hand every frame and the close to the
// attachment. Failures before `hello` reject with the reason (the server's
// HTTP error where it can be learnt), so the attachment can tell a retry
// from the end.

import { httpErrorOf, InvalidArgumentError, ProtocolError, TetherError, TransportError } from "./errors.js";
import { decodeServerFrame, type ServerFrame } from "./protocol.js";
import {
  closeQuietly,
  onSocketEvent,
  readRefusal,
  takesHeaders,
  type RefusedUpgrade,
  type WebSocketConstructor,
  type WebSocketLike,
  type WebSocketWithHeaders,
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
  /** The offsets asked for; with `screen`, stdout may start later (where the screen is). */
  wanted: { stdout: number; stderr: number };
  screen: boolean;
  /** False once the attachment has moved on to another socket: this one's events are then ignored. */
  current(): boolean;
  /** Makes this socket no longer current (it failed before `hello`). */
  abandon(): void;
  /** Why the socket closed before `hello`: asked over HTTP, since a browser does not tell. */
  explain(shownUrl: string, code: number): Promise<TetherError>;
  /** `hello` arrived: called at once, before any later frame is handed on. */
  onHello(socket: WebSocketLike, hello: Hello): void;
  /** A message or a ping arrived (the connection is alive). */
  onActivity(): void;
  /** A frame after `hello`. */
  onFrame(frame: ServerFrame): void;
  /** A message after `hello` that is not a frame. */
  onBadFrame(error: ProtocolError): void;
  /** The socket closed after `hello`. */
  onClose(code: number): void;
}

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
      if (spec.idempotencyKey !== undefined) {
        if (!takesHeaders(spec.impl)) throw new InvalidArgumentError("run needs a WebSocket that can send the Idempotency-Key header");
        const withHeaders = spec.impl as unknown as WebSocketWithHeaders;
        socket = new withHeaders(spec.url, spec.protocols, { headers: { "Idempotency-Key": spec.idempotencyKey } });
      } else {
        socket = new spec.impl(spec.url, spec.protocols);
      }
    } catch (e) {
      reject(e instanceof TetherError ? e : new TransportError(shown, `cannot open a WebSocket: ${(e as Error).message}`));
      return;
    }
    socket.binaryType = "arraybuffer";
    const wanted = { ...spec.wanted };
    let opened = false;
    let settled = false;
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
    // `ws` shows pings; they keep a quiet connection counted as alive.
    onSocketEvent(socket, "ping", () => spec.onActivity());
    // A refused run (the spawn failed, a bad request) is an HTTP answer to
    // the upgrade: `ws` shows it, so the error carries the server's code.
    if (spec.idempotencyKey !== undefined) {
      onSocketEvent(socket, "unexpected-response", (_request: unknown, response: RefusedUpgrade) => {
        void readRefusal(response).then((text) => settle(httpErrorOf(response.statusCode ?? 0, text)));
      });
    }

    socket.onerror = () => {}; // a close event follows with the details we have
    socket.onmessage = (event) => {
      if (!spec.current()) return;
      spec.onActivity();
      let frame: ServerFrame;
      try {
        if (!(event.data instanceof ArrayBuffer)) throw new ProtocolError("a text message from the server");
        frame = decodeServerFrame(event.data);
      } catch (e) {
        const error = e instanceof ProtocolError ? e : new ProtocolError(`bad frame from the server: ${(e as Error).message}`);
        if (!opened) settle(error);
        else spec.onBadFrame(error);
        return;
      }
      if (opened) return spec.onFrame(frame);
      if (frame.type === "hello") {
        // With `screen`, stdout starts where the screen frame says.
        if (spec.screen) wanted.stdout = frame.stdout;
        if (frame.stdout !== wanted.stdout || frame.stderr !== wanted.stderr) {
          return settle(new ProtocolError(`the server resumed at offsets ${frame.stdout}/${frame.stderr}, asked for ${wanted.stdout}/${wanted.stderr}`));
        }
        opened = true;
        settle();
        spec.onHello(socket, frame);
      } else if (frame.type === "error") {
        settle(new ProtocolError(`attach refused: ${frame.code}: ${frame.message}`, frame.code));
      } else {
        settle(new ProtocolError(`expected hello, got ${frame.type}`));
      }
    };
    socket.onclose = (event) => {
      if (!spec.current()) return;
      // A browser does not tell why an upgrade failed; ask over HTTP, so
      // that a process that is gone or a bad token ends the attachment
      // instead of retrying.
      if (!opened) void spec.explain(shown, event.code).then(settle);
      else spec.onClose(event.code);
    };
  });
}
