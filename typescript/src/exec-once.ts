// exec in one request: `POST /v1/exec`, with the output past its cap read
// back from retention.
//
// A spawn, a WebSocket attach and the exit frame take three or more round
// trips and a handshake; `POST /v1/exec` is one request on a pooled
// keep-alive connection, which is what lets many commands in flight keep up
// with the server (docs/BENCHMARKS.md, "Client exec throughput"). The
// answer holds the first OUTPUT_CAP bytes of each stream; a longer stream's
// rest comes from `GET .../output` (the process has exited, so its
// retention no longer moves).

import type { CallOptions } from "./endpoint.js";
import { ProtocolError } from "./errors.js";
import { parseProcess, type ProcessInfo, type SpawnRequest } from "./protocol.js";

/**
 * Bytes of each stream an answer of `POST /v1/exec` carries: the server's
 * default `max_output_bytes` (less if its `--max-exec-output-bytes` is
 * less). Not asked for: the server's default fits whatever it allows, and
 * the answer says the cap that applied. The server reserves three times it
 * per stream while the command runs (against `--retain-total`), so it stays
 * small: 50 commands in flight reserve 300 MiB. Output past it comes from
 * retention.
 */
export const OUTPUT_CAP = 1 << 20;

/**
 * Largest `stdin` sent inside the request, encoded (JSON text, or base64):
 * half the server's default `--max-body-bytes`. Larger input is streamed
 * over an attachment, which has no such bound.
 */
export const INPUT_IN_REQUEST = 512 << 10;

/** True when `input` (as {@link execOnce} encodes it) is at most {@link INPUT_IN_REQUEST}. */
export function fitsOneRequest(input: Uint8Array | string | undefined): boolean {
  if (input === undefined) return true;
  if (typeof input === "string") return new TextEncoder().encode(JSON.stringify(input)).length <= INPUT_IN_REQUEST;
  return 4 * Math.ceil(input.length / 3) <= INPUT_IN_REQUEST;
}

/** Allowed past a command's own deadline for its kill, drain and answer, in ms. */
const ANSWER_GRACE_MS = 60_000;

/** What a one-request exec needs of the client ({@link TetherClient} is one). */
export interface ExecOnceHost {
  readonly requestTimeoutMs: number;
  readonly transport: { readonly longestAnswerMs: number };
  execRequest(body: Record<string, unknown>, options?: CallOptions & { timeoutMs?: number }): Promise<unknown>;
  readOutput(id: string, stream: "stdout" | "stderr", offset: number, options?: CallOptions): Promise<Uint8Array>;
}

/** The bound of the request for a command with this deadline; undefined when the transport could not wait that long (then exec attaches instead). */
export function answerBoundMs(host: ExecOnceHost, deadlineMs: number | undefined): number | undefined {
  const bound = deadlineMs === undefined ? Infinity : deadlineMs + host.requestTimeoutMs + ANSWER_GRACE_MS;
  return bound <= host.transport.longestAnswerMs ? bound : undefined;
}

/** Runs a spawn request to completion in one request: the exited process, its streams and the bytes lost (evicted before they could be read). */
export async function execOnce(
  host: ExecOnceHost,
  request: SpawnRequest,
  input: Uint8Array | string | undefined,
  boundMs: number,
  options: CallOptions,
): Promise<{ info: ProcessInfo; stdout: Uint8Array; stderr: Uint8Array; dropped: number }> {
  const body: Record<string, unknown> = { ...request };
  delete body.stdin;
  if (typeof input === "string") body.input = input;
  else if (input !== undefined) body.input_base64 = toBase64(input);
  const answer = await host.execRequest(body, { signal: options.signal, timeoutMs: boundMs });
  const info = parseProcess(answer);
  const captured = answer as Record<string, unknown>;
  const cap = captured.max_output_bytes;
  if (typeof cap !== "number" || !Number.isSafeInteger(cap) || cap < 0) throw new ProtocolError("POST /v1/exec answered without a valid max_output_bytes");
  let dropped = 0;
  const streams: Uint8Array[] = [];
  for (const name of ["stdout", "stderr"] as const) {
    const part = parseCaptured(name, captured[name]);
    dropped += part.dropped;
    let bytes = part.bytes;
    if (part.truncated) {
      const rest = await host.readOutput(info.id, name, cap, options);
      const whole = new Uint8Array(bytes.length + rest.length);
      whole.set(bytes);
      whole.set(rest, bytes.length);
      bytes = whole;
      // Retention keeps a stream's newest bytes: what is missing is between
      // the cap and what was still retained.
      const total = name === "stdout" ? info.stdout_bytes : info.stderr_bytes;
      dropped += Math.max(0, total - cap - rest.length);
    }
    streams.push(bytes);
  }
  return { info, stdout: streams[0]!, stderr: streams[1]!, dropped };
}

function parseCaptured(name: string, value: unknown): { bytes: Uint8Array; dropped: number; truncated: boolean } {
  const v = value as { data?: unknown; encoding?: unknown; dropped?: unknown; truncated?: unknown } | undefined;
  if (typeof v !== "object" || v === null || typeof v.data !== "string") throw new ProtocolError(`POST /v1/exec answered without ${name}`);
  const dropped = v.dropped ?? 0;
  const truncated = v.truncated ?? false;
  if (typeof dropped !== "number" || typeof truncated !== "boolean") throw new ProtocolError(`POST /v1/exec answered a bad ${name}`);
  if (v.encoding === "utf8") return { bytes: new TextEncoder().encode(v.data), dropped, truncated };
  if (v.encoding === "base64") return { bytes: fromBase64(name, v.data), dropped, truncated };
  throw new ProtocolError(`POST /v1/exec answered ${name} in an unknown encoding ${JSON.stringify(v.encoding)}`);
}

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  // In slices: String.fromCharCode takes its bytes as arguments.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function fromBase64(name: string, text: string): Uint8Array {
  let binary: string;
  try {
    binary = atob(text);
  } catch {
    throw new ProtocolError(`POST /v1/exec answered ${name} that is not base64`);
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
