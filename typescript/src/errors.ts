// The errors of the library: one class per thing a caller can act on, all
// subclasses of TetherError. `isTransient` says whether a retry may help.

/** Base class of every error the library throws (aborts excepted: those rethrow the signal's reason). */
export class TetherError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "TetherError";
  }
}

/**
 * The server answered with an error status. `code` and `message` come from
 * its JSON body `{"error": {"code", "message"}}`; for a body that is not
 * one, `code` is `http_<status>` and `message` the start of the raw text.
 */
export class HttpError extends TetherError {
  constructor(
    /** HTTP status, such as 404. */
    readonly status: number,
    /** Stable machine-readable code, such as `not_found`, `spawn_failed` or `unauthorized`. */
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "HttpError";
  }

  /** True for 404 `not_found`: the process is unknown (never existed, or forgotten). */
  get isNotFound(): boolean {
    return this.status === 404 && this.code === "not_found";
  }
}

/**
 * The server could not be reached or the connection broke: connection
 * refused or reset, a DNS failure, a timeout. Usually transient.
 */
export class TransportError extends TetherError {
  constructor(
    /** The URL that was being requested. */
    readonly url: string,
    message: string,
    /** True when the failure was a timeout. */
    readonly timeout = false,
    cause?: unknown,
  ) {
    super(`cannot reach tetherd at ${url}: ${message}`, { cause });
    this.name = "TransportError";
  }
}

/** Transient failures went on for longer than the retry budget. */
export class RetryBudgetExhaustedError extends TetherError {
  constructor(
    /** Attempts made, the first included. */
    readonly attempts: number,
    /** Milliseconds from the first failure to giving up. */
    readonly elapsedMs: number,
    /** The last failure. */
    readonly last: TetherError,
  ) {
    super(`gave up after ${attempts} attempts over ${elapsedMs} ms: ${last.message}`, { cause: last });
    this.name = "RetryBudgetExhaustedError";
  }

  /** The HTTP status of the last failure, if it was an answer. */
  get status(): number | undefined {
    return this.last instanceof HttpError ? this.last.status : undefined;
  }

  /** The server's error code of the last failure, if it was an answer. */
  get code(): string | undefined {
    return this.last instanceof HttpError ? this.last.code : undefined;
  }

  /** True when the server could not be reached at all. */
  get isUnreachable(): boolean {
    return this.last instanceof TransportError;
  }
}

/**
 * The server broke the protocol (a bad frame, offsets out of order, more
 * data than the credit window, a body that is not the expected JSON), or
 * closed an attachment with an `error` frame and a close code.
 */
export class ProtocolError extends TetherError {
  constructor(
    message: string,
    /** The server's error code when it sent an `error` frame. */
    readonly code?: string,
  ) {
    super(`protocol error: ${message}`);
    this.name = "ProtocolError";
  }
}

/** An argument was rejected before anything was sent (a bad URL, a terminal size out of range). */
export class InvalidArgumentError extends TetherError {
  constructor(message: string) {
    super(`invalid argument: ${message}`);
    this.name = "InvalidArgumentError";
  }
}

/** The attachment has ended (the process exited, or it was closed or failed). */
export class ClosedError extends TetherError {
  constructor(message: string) {
    super(`attachment closed: ${message}`);
    this.name = "ClosedError";
  }
}

/**
 * An upload or a download that the program run beside the process could
 * not do: its exit (`exitCode`, `reason`; undefined when it did not get
 * that far) and what it said on stderr (its first 16 KiB: `sh: cannot
 * create x/y: Directory nonexistent`, `cat: y: No such file or directory`,
 * `Permission denied`...).
 */
export class FileTransferError extends TetherError {
  constructor(
    message: string,
    /** The process (id or name) the path belongs to. */
    readonly processRef: string,
    /** The path as the process sees it. */
    readonly path: string,
    /** The remote program's exit code, when it exited. */
    readonly exitCode?: number | null,
    /** Why the remote program ended (`exit`, `timeout`, `killed`...), when it did. */
    readonly reason?: string | null,
    /** What the remote program wrote on stderr (at most 16 KiB). */
    readonly stderr = "",
  ) {
    super(message);
    this.name = "FileTransferError";
  }
}

/** A download longer than its `maxBytes`: nothing is returned (never a cut-short file) and the remote `cat` is killed. */
export class FileTooLargeError extends FileTransferError {
  constructor(
    processRef: string,
    path: string,
    /** The bound that was passed. */
    readonly maxBytes: number,
  ) {
    super(`${processRef}:${path} is longer than maxBytes (${maxBytes} bytes): raise maxBytes, or stream it with downloadStream`, processRef, path);
    this.name = "FileTooLargeError";
  }
}

/**
 * The error of an HTTP answer with status `status` and body `text`: the
 * server's JSON error body `{"error": {"code", "message"}}`, or, for a body
 * that is not one (a proxy's, a redirect), code `http_<status>` and a
 * message that names the status, where a redirect pointed
 * (`location`), and the start of the text.
 */
export function httpErrorOf(status: number, text: string, location?: string): HttpError {
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  const error = (json as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (error && typeof error.code === "string" && typeof error.message === "string") {
    return new HttpError(status, error.code, error.message);
  }
  const body = text.trim() ? text.trim().slice(0, 200) : "(empty body)";
  if (status >= 300 && status < 400) {
    // tetherd never redirects: a redirect is not followed, and said so.
    return new HttpError(status, `http_${status}`, `the server answered ${status}, a redirect to ${location ?? "nowhere"} (not followed): ${body}`);
  }
  return new HttpError(status, `http_${status}`, `the server answered ${status}: ${body}`);
}

/** True for failures that may succeed when retried: transport errors and HTTP 429, 502, 503, 504. */
export function isTransient(error: unknown): boolean {
  if (error instanceof TransportError) return true;
  return error instanceof HttpError && [429, 502, 503, 504].includes(error.status);
}

/** Error codes of a connection refused (nothing listens there), as Node names them. */
const REFUSED = "ECONNREFUSED";

/** True when `error` is a transport failure whose cause (at any depth, or any of several attempts) is a refused connection. */
export function isRefused(error: unknown): boolean {
  for (let e: unknown = error; e instanceof Error; e = e.cause) {
    if (e instanceof AggregateError && e.errors.some((x) => isRefused(x))) return true;
    if ((e as { code?: unknown }).code === REFUSED) return true;
    // ws hands its socket's error over in an event's `error`.
    const inner = (e as { error?: unknown }).error;
    if (inner instanceof Error && inner !== e && isRefused(inner)) return true;
  }
  return false;
}

/** True when `error` is what an aborted signal threw. */
export function isAbort(error: unknown, signal?: AbortSignal): boolean {
  return signal?.aborted === true && error === signal.reason;
}
