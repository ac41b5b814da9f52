// A typed client of tetherd: the HTTP API (spawn, list, get) over fetch and
// WebSocket attachments that survive disconnects. Independent of the page;
// it only needs globals that browsers and node >= 22 have (fetch, WebSocket).

import {
  decodeServerFrame,
  encodeClientFrame,
  parseProcess,
  SUBPROTOCOL,
  type ClientFrame,
  type ProcessInfo,
  type SpawnRequest,
  type StreamName,
} from "./protocol.ts";

export * from "./protocol.ts";

/** An error answer of the HTTP API: `{"error": {"code", "message"}}`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "HttpError";
  }
}

export interface ConnectionOptions {
  /** Where tetherd is, e.g. `http://127.0.0.1:7777` or `location.origin`. */
  baseUrl: string;
  /** Bearer token, when the server requires one. */
  token?: string;
}

/** What an attachment tells its owner. Every callback is optional. */
export interface AttachHandlers {
  /**
   * Output bytes, in order, each byte exactly once across reconnects. Call
   * `done` once the bytes have been consumed (for a terminal: from the
   * write callback); that grants the server credit for more.
   */
  onData?(stream: StreamName, data: Uint8Array, done: () => void): void;
  /** Bytes `offset..offset+length` of `stream` were lost (evicted). */
  onDropped?(stream: StreamName, offset: number, length: number): void;
  /** A `hello` arrived: the attachment is live. `resumed` after a reconnect. */
  onOpen?(process: ProcessInfo, resumed: boolean): void;
  /** The socket is gone; another try follows in `delayMs`. */
  onReconnecting?(delayMs: number, attempt: number, reason: string): void;
  /** The server sent an `error` frame (it closes after a fatal one). */
  onError?(code: string, message: string): void;
  /** The process exited; all of its output has been delivered. */
  onExit?(process: ProcessInfo): void;
  /** The attachment ended for good without an exit (error, 404, 401, close()). */
  onClosed?(reason: string, error?: HttpError | Error): void;
}

export interface AttachOptions {
  /** Offsets to start from; 0 replays everything the server retains. */
  offsets?: { stdout: number; stderr: number };
  /** Credit window per stream in bytes; 0 turns flow control off. */
  window?: number;
  /** First and largest reconnect delay. */
  backoffMs?: { initial: number; max: number };
  /** Open read-only (`?readonly=1`): no stdin, no resize. */
  readonly?: boolean;
}

export type AttachState = "connecting" | "open" | "reconnecting" | "exited" | "closed";

/** The HTTP API of one tetherd, and a factory of attachments to it. */
export class TetherConnection {
  readonly baseUrl: string;
  token: string | undefined;

  constructor(options: ConnectionOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.token = options.token;
  }

  /** `POST /v1/processes`. */
  async spawn(request: SpawnRequest): Promise<ProcessInfo> {
    return parseProcess(await this.request("POST", "/v1/processes", request));
  }

  /** `GET /v1/processes`. */
  async list(): Promise<ProcessInfo[]> {
    const body = await this.request("GET", "/v1/processes");
    // Accept a bare array or an object wrapping one, whichever the server gives.
    const items = Array.isArray(body) ? body : (body as { processes?: unknown[] })?.processes;
    if (!Array.isArray(items)) throw new Error("GET /v1/processes: expected an array of processes");
    return items.map((p) => parseProcess(p));
  }

  /** `GET /v1/processes/{id}`. */
  async get(id: string): Promise<ProcessInfo> {
    return parseProcess(await this.request("GET", `/v1/processes/${encodeURIComponent(id)}`));
  }

  /** `POST /v1/processes/{id}/signal`. */
  async signal(id: string, signal: string): Promise<void> {
    await this.request("POST", `/v1/processes/${encodeURIComponent(id)}/signal`, { signal });
  }

  /** The WebSocket URL of an attachment, with its query. */
  attachUrl(id: string, query: Record<string, string | number>): string {
    const url = new URL(`${this.baseUrl}/v1/processes/${encodeURIComponent(id)}/attach`);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, String(v));
    // Browsers cannot set headers on a WebSocket, so the token rides in the query.
    if (this.token) url.searchParams.set("access_token", this.token);
    return url.toString();
  }

  /** Attaches to a process; see {@link Attachment}. */
  attach(id: string, handlers: AttachHandlers, options: AttachOptions = {}): Attachment {
    return new Attachment(this, id, handlers, options);
  }

  private async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const response = await fetch(this.baseUrl + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let json: unknown = undefined;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      // Not JSON: reported below with the status.
    }
    if (!response.ok) {
      const error = (json as { error?: { code?: string; message?: string } } | undefined)?.error;
      throw new HttpError(
        response.status,
        error?.code ?? (response.status === 401 ? "unauthorized" : `http_${response.status}`),
        error?.message ?? `${method} ${path}: ${response.status} ${response.statusText} ${text.slice(0, 200)}`,
      );
    }
    return json;
  }
}

