// Files as a process sees them: upload and download, run beside the process.
//
// Built as `tether cp` is, on what the server already offers: a small
// program spawned *beside* the target process (the spawn request's
// `beside`: that process's user and group, and its working directory, its
// current one while it runs, so a shell's `cd` counts). A relative path
// means what it means to the process, and the copy has no more rights than
// the process's user. An upload is `/bin/sh -c 'cat > "$1"'` with the data
// on its stdin (numbered input: at most 1 MiB unacknowledged, so memory
// stays bounded whatever the size); a download is `cat -- PATH` read from
// its stdout in block mode with the attachment's credit window (the server
// paces `cat` to this client). Spawning needs the operator's token: a token
// scoped to one process gets a 403.
//
// It takes an interface of the two calls it makes (FilesHost), never the
// client, so it sits below the client.

import type { Attachment, AttachOptions } from "./attach.js";
import type { CallOptions } from "./endpoint.js";
import { ClosedError, FileTooLargeError, FileTransferError, InvalidArgumentError } from "./errors.js";
import { concat, type OutputStream } from "./output.js";
import type { ProcessInfo, SpawnRequest } from "./protocol.js";

/** What {@link TetherClient.download} reads into memory at most by default (64 MiB): a longer file is a {@link FileTooLargeError}, never cut short. */
export const DEFAULT_MAX_DOWNLOAD = 64 << 20;

/** The most of the remote program's stderr kept for an error message (the rest is read and dropped). */
const MAX_ERROR_BYTES = 16 << 10;

/** What an upload runs (`/bin/sh -c SCRIPT tether-upload PATH`): the path is an argument, never shell text. */
const UPLOAD_SCRIPT = 'cat > "$1"';
/** An upload with a `mode`: the same, then `chmod` (as the process's user). */
const UPLOAD_MODE_SCRIPT = 'cat > "$1" && chmod "$2" "$1"';

/**
 * What {@link TetherClient.upload} sends: bytes, text (sent as UTF-8), a
 * `Blob` (a browser's `File`, Node's `fs.openAsBlob`), a `ReadableStream`,
 * or an (async) iterable of byte chunks, such as Node's
 * `fs.createReadStream(path)`.
 */
export type UploadData =
  | Uint8Array
  | ArrayBuffer
  | string
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>
  | Iterable<Uint8Array>;

/** Options of {@link TetherClient.upload}. */
export interface UploadOptions extends CallOptions {
  /** Permission bits set with `chmod` once written (0 to 0o7777, such as `0o755`); default: as the process's umask makes a new file. */
  mode?: number;
  /** Server-side deadline of the whole copy, in ms: past it the copy is killed and fails. */
  timeoutMs?: number;
}

/** Options of {@link TetherClient.download} and {@link TetherClient.downloadStream}. */
export interface DownloadOptions extends CallOptions {
  /** The longest file accepted, in bytes: longer is a {@link FileTooLargeError}. `download`: default {@link DEFAULT_MAX_DOWNLOAD} (64 MiB); `downloadStream`: default none. */
  maxBytes?: number;
  /** Server-side deadline of the whole copy, in ms. */
  timeoutMs?: number;
  /** Credit window in bytes (default 256 KiB): at most this much of the file is held in the client at a time. */
  window?: number;
}

/** What the file calls need of the client: {@link TetherClient} is one. */
export interface FilesHost {
  run(request: SpawnRequest, options?: AttachOptions): Promise<Attachment>;
  remove(id: string, options?: CallOptions & { force?: boolean }): Promise<ProcessInfo>;
}

function check(processRef: string, path: string): void {
  if (typeof processRef !== "string" || processRef === "") throw new InvalidArgumentError("name the process (an id or a name)");
  if (typeof path !== "string" || path === "") throw new InvalidArgumentError("the path is empty");
  if (path.includes("\0")) throw new InvalidArgumentError("a path cannot hold a NUL byte");
}

function checkTimeout(timeoutMs: number | undefined): void {
  if (timeoutMs !== undefined && !(Number.isSafeInteger(timeoutMs) && timeoutMs > 0)) {
    throw new InvalidArgumentError(`timeoutMs must be a positive whole number, not ${timeoutMs}`);
  }
}

