// Attachment: one process's output, input and exit over `tether.v1`, with
// per-stream credit and automatic resume.
//
// One WebSocket at a time carries the attachment. Output frames go into the
// queue of their stream (output.ts); credit for a stream is granted only as
// the application consumes it, so each queue holds at most `window` bytes
// and unread output waits on the server. When the socket drops before the
// exit, the attachment reconnects with the next offset of each stream and a
// window sized from what is still unconsumed, so every byte arrives once, in
// order, and the per-stream bound holds across reconnects. Beside the
// socket, a long-poll of `wait` learns the final totals, so one stream can
// end while the other is still unread on the server.

import type { CallOptions, TetherClient } from "./client.js";
import { checkSize, randomKey } from "./client.js";
import { ClosedError, httpErrorOf, InvalidArgumentError, ProtocolError, TetherError, TransportError } from "./errors.js";
import { OutputStream, StreamState, type StreamStats } from "./output.js";
import { decodeServerFrame, encodeClientFrame, type ClientFrame, type ProcessInfo, type ServerFrame, type SpawnRequest, type StreamName } from "./protocol.js";
import { Backoff, sleep, type RetryPolicy } from "./retry.js";
import { OPEN, takesHeaders, type WebSocketLike, type WebSocketWithHeaders } from "./websocket.js";

/** Largest stdin payload per frame (the server accepts frames up to 1 MiB). */
const MAX_STDIN_FRAME = 64 * 1024;
/** Input (stdin, signals) queued while reconnecting; past it, `write` waits. */
const MAX_QUEUED_INPUT = 1024 * 1024;
/** Past this many bytes buffered in the socket, `write` waits for it to drain. */
const MAX_SOCKET_BUFFER = 1024 * 1024;
/** The most of a refused upgrade's answer read for its error (the server's error bodies are small). */
const MAX_REFUSAL_BODY = 64 * 1024;

/** What a `run` attachment opens its first connection with: the spawn request and its idempotency key. */
interface RunTarget {
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
  /** Retry budget for connecting and for each reconnect after a drop (default: the client's `retry`, 30 s with backoff 100 ms to 2 s; `budgetMs: Infinity` never gives up). */
  reconnect?: Partial<RetryPolicy>;
  /** Timeout of one connection attempt until `hello`, in ms (default 10 000). */
  connectTimeoutMs?: number;
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

/**
 * An attachment to a process: its two output streams as async iterators,
 * its stdin, resize and signal, and its exit. Made by
 * {@link TetherClient.attach}, {@link TetherClient.start} or
 * {@link TetherClient.run}.
 *
 * ```ts
 * const a = await client.attach(id);
 * await a.write("input\n");
 * await a.closeStdin();
 * for await (const chunk of a.stdout) if (chunk.type === "data") process.stdout.write(chunk.data);
 * const info = await a.exit;
 * ```
 *
 * - Each byte is delivered once, in order, across reconnects; loss (drop
 *   mode) is a `dropped` chunk with the exact range.
 * - Input written while reconnecting waits in a bounded queue and goes out
 *   after the resume; input handed to a connection that then broke may be
 *   lost, but is never repeated. `closeStdin` on pipes is repeated after each
 *   resume (closing twice is harmless).
 * - `exit` resolves as soon as the server reports the exit, whether or not
 *   the output has been read, and rejects only if the attachment failed or
 *   was closed before the exit.
 */
export class Attachment {
  /** The process's stdout (the whole output of a PTY). */
  readonly stdout: OutputStream;
  /** The process's stderr (empty for a PTY). */
  readonly stderr: OutputStream;
  /** The exited process object; see the class documentation. */
  readonly exit: Promise<ProcessInfo>;
  /** Where the attachment is in its life. */
  state: AttachState = "connecting";
  /** The process as last reported (`hello`, the exit, or the exit poll). */
  process: ProcessInfo | undefined;
  /** WebSocket connections opened so far: 1, plus one per resume. */
  connections = 0;
  /** The last request the server refused without closing. */
  lastRejection: Rejection | undefined;

