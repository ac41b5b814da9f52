// exec: run a command to completion in block mode and collect (or stream)
// its output, with its exit code and reason.

import type { Attachment, AttachOptions } from "./attach.js";
import type { CallOptions } from "./endpoint.js";
import { HttpError, ProtocolError, TetherError } from "./errors.js";
import { concat, type OutputStream } from "./output.js";
import type { ExitReason, ProcessInfo, SpawnRequest } from "./protocol.js";
import type { RetryPolicy } from "./retry.js";
import { answerBoundMs, execOnce, fitsOneRequest, type ExecOnceHost } from "./exec-once.js";

/**
 * What exec needs of the client that runs it ({@link TetherClient} is
 * one): an interface, so that exec sits below the client and never imports it.
 */
export interface ExecHost extends ExecOnceHost {
  spawn(request: SpawnRequest, options?: CallOptions): Promise<ProcessInfo>;
  attach(id: string, options?: AttachOptions): Promise<Attachment>;
  kill(id: string, options?: CallOptions): Promise<ProcessInfo>;
}

/** Options of {@link TetherClient.exec}. */
export interface ExecOptions extends CallOptions {
  /** Server-side deadline in ms: the whole session is killed, `reason` is `timeout` and `exitCode` 124. */
  timeoutMs?: number;
  /** Variables added to the server's environment. */
  env?: Record<string, string>;
  /** Working directory. */
  cwd?: string;
  /** Bytes (a string is sent as UTF-8) written to the process's stdin, which is then closed. Without it stdin is `/dev/null`. */
  stdin?: Uint8Array | string;
  /**
   * Retention per stream on the server, in bytes (the server's default when
   * absent). Given, exec attaches (see {@link TetherClient.exec}), so every
   * byte arrives whatever the retention.
   */
  retainBytes?: number;
  /** Credit window per stream when exec attaches (default 256 KiB, at most half the retention). */
  window?: number;
  /** Reconnect budget of the attachment when exec attaches (default 30 s). */
  reconnect?: Partial<RetryPolicy>;
  /**
   * Streams stdout to this function instead of collecting it (`stdout` of the
   * result is then empty). A returned promise is awaited before more is
   * read, so a slow consumer paces the program and memory stays bounded by
   * the credit window.
   */
  onStdout?(data: Uint8Array): void | Promise<void>;
  /** Streams stderr likewise. */
  onStderr?(data: Uint8Array): void | Promise<void>;
}

/** What {@link TetherClient.exec} returns. */
export interface ExecResult {
  /** The program's own exit code, 128+N for a death by signal N, 124 for a timeout. */
  exitCode: number;
  /** Why it ended: `exit`, `signal`, `timeout` (the deadline fired) or `killed`. */
  reason: ExitReason;
  /** The signal that ended it (`TERM`, `KILL`...), if one did. */
  signal: string | null;
  /** Everything written to stdout (the whole output for a PTY); empty when streamed with `onStdout`. */
  stdout: Uint8Array;
  /** Everything written to stderr; empty when streamed with `onStderr`. */
  stderr: Uint8Array;
  /** `stdout` as UTF-8 text. */
  readonly stdoutText: string;
  /** `stderr` as UTF-8 text. */
  readonly stderrText: string;
  /**
   * Some output may be missing: a descendant kept an output open past the
   * server's drain bound (`output_incomplete`), or bytes were dropped (see
   * `dropped`).
   */
  incomplete: boolean;
  /** Bytes lost: a stream longer than 1 MiB and its retention loses its middle (never when exec attaches). */
  dropped: number;
  /** True when the server's deadline killed it. */
  timedOut: boolean;
  /** True for exit code 0 with reason `exit`. */
  success: boolean;
  /** The exited process object. */
  process: ProcessInfo;
}