/** Writes `data` to `path` as process `processRef` sees it, as its user; resolves with the bytes written. See {@link TetherClient.upload}. */
export async function upload(host: FilesHost, processRef: string, path: string, data: UploadData, options: UploadOptions = {}): Promise<number> {
  check(processRef, path);
  checkTimeout(options.timeoutMs);
  const argv = ["/bin/sh", "-c", UPLOAD_SCRIPT, "tether-upload", path];
  if (options.mode !== undefined) {
    const mode = options.mode;
    if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777) throw new InvalidArgumentError(`mode must be 0 to 0o7777, not ${mode}`);
    argv.splice(2, 1, UPLOAD_MODE_SCRIPT);
    argv.push(mode.toString(8));
  }
  // Refused before anything runs: a bad source must not truncate the remote file.
  if (!isUploadData(data)) {
    throw new InvalidArgumentError("upload data must be bytes, a string, a Blob, a ReadableStream or an (async) iterable of byte chunks");
  }
  const request: SpawnRequest = { argv, stdin: true, overflow: "block", beside: processRef };
  if (options.timeoutMs !== undefined) request.timeout_ms = options.timeoutMs;
  const { signal } = options;
  const attachment = await host.run(request, { signal });
  let exited = false;
  try {
    // Nothing is expected on stdout: credit and drop whatever comes.
    void attachment.stdout[Symbol.asyncIterator]().return?.();
    const errors = readBounded(attachment.stderr);
    let written = 0;
    let fed = false;
    try {
      for await (const chunk of chunks(data)) {
        await attachment.write(chunk, { signal });
        written += chunk.length;
      }
      await attachment.closeStdin();
      fed = true;
    } catch (e) {
      // The shell ended before it had everything (it could not create the
      // file): its exit says why. Anything else is the caller's.
      if (!(e instanceof ClosedError) || signal?.aborted) throw e;
    }
    const info = await attachment.exit;
    exited = true;
    const stderr = await errors;
    checkExit("upload to", processRef, path, info, stderr);
    if (!fed) throw new FileTransferError(`upload to ${processRef}:${path}: the shell ended before it had all the data`, processRef, path, info.exit_code, info.reason, stderr);
    return written;
  } finally {
    await finish(host, attachment, exited);
  }
}

/**
 * The content of `path` as process `processRef` sees it, as an async
 * iterable of chunks; see {@link TetherClient.downloadStream}.
 */
export async function* downloadStream(host: FilesHost, processRef: string, path: string, options: DownloadOptions = {}): AsyncGenerator<Uint8Array, number, undefined> {
  check(processRef, path);
  checkTimeout(options.timeoutMs);
  const { maxBytes, signal } = options;
  if (maxBytes !== undefined && !(Number.isSafeInteger(maxBytes) && maxBytes >= 0)) {
    throw new InvalidArgumentError(`maxBytes must be a whole number, 0 or more, not ${maxBytes}`);
  }
  const request: SpawnRequest = { argv: ["cat", "--", path], overflow: "block", beside: processRef };
  if (options.timeoutMs !== undefined) request.timeout_ms = options.timeoutMs;
  const attachment = await host.run(request, { signal, window: options.window });
  let exited = false;
  try {
    const errors = readBounded(attachment.stderr);
    let total = 0;
    for await (const chunk of attachment.stdout) {
      if (chunk.type === "dropped") {
        // Block mode loses nothing: a server that says it did is not believed to have the whole file.
        throw new FileTransferError(`download of ${processRef}:${path}: the server lost ${chunk.length} bytes at offset ${chunk.offset}`, processRef, path);
      }
      if (chunk.type !== "data") throw new FileTransferError(`download of ${processRef}:${path}: a ${chunk.type} chunk on a pipe`, processRef, path);
      total += chunk.data.length;
      if (maxBytes !== undefined && total > maxBytes) throw new FileTooLargeError(processRef, path, maxBytes);
      yield chunk.data;
    }
    const info = await attachment.exit;
    exited = true;
    const stderr = await errors;
    checkExit("download of", processRef, path, info, stderr);
    if (info.stdout_bytes !== total) {
      throw new FileTransferError(`download of ${processRef}:${path}: ${total} bytes came of the ${info.stdout_bytes} cat wrote`, processRef, path, info.exit_code, info.reason, stderr);
    }
    return total;
  } finally {
    // Left early (a break, an error, maxBytes): the remote cat is killed.
    await finish(host, attachment, exited);
  }
}