  private readonly streams: Record<StreamName, StreamState>;
  private readonly window: number;
  private readonly threshold: number;
  private readonly policy: RetryPolicy;
  private readonly backoff: Backoff;
  private socket: WebSocketLike | undefined;
  private generation = 0;
  private settleExit!: { resolve(p: ProcessInfo): void; reject(e: unknown): void };
  private exitKnown = false;
  private readonly lifetime = new AbortController();
  private outbox: ClientFrame[] = [];
  private outboxBytes = 0;
  private outboxWaiters: Array<() => void> = [];
  private pendingResize: { cols: number; rows: number } | undefined;
  private eofSent = false;
  private skipPause: (() => void) | undefined;
  private lastSeen = 0;
  private openedAt = 0;
  private idleTimer: ReturnType<typeof setInterval> | undefined;
  private processId: string;
  /** Until the first `hello` of a {@link TetherClient.run}: what to spawn; the id is known from then on. */
  private pendingRun: RunTarget | undefined;

  /** @internal Use {@link TetherClient.attach} or {@link TetherClient.run}. */
  constructor(
    private readonly client: TetherClient,
    target: string | RunTarget,
    private readonly options: AttachOptions,
  ) {
    if (typeof target === "string") this.processId = target;
    else {
      this.processId = "";
      this.pendingRun = target;
    }
    const window = options.window ?? 256 * 1024;
    if (!Number.isSafeInteger(window) || window < 1) throw new InvalidArgumentError(`window must be a positive integer, not ${window}`);
    this.window = window;
    this.threshold = Math.max(1, Math.floor(window / 4));
    this.policy = { ...client.retry, ...options.reconnect };
    this.backoff = new Backoff(this.policy);
    const onConsumed = (s: StreamState) => this.grant(s, false);
    this.streams = {
      stdout: new StreamState("stdout", options.offsets?.stdout ?? 0, onConsumed),
      stderr: new StreamState("stderr", options.offsets?.stderr ?? 0, onConsumed),
    };
    this.stdout = new OutputStream(this.streams.stdout);
    this.stderr = new OutputStream(this.streams.stderr);
    this.exit = new Promise<ProcessInfo>((resolve, reject) => (this.settleExit = { resolve, reject }));
    // Nobody has to await `exit`; a rejection then must not be "unhandled".
    this.exit.catch(() => {});
  }

  /** The process id (for a {@link TetherClient.run}, the new process's, known once it resolves). */
  get id(): string {
    return this.processId;
  }

  /** The next offset of each stream: where a resume (or a later attach) starts. */
  get offsets(): { stdout: number; stderr: number } {
    return { stdout: this.streams.stdout.next, stderr: this.streams.stderr.next };
  }

  /** Flow-control figures of both streams. */
  stats(): Record<StreamName, StreamStats> {
    return { stdout: this.streams.stdout.stats(), stderr: this.streams.stderr.stats() };
  }

  /**
   * Writes to the process's stdin (a string is sent as UTF-8). Resolves once
   * the bytes are handed to the connection, or queued while reconnecting;
   * waits while that queue or the socket's buffer is full (`signal` ends the
   * wait; pieces already handed over stay sent).
   */
  async write(data: Uint8Array | string, options: CallOptions = {}): Promise<void> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    this.checkWritable();
    for (let at = 0; at < bytes.length; at += MAX_STDIN_FRAME) {
      await this.send({ type: "stdin", data: bytes.subarray(at, at + MAX_STDIN_FRAME) }, options.signal);
    }
  }

  /** Closes the process's stdin (on a PTY: types the terminal's EOF character, usually Ctrl-D). */
  async closeStdin(): Promise<void> {
    this.checkWritable();
    this.eofSent = true;
    await this.send({ type: "stdin_eof" });
  }

  /** Sets the PTY window size (1..4096 each; ignored for pipes). While reconnecting, the last size is sent after the resume. */
  async resize(cols: number, rows: number): Promise<void> {
    this.checkWritable();
    checkSize(cols, rows);
    if (this.isLive()) this.socket!.send(encodeClientFrame({ type: "resize", cols, rows }));
    else this.pendingResize = { cols, rows };
  }

  /** Sends a signal by name (`"INT"`, `"TERM"`, `"HUP"`...) to the process group. */
  async signal(signal: string): Promise<void> {
    this.checkWritable();
    await this.send({ type: "signal", signal });
  }

  /** Drops the current connection and resumes at once from the saved offsets (for a page that knows the network is back). */
  reconnect(): void {
    if (this.state === "reconnecting") {
      this.skipPause?.();
      return;
    }
    if (this.state !== "open") return;
    this.lost("reconnect requested");
  }

  /** Detaches for good; the process keeps running. Readers still waiting and `exit` (if not yet known) reject with {@link ClosedError}. */
  close(): void {
    this.fail(new ClosedError("closed by the client"), "closed");
  }

  // ---- connection lifecycle ----