/**
 * One attachment to one process. It keeps the next offset of each stream,
 * and when the socket drops it reconnects with backoff from those offsets,
 * so its owner sees every byte once, in order, with explicit `dropped`
 * notices for anything the server evicted in between.
 */
export class Attachment {
  /** Next offset expected on each stream: what to resume from. */
  readonly offsets: { stdout: number; stderr: number };
  state: AttachState = "connecting";
  /** The process as last reported (hello or exit). */
  process: ProcessInfo | undefined;
  /**
   * Flow-control bookkeeping of the current socket, per stream: bytes
   * received, bytes granted back, and the most ever outstanding (received
   * but not granted), which a server honouring `window` keeps <= window.
   */
  readonly flow = {
    stdout: { received: 0, granted: 0, maxOutstanding: 0 },
    stderr: { received: 0, granted: 0, maxOutstanding: 0 },
  };

  private socket: WebSocket | undefined;
  private readonly window: number;
  private readonly backoff: { initial: number; max: number };
  private attempt = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  // Increments per socket: `done` callbacks of a previous socket must not
  // grant credit on the next one, whose window starts afresh.
  private generation = 0;
  private pendingCredit = { stdout: 0, stderr: 0 };
  private everOpened = false;
  // Input typed while disconnected, sent once the next socket is open.
  private queued: ClientFrame[] = [];
  private queuedBytes = 0;

  constructor(
    private readonly conn: TetherConnection,
    readonly id: string,
    private readonly handlers: AttachHandlers,
    private readonly options: AttachOptions,
  ) {
    this.offsets = { stdout: options.offsets?.stdout ?? 0, stderr: options.offsets?.stderr ?? 0 };
    this.window = options.window ?? 256 * 1024;
    this.backoff = options.backoffMs ?? { initial: 250, max: 5000 };
    this.connect();
  }

  /** Sends bytes to the process's stdin (queued while reconnecting). */
  sendStdin(data: Uint8Array): void {
    if (data.length > 0) this.send({ type: "stdin", data }, true);
  }

  /** Sets the PTY size. Not queued: the owner sends it again on open. */
  resize(cols: number, rows: number): void {
    this.send({ type: "resize", cols, rows }, false);
  }

  /** Sends a signal by name, e.g. `INT`. */
  signal(signal: string): void {
    this.send({ type: "signal", signal }, true);
  }

  /**
   * Drops the current socket and attaches again from the saved offsets, as
   * after a network failure (for a page that knows the network changed).
   */
  reconnect(): void {
    if (this.state === "reconnecting" && this.timer) {
      // Waiting out a backoff: try now instead.
      clearTimeout(this.timer);
      this.timer = undefined;
      this.connect();
      return;
    }
    if (this.state !== "open" && this.state !== "connecting") return;
    this.generation += 1; // ignore the old socket's late frames and close
    this.socket?.close(1000);
    void this.scheduleReconnect(true, "reconnect requested");
  }

  /** Detaches for good (the process keeps running). */
  close(): void {
    this.finish("closed", "closed by the client");
  }

  private send(frame: ClientFrame, queueIfClosed: boolean): void {
    if (this.socket && this.socket.readyState === WebSocket.OPEN && this.state === "open") {
      this.socket.send(encodeClientFrame(frame));
    } else if (queueIfClosed && (this.state === "connecting" || this.state === "reconnecting")) {
      // Bounded, so a long outage cannot grow memory with keystrokes.
      const size = frame.type === "stdin" ? frame.data.length : 16;
      if (this.queuedBytes + size <= 64 * 1024) {
        this.queued.push(frame);
        this.queuedBytes += size;
      }
    }
  }

