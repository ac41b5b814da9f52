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

import type { AttachHost, AttachOptions, AttachState, Rejection, RunTarget } from "./attach-options.js";
import { checkSize, randomKey, type CallOptions } from "./endpoint.js";
import { connect, type Watchdog } from "./connection.js";
import { ClosedError, InvalidArgumentError, ProtocolError, TetherError, TransportError } from "./errors.js";
import { Inbound } from "./inbound.js";
import { OutputStream, type StreamState, type StreamStats } from "./output.js";
import { Outbox } from "./outbox.js";
import { encodeClientFrame, type ProcessInfo, type ServerFrame, type SpawnRequest, type StreamName } from "./protocol.js";
import type { Backoff, RetryPolicy } from "./retry.js";
import { closeQuietly, OPEN, takesHeaders, type WebSocketLike } from "./websocket.js";

export type { AttachHost, AttachOptions, AttachState, Rejection } from "./attach-options.js";

/** Largest stdin payload per frame (the server accepts frames up to 1 MiB). */
const MAX_STDIN_FRAME = 64 * 1024;

/** Bytes a server message may hold beyond the credit window by default: a `hello` carries argv (up to the server's 1 MiB body), data frames at most one window. */
const MESSAGE_SLACK = 2 << 20;

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
 * - Input (`write`, `closeStdin`, `resize`, `signal`) reaches the process
 *   exactly once, in order, across reconnects (numbered input, the default):
 *   what is written while reconnecting waits and goes out after the resume,
 *   and a resume resends only what the server has not applied. At most
 *   1 MiB waits unacknowledged; past it a write waits. A resume after the
 *   server forgot the input stream (the connection was down longer than its
 *   `--input-ttl-ms`) ends the attachment with a `ProtocolError` whose code
 *   is `input_expired`. With `numberedInput: false`, input handed to a
 *   connection that then broke may be lost, never repeated.
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

  private readonly inbound: Inbound;
  private readonly policy: RetryPolicy;
  private readonly backoff: Backoff;
  private socket: WebSocketLike | undefined;
  private generation = 0;
  private settleExit!: { resolve(p: ProcessInfo): void; reject(e: unknown): void };
  private exitKnown = false;
  private readonly lifetime = new AbortController();
  private readonly outbox: Outbox;
  private skipPause: (() => void) | undefined;
  private openedAt = 0;
  private watchdog: Watchdog | undefined;
  private processId: string;
  /** Until the first `hello` of a {@link TetherClient.run}: what to spawn; the id is known from then on. */
  private pendingRun: RunTarget | undefined;

  /** @internal Use {@link TetherClient.attach} or {@link TetherClient.run}. */
  constructor(
    private readonly client: AttachHost,
    target: string | RunTarget,
    private readonly options: AttachOptions,
  ) {
    if (typeof target === "string") this.processId = target;
    else {
      this.processId = "";
      this.pendingRun = target;
    }
    this.inbound = new Inbound(options.window ?? 256 * 1024, options.offsets, (s) => this.grant(s, false));
    // Numbered input by default: a random id names this attachment's input stream.
    const numbered = options.numberedInput !== false && !options.readonly;
    this.outbox = new Outbox(
      { live: () => (this.isLive() ? this.socket : undefined), ended: () => this.isDone() },
      numbered ? randomKey() : undefined,
    );
    this.policy = { ...client.retry, ...options.reconnect };
    this.backoff = client.backoff(this.policy);
    this.stdout = new OutputStream(this.inbound.stdout);
    this.stderr = new OutputStream(this.inbound.stderr);
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
    return { stdout: this.inbound.stdout.next, stderr: this.inbound.stderr.next };
  }

  /** Input units (stdin bytes, one per other action) written but not yet acknowledged by the server: what a resume would resend (numbered input). */
  get pendingInput(): number {
    return this.outbox.unacknowledged;
  }

  /** Flow-control figures of both streams. */
  stats(): Record<StreamName, StreamStats> {
    return { stdout: this.inbound.stdout.stats(), stderr: this.inbound.stderr.stats() };
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
      await this.outbox.send({ type: "stdin", data: bytes.subarray(at, at + MAX_STDIN_FRAME) }, options.signal);
    }
  }

  /** Closes the process's stdin (on a PTY: types the terminal's EOF character, usually Ctrl-D). */
  async closeStdin(): Promise<void> {
    this.checkWritable();
    await this.outbox.send({ type: "stdin_eof" });
  }

  /** Sets the PTY window size (1..4096 each; ignored for pipes). While reconnecting, the last size is sent after the resume. */
  async resize(cols: number, rows: number): Promise<void> {
    this.checkWritable();
    checkSize(cols, rows);
    await this.outbox.resize(cols, rows);
  }

  /** Sends a signal by name (`"INT"`, `"TERM"`, `"HUP"`...) to the process group. */
  async signal(signal: string): Promise<void> {
    this.checkWritable();
    await this.outbox.send({ type: "signal", signal });
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
  private async connectOnce(): Promise<void> {
    const { stdout, stderr } = this.inbound;
    const connWindow = this.inbound.connectionWindow();
    const wanted = { stdout: stdout.next, stderr: stderr.next };
    // A run spawns on its first connection (retried with the same key);
    // every later one attaches to that process by id.
    const run = this.pendingRun;
    let url: string;
    if (run) {
      const query: Record<string, string | number> = { request: run.request, window: connWindow };
      if (this.outbox.inputId !== undefined) query.input = this.outbox.inputId;
      url = this.client.runUrl(query);
    } else {
      const query: Record<string, string | number> = { stdout: wanted.stdout, stderr: wanted.stderr, window: connWindow };
      if (this.options.readonly) query.readonly = 1;
      if (this.options.screen) query.screen = this.connections === 0 ? 1 : "evicted";
      if (this.outbox.inputId !== undefined) {
        query.input = this.outbox.inputId;
        if (this.outbox.started) query.input_resume = 1;
      }
      url = this.client.attachUrl(this.id, query);
    }
    const generation = ++this.generation;
    this.state = this.connections === 0 ? "connecting" : "reconnecting";
    await connect({
      impl: this.client.webSocket(),
      url,
      protocols: this.client.attachProtocols(),
      idempotencyKey: run?.key,
      // Cut to what is left of the budget.
      connectTimeoutMs: this.backoff.clip(this.options.connectTimeoutMs ?? 10_000),
      maxMessageBytes: this.options.maxMessageBytes ?? this.inbound.window + MESSAGE_SLACK,
      onUpgraded: () => this.client.noteContact(),
      wanted,
      screen: this.options.screen ?? false,
      numbered: this.outbox.inputId !== undefined,
      current: () => generation === this.generation,
      abandon: () => (this.generation += 1),
      getProcess: run ? undefined : () => this.client.getOnce(this.id, { signal: this.lifetime.signal }),
      idleTimeoutMs: this.options.idleTimeoutMs ?? 90_000,
      lastRejection: () => this.lastRejection,
      onHello: (socket, hello, watchdog, applied) => {
        this.watchdog = watchdog;
        // With `screen`, stdout starts where the screen frame says.
        if (this.options.screen) stdout.next = hello.stdout;
        if (this.pendingRun) {
          this.processId = hello.process.id;
          this.pendingRun = undefined;
        }
        this.opened(socket, hello.process, applied);
      },
      onFrame: (frame) => {
        try {
          this.frame(frame);
        } catch (e) {
          this.fail(e, "closed");
        }
      },
      onLost: (reason) => this.lost(reason),
      onEnded: (error) => this.fail(error, "closed"),
    });
  }

  /** A `hello` arrived on `socket`: it carries the attachment from now on. */
  private opened(socket: WebSocketLike, process: ProcessInfo, applied: number | undefined): void {
    const resumed = this.connections > 0;
    this.openedAt = Date.now();
    this.socket = socket;
    this.connections += 1;
    this.state = "open";
    this.process = process;
    this.learn(process);
    for (const s of this.inbound.both) this.grant(s, true);
    this.outbox.resume(socket, resumed, process.tty, applied);
    this.options.onOpen?.(process, resumed);
  }

  /** The live connection is gone: resume from the saved offsets. */
  private lost(reason: string): void {
    if (this.isDone()) return;
    const socket = this.socket;
    this.socket = undefined;
    this.generation += 1; // ignore the old socket's late frames and close
    this.watchdog?.stop();
    closeQuietly(socket, true);
    this.state = "reconnecting";
    // A connection that lived a while ends a run of failures: the next
    // outage gets a fresh budget (data frames reset it too).
    if (Date.now() - this.openedAt > 1000) this.backoff.reset();
    if (this.complete()) return this.finishExited();
    void this.resume(reason);
  }

  /** After a lost connection: waits its backoff (never reconnecting at once, so a server that closes every connection is not hammered), then connects again; the end of the budget ends the attachment. */
  private async resume(reason: string): Promise<void> {
    try {
      const skip = new Promise<void>((r) => (this.skipPause = r));
      const error = new TransportError(this.client.baseUrl, reason);
      await Promise.race([
        this.backoff.failed(error, this.lifetime.signal, (ms, attempt) => this.options.onReconnecting?.(ms, attempt, reason)),
        skip,
      ]);
    } catch (final) {
      this.fail(final, "closed");
      return;
    } finally {
      this.skipPause = undefined;
    }
    await this.connectLoop();
  }

  // ---- frames ----

  private frame(frame: ServerFrame): void {
    switch (frame.type) {
      case "screen":
        // Only with `screen`: one unasked for would replace queued output.
        if (!this.options.screen) throw new ProtocolError("a screen frame this client did not ask for");
        this.inbound.accept(frame);
        return;
      case "stdout":
      case "stderr":
      case "dropped":
        if (this.inbound.accept(frame)) this.backoff.reset();
        return;
      case "exit":
        this.process = frame.process;
        this.learn(frame.process);
        this.finishExited();
        return;
      case "input_ack":
        this.outbox.acknowledge(frame.applied);
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
    if (!this.isLive()) return;
    const bytes = this.inbound.takeCredit(s, force);
    if (bytes > 0) this.socket!.send(encodeClientFrame({ type: "credit", stream: s.name, bytes }));
  }

  /** Records what a process object says: the exit, and each stream's final length. */
  private learn(info: ProcessInfo): void {
    if (info.status !== "exited") return;
    this.process = info;
    if (!this.exitKnown) {
      this.exitKnown = true;
      this.settleExit.resolve(info);
    }
    this.inbound.learnTotals(info);
  }

  /** True when the process has exited and both streams are complete: no reconnect needed. */
  private complete(): boolean {
    return this.exitKnown && this.inbound.atEnd;
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

  // ---- ends ----

  private finishExited(): void {
    if (this.isDone()) return;
    this.state = "exited";
    this.inbound.finish();
    this.shutdown();
  }

  private fail(error: unknown, state: "closed"): void {
    if (this.isDone()) return;
    this.state = state;
    this.failure = error;
    this.inbound.fail(error);
    if (!this.exitKnown) this.settleExit.reject(error);
    this.shutdown();
  }

  private shutdown(): void {
    this.watchdog?.stop();
    this.generation += 1;
    this.lifetime.abort(new ClosedError("the attachment has ended"));
    this.outbox.end(); // the input goes nowhere; writers waiting for room see the end
    const socket = this.socket;
    this.socket = undefined;
    closeQuietly(socket);
  }
}

/** Runs; see {@link TetherClient.run}. */
export async function run(client: AttachHost, request: SpawnRequest, options: AttachOptions): Promise<Attachment> {
  if (options.screen || options.readonly) throw new InvalidArgumentError("run starts a new process: screen and readonly do not apply");
  if ((options.offsets?.stdout ?? 0) !== 0 || (options.offsets?.stderr ?? 0) !== 0) {
    throw new InvalidArgumentError("run reads a new process from its first byte: offsets do not apply");
  }
  // Without headers there is no key on the upgrade: spawn over HTTP (with
  // its key), then attach; the same guarantees in two round trips.
  if (!takesHeaders(client.webSocket())) {
    const process = await client.spawn(request, { signal: options.signal });
    return attach(client, process.id, options);
  }
  const attachment = new Attachment(client, { request: JSON.stringify(request), key: randomKey() }, options);
  await attachment.start();
  return attachment;
}

/** Attaches; see {@link TetherClient.attach}. */
export async function attach(client: AttachHost, id: string, options: AttachOptions): Promise<Attachment> {
  const attachment = new Attachment(client, id, options);
  await attachment.start();
  return attachment;
}