  /** @internal Connects for the first time; resolves on the first `hello`. */
  async start(): Promise<void> {
    const signal = this.options.signal;
    if (signal) {
      signal.throwIfAborted();
      const onAbort = () => this.fail(signal.reason, "closed");
      signal.addEventListener("abort", onAbort, { once: true });
      this.lifetime.signal.addEventListener("abort", () => signal.removeEventListener("abort", onAbort), { once: true });
    }
    await this.connectLoop();
    if (this.state === "closed" && !this.exitKnown) throw this.failure ?? new ClosedError("closed before it opened");
    if (this.options.pollExit !== false && !this.exitKnown) void this.pollExit();
  }

  private failure: unknown;

  private isDone(): boolean {
    return this.state === "exited" || this.state === "closed";
  }

  private isLive(): boolean {
    return this.state === "open" && this.socket !== undefined && this.socket.readyState === OPEN;
  }

  /** Connects until a `hello` arrives, within the reconnect budget. */
  private async connectLoop(): Promise<void> {
    for (;;) {
      if (this.isDone()) return;
      if (this.complete()) return this.finishExited();
      try {
        await this.connectOnce();
        return;
      } catch (e) {
        if (this.isDone()) return;
        const error = e instanceof TetherError ? e : new TransportError(this.client.baseUrl, String(e));
        try {
          const skip = new Promise<void>((r) => (this.skipPause = r));
          await Promise.race([
            this.backoff.failed(error, this.lifetime.signal, (ms, attempt) => this.options.onReconnecting?.(ms, attempt, error.message)),
            skip,
          ]);
        } catch (final) {
          this.fail(final, "closed");
          return;
        } finally {
          this.skipPause = undefined;
        }
      }
    }
  }