/** Runs to completion; see {@link TetherClient.exec}. */
export async function exec(client: ExecHost, command: string | string[] | SpawnRequest, options: ExecOptions): Promise<ExecResult> {
  const request: SpawnRequest =
    typeof command === "string" ? { command } : Array.isArray(command) ? { argv: command } : { ...command };
  // Block mode: the server keeps every byte until it is read, pacing the
  // program if needed, so the output is complete.
  request.overflow = "block";
  if (options.timeoutMs !== undefined) request.timeout_ms = options.timeoutMs;
  if (options.env) request.env = options.env;
  if (options.cwd) request.cwd = options.cwd;
  if (options.retainBytes !== undefined) request.retain_bytes = options.retainBytes;
  // One request unless the caller streams, bounds the retention (only an
  // attachment paces the program so that nothing is lost) or the transport
  // could not wait for the command's deadline (fetch gives up after 300 s).
  // An input too large for one request body is streamed instead, and so
  // is one a server with a smaller --max-body-bytes refused (413, before
  // starting anything).
  const bound = answerBoundMs(client, request.timeout_ms);
  if (!options.onStdout && !options.onStderr && request.retain_bytes === undefined && bound !== undefined && fitsOneRequest(options.stdin)) {
    options.signal?.throwIfAborted();
    try {
      const once = await execOnce(client, request, options.stdin, bound, { signal: options.signal });
      return result(once.info, once.stdout, once.stderr, once.dropped);
    } catch (e) {
      if (!(e instanceof HttpError && e.status === 413)) throw e;
    }
  }
  if (options.stdin !== undefined) request.stdin = true;
  // Keep the window below the retention: in block mode sent-but-uncredited
  // bytes stay retained, so a window as large as the retention would stop
  // the program at every round trip.
  let window = options.window ?? 256 * 1024;
  if (request.retain_bytes) window = Math.min(window, Math.max(1, Math.floor(request.retain_bytes / 2)));
  const { signal } = options;

  const process = await client.spawn(request, { signal });
  let attachment: Attachment | undefined;
  try {
    attachment = await client.attach(process.id, { window, signal, reconnect: options.reconnect });
    const a = attachment;
    const feed = async () => {
      if (options.stdin === undefined) return;
      await a.write(options.stdin);
      await a.closeStdin();
    };
    const [out, err] = await Promise.all([collect(a.stdout, options.onStdout), collect(a.stderr, options.onStderr), feed()]);
    const info = await a.exit;
    if (info.exit_code === null || info.reason === null) throw new ProtocolError("an exited process without an exit code or reason");
    const dropped = out.dropped + err.dropped;
    return result(info, out.bytes, err.bytes, dropped);
  } catch (e) {
    attachment?.close();
    // exec owns the process: when the caller gives up (abort, a callback
    // that throws), the process goes too. Errors of the server or the
    // network leave it alone.
    if (signal?.aborted || !(e instanceof TetherError)) {
      await client.kill(process.id).catch(() => {});
    }
    throw signal?.aborted ? signal.reason : e;
  }
}

async function collect(stream: OutputStream, sink?: (data: Uint8Array) => void | Promise<void>): Promise<{ bytes: Uint8Array; dropped: number }> {
  const parts: Uint8Array[] = [];
  let dropped = 0;
  for await (const chunk of stream) {
    if (chunk.type === "dropped") dropped += chunk.length;
    else if (sink) await sink(chunk.data);
    else parts.push(chunk.data);
  }
  return { bytes: concat(parts), dropped };
}

function result(info: ProcessInfo, stdout: Uint8Array, stderr: Uint8Array, dropped: number): ExecResult {
  const text = (b: Uint8Array) => new TextDecoder().decode(b);
  return {
    exitCode: info.exit_code!,
    reason: info.reason!,
    signal: info.signal,
    stdout,
    stderr,
    get stdoutText() {
      return text(stdout);
    },
    get stderrText() {
      return text(stderr);
    },
    incomplete: info.output_incomplete || dropped > 0,
    dropped,
    timedOut: info.reason === "timeout",
    success: info.exit_code === 0 && info.reason === "exit",
    process: info,
  };
}
