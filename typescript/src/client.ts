// TetherClient: the HTTP API of one tetherd over fetch, with retries where
// they are safe, and the entry points of attachments (attach.ts) and exec
// (exec.ts). Works unchanged in browsers and Node: fetch is global in both.
// Imports run one way: attach.ts and exec.ts never import this file; they
// take an interface of what they need (AttachHost, ExecHost), which
// TetherClient satisfies, and share helpers with it through endpoint.ts.

import { attach, run, type AttachOptions, type Attachment } from "./attach.js";
import { baseUrlOf, checkSize, isLocalUrl, randomKey, segment, subprotocols, webSocketUrl, type CallOptions } from "./endpoint.js";
import { HttpError, httpErrorOf, InvalidArgumentError, isAbort, ProtocolError, TransportError, type TetherError } from "./errors.js";
import { exec, type ExecOptions, type ExecResult } from "./exec.js";
import { download, downloadStream, upload, type DownloadOptions, type UploadData, type UploadOptions } from "./files.js";
import { parseProcess, type ProcessInfo, type SpawnRequest } from "./protocol.js";
import { Backoff, DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import { answerTooLong, defaultTransport, type HttpTransport } from "./transport.js";
import { resolveWebSocket, type WebSocketConstructor } from "./websocket.js";

/** How to reach a tetherd. Only `baseUrl` is required. */
export interface ClientOptions {
  /** Where tetherd is, such as `http://127.0.0.1:7420` or, in a page it serves, `location.origin` (no user, password, query or fragment). */
  baseUrl: string;
  /** Bearer token, when the server requires one. */
  token?: string;
  /** Retries of the calls that are safe to retry (spawn, get, list, wait). Default {@link DEFAULT_RETRY}. */
  retry?: Partial<RetryPolicy>;
  /** Timeout of each ordinary request in ms (default 30 000). Long-polls get this on top of their own time. */
  requestTimeoutMs?: number;
  /** The largest HTTP answer body read, in bytes (default {@link DEFAULT_MAX_ANSWER_BYTES}, 64 MiB): a longer answer is a {@link ProtocolError}, read no further and not retried. */
  maxAnswerBytes?: number;
  /** How long each `wait` long-poll asks the server to hold, in ms (default 25 000; the server caps it). */
  longPollMs?: number;
  /** The WebSocket implementation; default: the global one, or `ws` under Node 20. */
  WebSocket?: WebSocketConstructor;
}

export type { CallOptions } from "./endpoint.js";

/** Options of {@link TetherClient.wait}. */
export interface WaitOptions extends CallOptions {
  /** Return the process object, still `running`, once about this many ms have passed without an exit. Default: wait for ever. */
  timeoutMs?: number;
}

interface RequestSpec {
  method: string;
  path: string;
  json?: unknown;
  bytes?: Uint8Array;
  idempotencyKey?: string;
  /** The whole request's bound (default: the client's request timeout); Infinity: bounded by `idleTimeoutMs` instead. */
  timeoutMs?: number;
  idleTimeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * The largest HTTP answer body read by default (64 MiB, as the Rust
 * client's `DEFAULT_MAX_ANSWER_BYTES`): tetherd's largest answers are far
 * below (a page of the process list stops past 4 MiB; an exec answer holds
 * a few times `--max-exec-output-bytes`).
 */
export const DEFAULT_MAX_ANSWER_BYTES = 64 << 20;

/**
 * Added to the request timeout for the silence an `exec` answer without a
 * deadline may keep, in ms: the server sends a space every ping interval
 * (20 s) while the command runs.
 */
export const EXEC_SILENCE_GRACE_MS = 60_000;

/** A scoped token minted by {@link TetherClient.mintToken}. */
export interface MintedToken {
  /** The bearer token. */
  token: string;
  /** Its id, as the server's audit lines name it. */
  token_id: string;
  /** The process it reaches. */
  process: string;
  rights: string[];
  /** Expiry, ms since the epoch. */
  expires_at_ms: number;
}

let localTokenLookup: ((baseUrl: string) => string | undefined) | undefined;

/**
 * Sets how a client finds the token of the server on this machine at
 * `baseUrl` (the Node entry reads that server's runtime entry). It is asked
 * only for a loopback or `localhost` URL, given as the client holds it.
 */
export function setLocalTokenLookup(lookup: ((baseUrl: string) => string | undefined) | undefined): void {
  localTokenLookup = lookup;
}

/**
 * A connection to one tetherd: the HTTP API, and a factory of attachments.
 *
 * ```ts
 * const client = new TetherClient({ baseUrl: "http://127.0.0.1:7420" });
 * const out = await client.exec("echo hi; exit 3");
 * console.log(out.exitCode, out.stdoutText); // 3 "hi\n"
 * ```
 */
export class TetherClient {
  /** The base URL, without a trailing slash. */
  readonly baseUrl: string;
  /** The bearer token sent with every request (may be changed, e.g. after asking the user). */
  token: string | undefined;
  /** The retry policy of spawn, get, list and wait. */
  readonly retry: RetryPolicy;
  /** Timeout of each ordinary request, in ms. */
  readonly requestTimeoutMs: number;
  /** Time each `wait` long-poll asks for, in ms. */
  readonly longPollMs: number;
  /** The largest HTTP answer body read, in bytes. */
  readonly maxAnswerBytes: number;
  /** True once the server has answered this client (an HTTP answer, a WebSocket upgrade): a refused connection is then worth its whole retry budget. */
  contacted = false;
  private readonly webSocketImpl: WebSocketConstructor | undefined;
  /** How requests are sent: fetch, or node:http under the Node entry. */
  readonly transport: HttpTransport;

  /**
   * A client for the server at `options.baseUrl` (or that URL itself).
   * Nothing is sent until the first call. Throws
   * {@link InvalidArgumentError} for a URL that is not `http://` or
   * `https://`, or that holds a user or password, a query or a fragment.
   */
  constructor(options: ClientOptions | string) {
    const o = typeof options === "string" ? { baseUrl: options } : options;
    // As the requests' own parser reads it: no user, password, query or fragment.
    const base = baseUrlOf(o.baseUrl);
    this.baseUrl = base;
    // A server on this machine that generated its token wrote it in its
    // runtime entry (Node only: see node.ts), used for exactly the origin it
    // names; never for any other host.
    this.token = o.token ?? (isLocalUrl(base) ? localTokenLookup?.(base) : undefined);
    this.retry = { ...DEFAULT_RETRY, ...o.retry };
    this.requestTimeoutMs = o.requestTimeoutMs ?? 30_000;
    this.longPollMs = o.longPollMs ?? 25_000;
    this.maxAnswerBytes = o.maxAnswerBytes ?? DEFAULT_MAX_ANSWER_BYTES;
    if (!(this.maxAnswerBytes > 0)) throw new InvalidArgumentError(`maxAnswerBytes must be positive, not ${o.maxAnswerBytes}`);
    if (!(this.requestTimeoutMs > 0)) throw new InvalidArgumentError(`requestTimeoutMs must be positive, not ${o.requestTimeoutMs}`);
    this.webSocketImpl = o.WebSocket;
    this.transport = defaultTransport();
  }

  /**
   * Starts a process (`POST /v1/processes`). The request carries a random
   * `Idempotency-Key` and transient failures are retried with the same key,
   * so the command starts at most once however often it is retried.
   */
  async spawn(request: SpawnRequest, options: CallOptions = {}): Promise<ProcessInfo> {
    const { signal } = options;
    const idempotencyKey = randomKey();
    const body = await this.retried(
      (timeoutMs) => this.requestJson({ method: "POST", path: "/v1/processes", json: request, idempotencyKey, timeoutMs, signal }),
      signal,
    );
    return parseProcess(body);
  }

  /** `GET /v1/processes/{id}` (retried when transient). 404 `not_found` for an unknown id. */
  async get(id: string, options: CallOptions = {}): Promise<ProcessInfo> {
    const { signal } = options;
    const body = await this.retried((timeoutMs) => this.requestJson({ method: "GET", path: `/v1/processes/${segment(id)}`, timeoutMs, signal }), signal);
    return parseProcess(body);
  }

  /** `GET /v1/processes/{id}` once, without retries: for a caller that retries by itself. */
  async getOnce(id: string, options: CallOptions = {}): Promise<ProcessInfo> {
    return parseProcess(await this.requestJson({ method: "GET", path: `/v1/processes/${segment(id)}`, signal: options.signal }));
  }

  /** `GET /v1/processes`: every process the server knows (retried when transient). */
  async list(options: CallOptions = {}): Promise<ProcessInfo[]> {
    const { signal } = options;
    const body = await this.retried((timeoutMs) => this.requestJson({ method: "GET", path: "/v1/processes", timeoutMs, signal }), signal);
    if (!Array.isArray(body)) throw new ProtocolError("GET /v1/processes: expected an array of processes");
    return body.map((p) => parseProcess(p));
  }

  /**
   * Waits until the process has exited and returns its final object.
   *
   * Long-polls `GET .../wait` again whenever a poll expires, and retries
   * transient failures (connection refused or reset, timeouts, 429, 502,
   * 503, 504) within the retry budget, which starts afresh after every
   * answer. Fails at once on other errors (404 for an unknown process), and
   * never reports a failure as the process's exit. With `timeoutMs`, returns
   * the process object (`status: "running"`) once that time has passed.
   */
  async wait(id: string, options: WaitOptions = {}): Promise<ProcessInfo> {
    const { signal } = options;
    const deadline = options.timeoutMs === undefined ? Infinity : Date.now() + options.timeoutMs;
    const backoff = this.backoff(this.retry);
    for (;;) {
      let poll = Math.max(0, Math.min(this.longPollMs, deadline - Date.now()));
      // Cut to what is left of the budget, the poll shortened to fit.
      const bound = backoff.clip(poll + this.requestTimeoutMs);
      poll = Math.max(0, Math.min(poll, bound - Math.min(this.requestTimeoutMs, bound)));
      try {
        const body = await this.requestJson({
          method: "GET",
          path: `/v1/processes/${segment(id)}/wait?timeout_ms=${Math.round(poll)}`,
          timeoutMs: bound,
          signal,
        });
        const info = parseProcess(body);
        if (info.status === "exited" || Date.now() >= deadline) return info;
        backoff.reset();
      } catch (e) {
        if (isAbort(e, signal) || !(e instanceof Error)) throw e;
        await backoff.failed(e as TetherError, signal);
      }
    }
  }

  /** Sends a signal (`"TERM"`, `"INT"`, `"KILL"`...) to the process group. Not retried: a signal must not be sent twice. */
  async signal(id: string, signal: string, options: CallOptions = {}): Promise<ProcessInfo> {
    return parseProcess(await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/signal`, json: { signal }, signal: options.signal }));
  }

  /**
   * `POST /v1/processes/{id}/kill`: kills the whole session if it runs
   * (reason `killed`) and answers with the final process object once it has
   * exited. The process stays known (output, exit, `wait`) until the
   * server's exited TTL or `remove`. Not retried.
   */
  async kill(id: string, options: CallOptions = {}): Promise<ProcessInfo> {
    return parseProcess(await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/kill`, signal: options.signal }));
  }

  /**
   * `DELETE /v1/processes/{id}`: forgets an exited process. A running one is
   * refused (409 `still_running`) unless `force`, which kills it first. Not
   * retried.
   */
  async remove(id: string, options: CallOptions & { force?: boolean } = {}): Promise<ProcessInfo> {
    const query = options.force ? "?force=1" : "";
    return parseProcess(await this.requestJson({ method: "DELETE", path: `/v1/processes/${segment(id)}${query}`, signal: options.signal }));
  }

  /**
   * `PATCH /v1/processes/{id}`: sets a running process's unattached
   * timeout in ms (0 or `null`: never), counted from now while nobody is
   * attached; needs the `kill` right. 409 `not_running` once it has exited.
   * Not retried.
   */
  async setUnattachedTimeout(id: string, timeoutMs: number | null, options: CallOptions = {}): Promise<ProcessInfo> {
    const ms = timeoutMs ?? 0;
    if (!Number.isSafeInteger(ms) || ms < 0) throw new InvalidArgumentError(`unattached timeout must be a whole number of ms, 0 or more, not ${timeoutMs}`);
    return parseProcess(
      await this.requestJson({ method: "PATCH", path: `/v1/processes/${segment(id)}`, json: { unattached_timeout_ms: ms }, signal: options.signal }),
    );
  }

  /**
   * `POST /v1/processes/{id}/tokens`: mints a token scoped to this one
   * process with `rights` (any of "read", "write", "kill"; read is
   * implied), valid for `ttlMs` (operator only). Not retried.
   */
  async mintToken(id: string, rights: string[], ttlMs: number, options: CallOptions = {}): Promise<MintedToken> {
    const body = (await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/tokens`, json: { rights, ttl_ms: ttlMs }, signal: options.signal })) as MintedToken;
    return body;
  }

  /** Writes bytes (a string is sent as UTF-8) to the stdin of a process spawned with `stdin: true`. Not retried. */
  async writeStdin(id: string, data: Uint8Array | string, options: CallOptions = {}): Promise<void> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/stdin`, bytes, signal: options.signal });
  }

  /** Closes the process's stdin. Not retried. */
  async closeStdin(id: string, options: CallOptions = {}): Promise<void> {
    await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/stdin/close`, signal: options.signal });
  }

  /** Sets a PTY's window size (1..4096 each; the program gets SIGWINCH). Not retried. */
  async resize(id: string, cols: number, rows: number, options: CallOptions = {}): Promise<void> {
    checkSize(cols, rows);
    await this.requestJson({ method: "POST", path: `/v1/processes/${segment(id)}/resize`, json: { cols, rows }, signal: options.signal });
  }

  /**
   * `POST /v1/exec` of a ready body (a spawn request plus
   * `max_output_bytes`, `input`...): the answer's JSON once the command
   * has exited. `timeoutMs` bounds the request (default: as long as the
   * command runs, but the answer may not stay silent longer than the
   * request timeout plus {@link EXEC_SILENCE_GRACE_MS}: the server sends a
   * space every ping interval meanwhile). Retried only where the command
   * cannot have started: no connection could be made, or the server
   * refused it for want of room (503 `too_many_processes`,
   * `retention_exhausted`). Aborting closes the connection, and the server
   * then kills the command (`kill_on_disconnect`, its default).
   */
  async execRequest(body: Record<string, unknown>, options: CallOptions & { timeoutMs?: number } = {}): Promise<unknown> {
    const { signal } = options;
    const backoff = this.backoff(this.retry);
    for (;;) {
      try {
        return await this.requestJson({
          method: "POST",
          path: "/v1/exec",
          json: body,
          timeoutMs: options.timeoutMs ?? Infinity,
          idleTimeoutMs: this.requestTimeoutMs + EXEC_SILENCE_GRACE_MS,
          signal,
        });
      } catch (e) {
        if (isAbort(e, signal) || !(e instanceof Error)) throw e;
        const unsent = e instanceof TransportError ? !e.timeout && connectFailed(e) : false;
        const refused = e instanceof HttpError && (e.code === "too_many_processes" || e.code === "retention_exhausted");
        if (!unsent && !refused) throw e;
        await backoff.failed(e as TetherError, signal);
      }
    }
  }

  /**
   * `GET /v1/processes/{id}/output`: the retained bytes of one stream from
   * `offset` on, as they are now (ranges already evicted are skipped).
   * `timeoutMs` bounds the whole request (default: the request timeout);
   * the answer is at most `maxAnswerBytes`.
   */
  async readOutput(id: string, stream: "stdout" | "stderr" = "stdout", offset = 0, options: CallOptions & { timeoutMs?: number } = {}): Promise<Uint8Array> {
    if (!Number.isSafeInteger(offset) || offset < 0) throw new InvalidArgumentError(`offset must be 0 or more, not ${offset}`);
    const path = `/v1/processes/${segment(id)}/output?stream=${stream}&offset=${offset}`;
    return this.request({ method: "GET", path, timeoutMs: options.timeoutMs ?? this.requestTimeoutMs, signal: options.signal });
  }

  /**
   * Attaches to a process over WebSocket (`tether.v1`) and resolves once the
   * server's `hello` has arrived. See {@link Attachment}: per-stream readers
   * with credit, stdin, resize, signal, automatic resume.
   */
  attach(id: string, options: AttachOptions = {}): Promise<Attachment> {
    return attach(this, id, options);
  }

  /**
   * Spawns a process and attaches to it from offset 0, so nothing it writes
   * is missed: the way to stream a command's output or drive a PTY.
   */
  async start(request: SpawnRequest, options: AttachOptions = {}): Promise<Attachment> {
    const process = await this.spawn(request, { signal: options.signal });
    return this.attach(process.id, options);
  }

  /**
   * Starts a process and attaches to it in one WebSocket (`GET /v1/run`):
   * one round trip where {@link start} takes two. Output is read from the
   * first byte; `attachment.process` (and `id`) is the new process, and
   * reconnects attach to it by its id, never running the command again.
   * The first connection carries a random `Idempotency-Key`, so a retry
   * after a lost answer attaches to the process that answer started
   * instead of starting a second one. A refused spawn rejects with the
   * server's {@link HttpError} (`spawn_failed`, `cannot_execute`,
   * `name_taken`, `invalid_request`...). `screen`, `readonly` and
   * `offsets` do not apply (a new process has no screen or earlier bytes,
   * and a read-only run could not type): they reject with
   * {@link InvalidArgumentError}.
   *
   * A WebSocket that cannot send headers (a browser's, Node 22's global
   * one) cannot carry the key, so there `run` is {@link start}: spawn with
   * the key over HTTP, then attach; the same guarantees in two round trips.
   */
  run(request: SpawnRequest, options: AttachOptions = {}): Promise<Attachment> {
    return run(this, request, options);
  }

  /**
   * Runs a command to completion and returns its output, exit code and
   * reason. A string is a shell command line, an array an argv; see
   * {@link ExecOptions} for a deadline, stdin, streaming callbacks and abort.
   *
   * One request (`POST /v1/exec`) runs it and brings the first MiB of each
   * stream; a longer stream's rest is read back from the server's retention
   * (64 MiB per stream by default), and a stream longer than both loses its
   * middle, counted in `dropped`. Aborting kills the command. With
   * `onStdout`/`onStderr`, `retainBytes`, a `stdin` over 512 KiB encoded
   * (or refused by the server's `--max-body-bytes`), or (under fetch, which gives up on
   * an answer after 300 s: browsers) no deadline or one of minutes, it
   * spawns and attaches instead, in block mode: the server keeps every byte
   * until this client has read it, pacing the program.
   */
  exec(command: string | string[] | SpawnRequest, options: ExecOptions = {}): Promise<ExecResult> {
    return exec(this, command, options);
  }

  /**
   * Writes `data` to `path` as process `processRef` (an id or a name) sees
   * it, as that process's user; resolves with the bytes written.
   *
   * Runs `/bin/sh -c 'cat > "$1"'` beside the process (spawn request
   * `beside`: its user, group and current working directory, so a relative
   * path resolves where the process has `cd`'d), streams `data` to its
   * stdin with the attachment's numbered input (at most 1 MiB
   * unacknowledged), closes it and checks the exit. The file is created or
   * truncated; its directory must exist. `data` is bytes, a string (UTF-8),
   * a `Blob`, a `ReadableStream` or an (async) iterable of chunks (Node:
   * `fs.createReadStream(path)`). Needs the operator's token. Rejects with
   * a {@link FileTransferError} carrying the shell's stderr when the file
   * cannot be written (a missing directory, `Permission denied`), an
   * {@link HttpError} 404 for an unknown process, 403 for a scoped token.
   */
  upload(processRef: string, path: string, data: UploadData, options: UploadOptions = {}): Promise<number> {
    return upload(this, processRef, path, data, options);
  }

  /**
   * The content of `path` as process `processRef` (an id or a name) sees
   * it, read as that process's user by `cat` run beside it. At most
   * `maxBytes` (default {@link DEFAULT_MAX_DOWNLOAD}, 64 MiB) is read into
   * memory: a longer file rejects with {@link FileTooLargeError}, never a
   * cut-short result ({@link downloadStream} streams any size). Rejects
   * with a {@link FileTransferError} carrying `cat`'s stderr when the file
   * cannot be read (`No such file or directory`, `Is a directory`).
   */
  download(processRef: string, path: string, options: DownloadOptions = {}): Promise<Uint8Array> {
    return download(this, processRef, path, options);
  }

  /**
   * {@link download} as an async iterable of chunks, with bounded memory:
   * at most the credit window (`window`, 256 KiB) is held here, and a slow
   * loop paces the remote `cat`. The iteration throws a
   * {@link FileTransferError} at its end if `cat` failed (or
   * {@link FileTooLargeError} past `maxBytes`, default none); leaving the
   * loop early kills the remote `cat`.
   *
   * ```ts
   * for await (const chunk of client.downloadStream(id, "big.log")) out.write(chunk);
   * ```
   */
  downloadStream(processRef: string, path: string, options: DownloadOptions = {}): AsyncGenerator<Uint8Array, number, undefined> {
    return downloadStream(this, processRef, path, options);
  }

  /**
   * The WebSocket URL of an attachment with its query. Browsers cannot set
   * headers on a WebSocket: the token rides as a `tether.bearer.TOKEN`
   * subprotocol (see {@link attachProtocols}), or in the query when it has
   * characters a subprotocol cannot carry.
   */
  attachUrl(id: string, query: Record<string, string | number>): string {
    return webSocketUrl(this.baseUrl, this.token, `/v1/processes/${segment(id)}/attach`, query);
  }

  /** The WebSocket URL of `GET /v1/run` with its query (`request`, the spawn request as JSON, and `window`); the token as in {@link attachUrl}. */
  runUrl(query: Record<string, string | number>): string {
    return webSocketUrl(this.baseUrl, this.token, "/v1/run", query);
  }

  /** The subprotocols an attachment offers: `tether.v1`, and the token when it can ride there. */
  attachProtocols(): string[] {
    return subprotocols(this.token);
  }

  /** The WebSocket implementation of this client; throws a clear error when there is none. */
  webSocket(): WebSocketConstructor {
    const impl = resolveWebSocket(this.webSocketImpl);
    if (!impl) {
      throw new InvalidArgumentError(
        "no WebSocket implementation: this runtime has no global WebSocket; import the package from Node (which uses `ws`) or pass `WebSocket` in the client options",
      );
    }
    return impl;
  }

  /** A backoff of `policy` that knows whether this server has answered yet (a refused first contact is retried only briefly). */
  backoff(policy: RetryPolicy): Backoff {
    return new Backoff(policy, () => this.contacted);
  }

  /** Records that the server answered (an attachment's upgrade counts). */
  noteContact(): void {
    this.contacted = true;
  }

  /** `call` with a timeout per attempt, retried within the budget: a retry is given only what is left of it. */
  private async retried<T>(call: (timeoutMs: number) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const backoff = this.backoff(this.retry);
    for (;;) {
      try {
        return await call(backoff.clip(this.requestTimeoutMs));
      } catch (e) {
        if (isAbort(e, signal) || !(e instanceof Error)) throw e;
        await backoff.failed(e as TetherError, signal);
      }
    }
  }

  /** One request; a success status gives the parsed JSON body (undefined when empty), anything else an error. */
  private async requestJson(spec: RequestSpec): Promise<unknown> {
    const raw = await this.request(spec);
    const text = new TextDecoder().decode(raw);
    try {
      return text ? JSON.parse(text) : undefined;
    } catch {
      throw new ProtocolError(`unexpected response from ${spec.method} ${this.baseUrl}${spec.path}: not JSON: ${text.slice(0, 200)}`);
    }
  }

  /** One request; a success status gives the body's bytes, anything else an error. `timeoutMs` Infinity: no bound but the call's signal. */
  private async request(spec: RequestSpec): Promise<Uint8Array> {
    const url = this.baseUrl + spec.path;
    const headers: Record<string, string> = { Accept: "application/json" };
    let body: string | Uint8Array | undefined;
    if (spec.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(spec.json);
    } else if (spec.bytes !== undefined) {
      headers["Content-Type"] = "application/octet-stream";
      body = spec.bytes;
    }
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    if (spec.idempotencyKey) headers["Idempotency-Key"] = spec.idempotencyKey;
    spec.signal?.throwIfAborted();
    const timeoutMs = spec.timeoutMs ?? this.requestTimeoutMs;
    const timeout = new AbortController();
    const timer = Number.isFinite(timeoutMs) ? setTimeout(() => timeout.abort(), timeoutMs) : undefined;
    const onAbort = () => timeout.abort();
    spec.signal?.addEventListener("abort", onAbort, { once: true });
    let status: number;
    let raw: Uint8Array;
    let location: string | undefined;
    try {
      ({ status, body: raw, location } = await this.transport.request({
        method: spec.method,
        url,
        headers,
        body,
        signal: timeout.signal,
        maxAnswerBytes: this.maxAnswerBytes,
        idleTimeoutMs: Number.isFinite(timeoutMs) ? undefined : spec.idleTimeoutMs,
      }));
    } catch (e) {
      if (spec.signal?.aborted) throw spec.signal.reason;
      if (timeout.signal.aborted) throw new TransportError(url, `no answer within ${timeoutMs} ms`, true, e);
      // An answer over the bound: final, never retried.
      if (e instanceof ProtocolError) throw e;
      throw new TransportError(url, describeFetchError(e), false, e);
    } finally {
      clearTimeout(timer);
      spec.signal?.removeEventListener("abort", onAbort);
    }
    this.contacted = true;
    // A transport of the caller's that read past the bound.
    if (raw.length > this.maxAnswerBytes) throw answerTooLong(url, this.maxAnswerBytes);
    if (status >= 200 && status < 300) return raw;
    throw httpErrorOf(status, new TextDecoder().decode(raw), location);
  }
}

/** The innermost cause of a fetch failure ("connect ECONNREFUSED 127.0.0.1:9"), which says what happened where "fetch failed" does not. */
function describeFetchError(error: unknown): string {
  let e: unknown = error;
  while (e instanceof Error && e.cause instanceof Error) e = e.cause;
  if (e instanceof Error) {
    // Node wraps several attempts (IPv4 and IPv6) in an AggregateError.
    if (e instanceof AggregateError && e.errors.length > 0) return e.errors.map((x) => String((x as Error).message ?? x)).join("; ");
    return e.message || String(e);
  }
  return String(e);
}

/** Errors of the connection's making (refused, no such host, connect timeout): the request never reached the server. */
const CONNECT_FAILURES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT", "ETIMEDOUT_CONNECT"]);

function connectFailed(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof AggregateError && e.errors.some((x) => connectFailed(x))) return true;
    if (CONNECT_FAILURES.has(String((e as { code?: unknown }).code))) return true;
  }
  return false;
}