  /** One connection attempt: resolves once `hello` has arrived and the socket is live. */
  private connectOnce(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      // Size this connection's window so that, with what is still
      // unconsumed, each stream stays within `window`: the server counts
      // the window afresh from each attach.
      const { stdout, stderr } = this.streams;
      const connWindow = Math.max(1, this.window - Math.max(stdout.unconsumed, stderr.unconsumed));
      for (const s of [stdout, stderr]) s.owed = this.window - s.unconsumed - connWindow;
      const wanted = { stdout: stdout.next, stderr: stderr.next };
      // A run spawns on its first connection (retried with the same key);
      // every later one attaches to that process by id.
      const run = this.pendingRun;
      let url: string;
      if (run) {
        url = this.client.runUrl({ request: run.request, window: connWindow });
      } else {
        const query: Record<string, string | number> = { stdout: wanted.stdout, stderr: wanted.stderr, window: connWindow };
        if (this.options.readonly) query.readonly = 1;
        if (this.options.screen) query.screen = this.connections === 0 ? 1 : "evicted";
        url = this.client.attachUrl(this.id, query);
      }
      const shownUrl = url.replace(/access_token=[^&]*/, "access_token=…").replace(/([?&])request=[^&]*/, "$1request=…");
      const generation = ++this.generation;
      this.state = this.connections === 0 ? "connecting" : "reconnecting";
      let socket: WebSocketLike;
      try {
        const impl = this.client.webSocket();
        if (run) {
          if (!takesHeaders(impl)) throw new InvalidArgumentError("run needs a WebSocket that can send the Idempotency-Key header");
          socket = new (impl as unknown as WebSocketWithHeaders)(url, this.client.attachProtocols(), { headers: { "Idempotency-Key": run.key } });
        } else {
          socket = new impl(url, this.client.attachProtocols());
        }
      } catch (e) {
        reject(e instanceof TetherError ? e : new TransportError(shownUrl, `cannot open a WebSocket: ${(e as Error).message}`));
        return;
      }
      socket.binaryType = "arraybuffer";
      let opened = false;
      let settled = false;
      const settle = (error?: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(connectTimer);
        if (error === undefined) return resolve();
        // This socket is abandoned: its late events are ignored.
        if (generation === this.generation) this.generation += 1;
        closeQuietly(socket, true);
        reject(error);
      };
      const connectTimeout = this.options.connectTimeoutMs ?? 10_000;
      const connectTimer = setTimeout(() => {
        if (!opened) settle(new TransportError(shownUrl, `no hello within ${connectTimeout} ms`, true));
      }, connectTimeout);
      // `ws` shows pings; they keep a quiet connection counted as alive.
      const on = (socket as unknown as { on?: (event: string, f: (...args: never[]) => void) => void }).on;
      if (typeof on === "function") on.call(socket, "ping", () => (this.lastSeen = Date.now()));
      // A refused run (the spawn failed, a bad request) is an HTTP answer to
      // the upgrade: `ws` shows it, so the error carries the server's code.
      if (run && typeof on === "function") {
        on.call(socket, "unexpected-response", (_request: unknown, response: RefusedUpgrade) => {
          void readRefusal(response).then((text) => settle(httpErrorOf(response.statusCode ?? 0, text)));
        });
      }

      socket.onerror = () => {}; // a close event follows with the details we have
      socket.onmessage = (event) => {
        if (generation !== this.generation) return;
        this.lastSeen = Date.now();
        let frame: ServerFrame;
        try {
          if (!(event.data instanceof ArrayBuffer)) throw new ProtocolError("a text message from the server");
          frame = decodeServerFrame(event.data);
        } catch (e) {
          const error = e instanceof ProtocolError ? e : new ProtocolError(`bad frame from the server: ${(e as Error).message}`);
          if (!opened) settle(error);
          else this.fail(error, "closed");
          return;
        }
        if (!opened) {
          if (frame.type === "hello") {
            // With `screen`, stdout starts where the screen frame says.
            if (this.options.screen && frame.stdout !== wanted.stdout) stdout.next = wanted.stdout = frame.stdout;
            if (frame.stdout !== wanted.stdout || frame.stderr !== wanted.stderr) {
              return settle(new ProtocolError(`the server resumed at offsets ${frame.stdout}/${frame.stderr}, asked for ${wanted.stdout}/${wanted.stderr}`));
            }
            opened = true;
            settle();
            if (this.pendingRun) {
              this.processId = frame.process.id;
              this.pendingRun = undefined;
            }
            this.opened(socket, frame.process);
          } else if (frame.type === "error") {
            settle(new ProtocolError(`attach refused: ${frame.code}: ${frame.message}`, frame.code));
          } else {
            settle(new ProtocolError(`expected hello, got ${frame.type}`));
          }
          return;
        }
        try {
          this.frame(frame);
        } catch (e) {
          this.fail(e, "closed");
        }
      };
      socket.onclose = (event) => {
        if (generation !== this.generation) return;
        if (!opened) {
          // A browser does not tell why an upgrade failed; ask over HTTP, so
          // that a process that is gone or a bad token ends the attachment
          // instead of retrying.
          void this.explain(shownUrl, event.code).then(settle);
          return;
        }
        if (this.isDone()) return;
        if ([1000, 1001, 1002, 1005, 1006].includes(event.code)) {
          this.lost(`connection closed (code ${event.code})`);
        } else {
          const detail = this.lastRejection ? `${this.lastRejection.code}: ${this.lastRejection.message}` : "no error frame";
          this.fail(new ProtocolError(`the server closed the attachment with code ${event.code} (${detail})`, this.lastRejection?.code), "closed");
        }
      };
    });
  }

  /** Why an upgrade failed: the HTTP error of a GET of the process, or a transient transport error. */
  private async explain(url: string, code: number): Promise<TetherError> {
    // A run has no process to ask about yet (its refusals come through
    // `unexpected-response`): retry with the same key, which attaches to
    // the process a lost answer started rather than starting another.
    if (this.pendingRun) return new TransportError(url, `the connection closed before hello (code ${code})`);
    try {
      await this.client.getOnce(this.id, { signal: this.lifetime.signal });
    } catch (e) {
      if (e instanceof TetherError) return e;
      return new TransportError(url, String(e));
    }
    return new TransportError(url, `the connection closed before hello (code ${code})`);
  }

  /** A `hello` arrived on `socket`: it carries the attachment from now on. */
  private opened(socket: WebSocketLike, process: ProcessInfo): void {
    const resumed = this.connections > 0;
    this.openedAt = Date.now();
    this.socket = socket;
    this.connections += 1;
    this.state = "open";
    this.process = process;
    this.learn(process);
    this.lastSeen = Date.now();
    this.startIdleTimer();
    for (const s of [this.streams.stdout, this.streams.stderr]) this.grant(s, true);
    // A lost stdin_eof would leave the process waiting for input for ever.
    // On pipes closing twice is harmless, so it is repeated on each resume;
    // on a PTY it types ^D, so never.
    if (resumed && this.eofSent && !process.tty) socket.send(encodeClientFrame({ type: "stdin_eof" }));
    for (const frame of this.outbox.splice(0)) socket.send(encodeClientFrame(frame));
    this.outboxBytes = 0;
    for (const w of this.outboxWaiters.splice(0)) w();
    if (this.pendingResize) {
      socket.send(encodeClientFrame({ type: "resize", ...this.pendingResize }));
      this.pendingResize = undefined;
    }
    this.options.onOpen?.(process, resumed);
  }

  /** The live connection is gone: resume from the saved offsets. */
  private lost(reason: string): void {
    if (this.isDone()) return;
    const socket = this.socket;
    this.socket = undefined;
    this.generation += 1; // ignore the old socket's late frames and close
    this.stopIdleTimer();
    closeQuietly(socket, true);
    this.state = "reconnecting";
    // A connection that lived a while ends a run of failures: the next
    // outage gets a fresh budget (data frames reset it too).
    if (Date.now() - this.openedAt > 1000) this.backoff.reset();
    if (this.complete()) return this.finishExited();
    this.options.onReconnecting?.(0, 0, reason);
    void this.connectLoop();
  }

  private startIdleTimer(): void {
    this.stopIdleTimer();
    const idle = this.options.idleTimeoutMs ?? 90_000;
    const socket = this.socket as unknown as { on?: unknown };
    if (idle <= 0 || typeof socket?.on !== "function") return;
    this.idleTimer = setInterval(() => {
      if (Date.now() - this.lastSeen > idle) this.lost(`no message for ${idle} ms`);
    }, Math.max(10, Math.floor(idle / 4)));
  }

  private stopIdleTimer(): void {
    if (this.idleTimer) clearInterval(this.idleTimer);
    this.idleTimer = undefined;
  }

  // ---- frames ----

  private frame(frame: ServerFrame): void {
    switch (frame.type) {
      case "stdout":
      case "stderr": {
        const s = this.streams[frame.type];
        const length = frame.data.length;
        if (frame.offset !== s.next) throw new ProtocolError(`${frame.type} data at offset ${frame.offset}, expected ${s.next}`);
        s.next += length;
        s.received += length;
        if (length === 0) return;
        this.backoff.reset();
        if (s.discard) {
          s.owed += length;
          this.grant(s, false);
          return;
        }
        // The server may have sent at most `window - unconsumed - owed` more.
        if (s.unconsumed + length + s.owed > this.window) {
          throw new ProtocolError(`the server sent more ${frame.type} than the credit window of ${this.window} bytes`);
        }
        s.push({ type: "data", offset: frame.offset, data: frame.data });
        return;
      }
      case "dropped": {
        const s = this.streams[frame.stream];
        if (frame.offset !== s.next) throw new ProtocolError(`dropped range of ${frame.stream} starts at ${frame.offset}, expected ${s.next}`);
        s.next = frame.offset + frame.length;
        if (!s.discard) s.push({ type: "dropped", offset: frame.offset, length: frame.length });
        return;
      }
      case "screen": {
        const s = this.streams.stdout;
        if (frame.offset !== s.next) throw new ProtocolError(`screen at offset ${frame.offset}, expected ${s.next}`);
        if (!s.discard) s.push({ type: "screen", offset: frame.offset, cols: frame.cols, rows: frame.rows, data: frame.data });
        return;
      }
      case "exit":
        this.process = frame.process;
        this.learn(frame.process);
        this.finishExited();
        return;
      case "error":
        this.lastRejection = { code: frame.code, message: frame.message };
        this.options.onRejected?.(frame.code, frame.message);
        return;
      case "hello":
        throw new ProtocolError("a second hello frame");
    }
  }

  /** Grants the credit owed on a stream when it is due (always with `force`). */
  private grant(s: StreamState, force: boolean): void {
    if (s.owed <= 0 || !this.isLive()) return;
    if (!(force || s.discard || s.owed >= this.threshold || s.unconsumed === 0)) return;
    const bytes = s.owed;
    s.owed = 0;
    this.socket!.send(encodeClientFrame({ type: "credit", stream: s.name, bytes }));
  }

  /** Records what a process object says: the exit, and each stream's final length. */
  private learn(info: ProcessInfo): void {
    if (info.status !== "exited") return;
    this.process = info;
    if (!this.exitKnown) {
      this.exitKnown = true;
      this.settleExit.resolve(info);
    }
    this.streams.stdout.total = info.stdout_bytes;
    this.streams.stderr.total = info.stderr_bytes;
    this.streams.stdout.wake();
    this.streams.stderr.wake();
  }

  /** True when the process has exited and both streams are complete: no reconnect needed. */
  private complete(): boolean {
    return this.exitKnown && this.streams.stdout.atEnd && this.streams.stderr.atEnd;
  }

  private async pollExit(): Promise<void> {
    try {
      const info = await this.client.wait(this.id, { signal: this.lifetime.signal });
      if (!this.isDone()) this.learn(info);
      // Lost connection, everything read, exit known: nothing left to resume.
      if (this.state === "reconnecting" && this.complete()) this.finishExited();
    } catch {
      // The socket still reports the exit; the poll only makes streams end sooner.
    }
  }

  // ---- input ----

  private checkWritable(): void {
    if (this.options.readonly) throw new InvalidArgumentError("this attachment is read-only");
    if (this.exitKnown) throw new ClosedError("the process has exited");
    if (this.isDone()) throw new ClosedError("the attachment has ended");
  }

  private async send(frame: ClientFrame, signal?: AbortSignal): Promise<void> {
    for (;;) {
      signal?.throwIfAborted();
      if (this.isDone()) throw new ClosedError("the attachment has ended");
      if (this.isLive()) {
        const buffered = (this.socket as unknown as { bufferedAmount?: number }).bufferedAmount ?? 0;
        if (buffered <= MAX_SOCKET_BUFFER) {
          this.socket!.send(encodeClientFrame(frame));
          return;
        }
        await sleep(5, signal); // the standard API has no drain event
        continue;
      }
      const size = frame.type === "stdin" ? frame.data.length : 16;
      if (this.outboxBytes + size <= MAX_QUEUED_INPUT || this.outbox.length === 0) {
        // Copy: the caller may reuse its buffer before the resume.
        this.outbox.push(frame.type === "stdin" ? { type: "stdin", data: frame.data.slice() } : frame);
        this.outboxBytes += size;
        return;
      }
      await new Promise<void>((resolve, reject) => {
        this.outboxWaiters.push(resolve);
        signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
      });
    }
  }

  // ---- ends ----

  private finishExited(): void {
    if (this.isDone()) return;
    this.state = "exited";
    for (const s of [this.streams.stdout, this.streams.stderr]) {
      s.finished = true;
      s.wake();
    }
    this.shutdown();
  }

  private fail(error: unknown, state: "closed"): void {
    if (this.isDone()) return;
    this.state = state;
    this.failure = error;
    for (const s of [this.streams.stdout, this.streams.stderr]) {
      if (!s.atEnd) s.failure = error instanceof Error ? error : new ClosedError(String(error));
      s.finished = true;
      s.wake();
    }
    if (!this.exitKnown) this.settleExit.reject(error);
    this.shutdown();
  }

  private shutdown(): void {
    this.stopIdleTimer();
    this.generation += 1;
    this.lifetime.abort(new ClosedError("the attachment has ended"));
    for (const w of this.outboxWaiters.splice(0)) w();
    this.outbox = [];
    const socket = this.socket;
    this.socket = undefined;
    closeQuietly(socket);
  }
}