/** The whole content of `path`, at most `maxBytes` (64 MiB by default); see {@link TetherClient.download}. */
export async function download(host: FilesHost, processRef: string, path: string, options: DownloadOptions = {}): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for await (const data of downloadStream(host, processRef, path, { ...options, maxBytes: options.maxBytes ?? DEFAULT_MAX_DOWNLOAD })) {
    parts.push(data);
  }
  return concat(parts);
}

/** Closes the attachment; a process that has not exited (the copy was left early) is killed and forgotten. */
async function finish(host: FilesHost, attachment: Attachment, exited: boolean): Promise<void> {
  attachment.close();
  if (!exited && attachment.id) await host.remove(attachment.id, { force: true }).catch(() => undefined);
}

function checkExit(what: string, processRef: string, path: string, info: ProcessInfo, stderr: string): void {
  if (info.exit_code === 0 && info.reason === "exit") return;
  const said = stderr.trim() || "(nothing on stderr)";
  const how = info.reason === "exit" ? `exit ${info.exit_code}` : `${info.reason}, exit ${info.exit_code}`;
  throw new FileTransferError(`${what} ${processRef}:${path} failed (${how}): ${said}`, processRef, path, info.exit_code, info.reason, stderr);
}

/** Up to {@link MAX_ERROR_BYTES} of a stream as text; the rest is read (so credited) and dropped. A failed attachment gives what came (its error surfaces from `exit`). */
async function readBounded(stream: OutputStream): Promise<string> {
  const parts: Uint8Array[] = [];
  let kept = 0;
  try {
    for await (const data of stream.bytes()) {
      if (kept < MAX_ERROR_BYTES) {
        const piece = data.subarray(0, MAX_ERROR_BYTES - kept);
        parts.push(piece.slice());
        kept += piece.length;
      }
    }
  } catch {
    // The exit, awaited beside this, reports the failure.
  }
  return new TextDecoder().decode(concat(parts));
}

function isUploadData(data: unknown): data is UploadData {
  if (typeof data === "string" || data instanceof Uint8Array || data instanceof ArrayBuffer) return true;
  if (typeof Blob !== "undefined" && data instanceof Blob) return true;
  if (data === null || typeof data !== "object") return false;
  return typeof (data as ReadableStream).getReader === "function" || Symbol.asyncIterator in data || Symbol.iterator in data;
}

/** The upload's source as byte chunks. */
async function* chunks(data: UploadData): AsyncGenerator<Uint8Array, void, undefined> {
  if (typeof data === "string") {
    yield new TextEncoder().encode(data);
  } else if (data instanceof Uint8Array) {
    yield data;
  } else if (data instanceof ArrayBuffer) {
    yield new Uint8Array(data);
  } else if (typeof Blob !== "undefined" && data instanceof Blob) {
    yield* readStream(data.stream());
  } else if (typeof (data as ReadableStream<Uint8Array>).getReader === "function") {
    yield* readStream(data as ReadableStream<Uint8Array>);
  } else if (Symbol.asyncIterator in (data as object)) {
    for await (const piece of data as AsyncIterable<Uint8Array | string>) yield asBytes(piece);
  } else {
    for (const piece of data as Iterable<Uint8Array>) yield asBytes(piece);
  }
}

function asBytes(piece: unknown): Uint8Array {
  if (piece instanceof Uint8Array) return piece;
  if (typeof piece === "string") return new TextEncoder().encode(piece);
  throw new InvalidArgumentError(`an upload's chunks must be Uint8Array or string, not ${typeof piece}`);
}

async function* readStream(stream: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array, void, undefined> {
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield asBytes(value);
    }
  } finally {
    await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