  private connect(): void {
    const generation = ++this.generation;
    this.pendingCredit = { stdout: 0, stderr: 0 };
    for (const f of [this.flow.stdout, this.flow.stderr]) f.received = f.granted = 0;
    const query: Record<string, string | number> = { stdout: this.offsets.stdout, stderr: this.offsets.stderr };
    if (this.window > 0) query.window = this.window;
    if (this.options.readonly) query.readonly = 1;
    const socket = new WebSocket(this.conn.attachUrl(this.id, query), [SUBPROTOCOL]);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    let opened = false;
    let closeReason = "connection lost";
    let lastError: { code: string; message: string } | undefined;

    socket.onmessage = (event) => {
      if (generation !== this.generation) return;
      if (!(event.data instanceof ArrayBuffer)) {
        closeReason = "protocol error: text message from server";
        socket.close(1003);
        return;
      }
      let frame;
      try {
        frame = decodeServerFrame(event.data);
      } catch (e) {
        closeReason = `protocol error: ${(e as Error).message}`;
        socket.close(1007);
        return;
      }
      switch (frame.type) {
        case "hello": {
          opened = true;
          this.process = frame.process;
          this.state = "open";
          this.attempt = 0;
          const resumed = this.everOpened;
          this.everOpened = true;
          // The server starts at the offsets we asked for, or at a later
          // one with a `dropped` frame first; never earlier.
          this.handlers.onOpen?.(frame.process, resumed);
          for (const queued of this.queued.splice(0)) socket.send(encodeClientFrame(queued));
          this.queuedBytes = 0;
          break;
        }
        case "stdout":
        case "stderr":
          this.onData(generation, frame.type, frame.offset, frame.data);
          break;
        case "dropped": {
          const end = frame.offset + frame.length;
          const next = this.offsets[frame.stream];
          if (end > next) {
            this.offsets[frame.stream] = end;
            const from = Math.max(frame.offset, next);
            this.handlers.onDropped?.(frame.stream, from, end - from);
          }
          break;
        }
        case "exit":
          this.process = frame.process;
          this.finish("exited", "process exited");
          this.handlers.onExit?.(frame.process);
          break;
        case "error":
          // Some errors (a bad resize, stdin on a read-only attachment)
          // leave the attachment open; a fatal one is followed by a close,
          // and then retrying the same request would get the same answer.
          lastError = frame;
          this.handlers.onError?.(frame.code, frame.message);
          break;
      }
    };

    socket.onclose = (event) => {
      if (generation !== this.generation) return;
      if (this.state === "exited" || this.state === "closed") return;
      if (lastError) {
        const { code, message } = lastError;
        this.finish("closed", `server error ${code}: ${message}`, new Error(`${code}: ${message}`));
        return;
      }
      if (!opened) closeReason = `could not attach (close code ${event.code})`;
      void this.scheduleReconnect(opened, closeReason);
    };
  }

  private onData(generation: number, stream: StreamName, offset: number, data: Uint8Array): void {
    const length = data.length;
    const flow = this.flow[stream];
    flow.received += length;
    flow.maxOutstanding = Math.max(flow.maxOutstanding, flow.received - flow.granted);
    const done = () => this.grant(generation, stream, length);
    const next = this.offsets[stream];
    const end = offset + length;
    if (offset > next) {
      // A gap without a `dropped` frame should not happen; say so rather
      // than pretend the stream is whole.
      this.handlers.onDropped?.(stream, next, offset - next);
    }
    if (end <= next) {
      // Already seen (defensive: only a misbehaving server repeats bytes).
      // The server still counted it against the window, so grant it back.
      if (length > 0) done();
      return;
    }
    const fresh = offset < next ? data.subarray(next - offset) : data;
    this.offsets[stream] = end;
    if (this.handlers.onData) this.handlers.onData(stream, fresh, done);
    else done();
  }

  // Credit goes back in batches of a quarter window: one credit frame per
  // write would double the frame count, and the server keeps at least three
  // quarters of the window to send meanwhile, so output never stalls on it.
  private grant(generation: number, stream: StreamName, bytes: number): void {
    if (this.window <= 0 || generation !== this.generation || this.state !== "open") return;
    this.pendingCredit[stream] += bytes;
    if (this.pendingCredit[stream] >= Math.max(1, this.window / 4)) {
      const amount = this.pendingCredit[stream];
      this.pendingCredit[stream] = 0;
      this.flow[stream].granted += amount;
      this.socket?.send(encodeClientFrame({ type: "credit", stream, bytes: amount }));
    }
  }

  private async scheduleReconnect(opened: boolean, reason: string): Promise<void> {
    this.state = "reconnecting";
    this.socket = undefined;
    if (!opened) {
      // The upgrade itself failed. Ask over HTTP why, so that a process that
      // is gone or a missing token ends the attachment instead of looping.
      try {
        const process = await this.conn.get(this.id);
        if (process.status === "exited" && this.attempt >= 2) {
          // Exited and not attachable any more: the exit is still known.
          this.process = process;
          this.finish("exited", "process exited");
          this.handlers.onExit?.(process);
          return;
        }
      } catch (e) {
        if (e instanceof HttpError && (e.status === 404 || e.status === 401 || e.status === 403)) {
          this.finish("closed", e.message, e);
          return;
        }
        // Network error: the server is away; keep trying.
      }
      if (this.state !== "reconnecting") return; // close() was called meanwhile
    }
    const delay = Math.min(this.backoff.max, this.backoff.initial * 2 ** this.attempt);
    // Jitter spreads the retries of many tabs after a server restart.
    const jittered = Math.round(delay * (0.75 + Math.random() * 0.5));
    this.attempt += 1;
    this.handlers.onReconnecting?.(jittered, this.attempt, reason);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.state === "reconnecting") this.connect();
    }, jittered);
  }

  private finish(state: "exited" | "closed", reason: string, error?: Error): void {
    if (this.state === "exited" || this.state === "closed") return;
    this.state = state;
    if (this.timer) clearTimeout(this.timer);
    this.queued = [];
    const socket = this.socket;
    this.socket = undefined;
    this.generation += 1;
    // After `exit` the server closes with 1000; answering its Close is
    // what the browser does by itself. Otherwise we close our side.
    if (state === "closed" && socket && socket.readyState <= WebSocket.OPEN) socket.close(1000);
    if (state === "closed") this.handlers.onClosed?.(reason, error);
  }
}