/**
 * Closes a socket without waiting for anything. A connection taken as lost
 * (`hard`) is torn down at once where the library allows it (`ws`'s
 * `terminate`), rather than waiting out a close handshake nobody answers.
 */
function closeQuietly(socket: WebSocketLike | undefined, hard = false): void {
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
interface RefusedUpgrade {
  statusCode?: number;
  on(event: "data", f: (chunk: Uint8Array) => void): unknown;
  on(event: "end" | "error" | "close", f: () => void): unknown;
}

/** The body of a refused upgrade, at most {@link MAX_REFUSAL_BODY} bytes (the connect timeout bounds the wait). */
function readRefusal(response: RefusedUpgrade): Promise<string> {
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

/** Runs; see {@link TetherClient.run}. */
export async function run(client: TetherClient, request: SpawnRequest, options: AttachOptions): Promise<Attachment> {
  if (options.screen || options.readonly) throw new InvalidArgumentError("run starts a new process: screen and readonly do not apply");
  if ((options.offsets?.stdout ?? 0) !== 0 || (options.offsets?.stderr ?? 0) !== 0) {
    throw new InvalidArgumentError("run reads a new process from its first byte: offsets do not apply");
  }
  if (!takesHeaders(client.webSocket())) return client.start(request, options);
  const attachment = new Attachment(client, { request: JSON.stringify(request), key: randomKey() }, options);
  await attachment.start();
  return attachment;
}

/** Attaches; see {@link TetherClient.attach}. */
export async function attach(client: TetherClient, id: string, options: AttachOptions): Promise<Attachment> {
  const attachment = new Attachment(client, id, options);
  await attachment.start();
  return attachment;
}
