// Inbound: the receiving side of an attachment, both output streams with
// their credit. Each frame is checked against the offset the stream expects
// and against the credit window, so a server that skips, repeats or
// oversends is caught; credit is owed as the reader consumes and granted in
// batches (a quarter of the window), and a reconnect's window is sized from
// what is still unconsumed so each stream stays within `window` across
// connections (the server counts the window afresh from each attach).

import { ClosedError, InvalidArgumentError, ProtocolError } from "./errors.js";
import { StreamState } from "./output.js";
import type { ProcessInfo, ServerFrame, StreamName } from "./protocol.js";

/** The frames that carry a stream's bytes or stand for them. */
export type StreamFrame = Extract<ServerFrame, { type: "stdout" | "stderr" | "dropped" | "screen" }>;

export class Inbound {
  readonly stdout: StreamState;
  readonly stderr: StreamState;
  /** The credit window per stream, in bytes. */
  readonly window: number;
  /** Credit is granted once this much is owed (or the reader has caught up). */
  private readonly threshold: number;

  /** `onConsumed` is called when credit may be due on a stream (the attachment then calls {@link takeCredit}). */
  constructor(window: number, offsets: { stdout?: number; stderr?: number } | undefined, onConsumed: (s: StreamState) => void) {
    if (!Number.isSafeInteger(window) || window < 1) throw new InvalidArgumentError(`window must be a positive integer, not ${window}`);
    this.window = window;
    this.threshold = Math.max(1, Math.floor(window / 4));
    this.stdout = new StreamState("stdout", offsets?.stdout ?? 0, onConsumed);
    this.stderr = new StreamState("stderr", offsets?.stderr ?? 0, onConsumed);
  }

  get both(): [StreamState, StreamState] {
    return [this.stdout, this.stderr];
  }

  stream(name: StreamName): StreamState {
    return name === "stdout" ? this.stdout : this.stderr;
  }

  /**
   * The window of the next connection, so that, with what is still
   * unconsumed, each stream stays within `window`; sets what each stream is
   * owed (or owes) on it.
   */
  connectionWindow(): number {
    const connWindow = Math.max(1, this.window - Math.max(this.stdout.unconsumed, this.stderr.unconsumed));
    for (const s of this.both) s.owed = this.window - s.unconsumed - connWindow;
    return connWindow;
  }

  /** Takes one stream frame; true when it carried bytes (progress). Throws {@link ProtocolError} for a frame out of place. */
  accept(frame: StreamFrame): boolean {
    switch (frame.type) {
      case "stdout":
      case "stderr": {
        const s = this.stream(frame.type);
        const length = frame.data.length;
        if (frame.offset !== s.next) throw new ProtocolError(`${frame.type} data at offset ${frame.offset}, expected ${s.next}`);
        // Offsets are exact up to 2^53 - 1 here (and u64 on the wire).
        if (!Number.isSafeInteger(frame.offset + length)) throw new ProtocolError(`${frame.type} data at offset ${frame.offset} of ${length} bytes ends past 2^53 - 1`);
        s.next += length;
        s.received += length;
        if (length === 0) return false;
        if (s.discard) {
          s.owed += length;
          s.onConsumed(s);
          return true;
        }
        // The server may have sent at most `window - unconsumed - owed` more.
        if (s.unconsumed + length + s.owed > this.window) {
          throw new ProtocolError(`the server sent more ${frame.type} than the credit window of ${this.window} bytes`);
        }
        s.push({ type: "data", offset: frame.offset, data: frame.data });
        return true;
      }
      case "dropped": {
        const s = this.stream(frame.stream);
        if (frame.offset !== s.next) throw new ProtocolError(`dropped range of ${frame.stream} starts at ${frame.offset}, expected ${s.next}`);
        if (!Number.isSafeInteger(frame.offset + frame.length)) {
          throw new ProtocolError(`dropped range of ${frame.stream} at ${frame.offset} of ${frame.length} bytes ends past 2^53 - 1`);
        }
        s.next = frame.offset + frame.length;
        if (!s.discard) s.push({ type: "dropped", offset: frame.offset, length: frame.length });
        return false;
      }
      case "screen": {
        const s = this.stdout;
        if (frame.offset !== s.next) throw new ProtocolError(`screen at offset ${frame.offset}, expected ${s.next}`);
        if (!s.discard) s.push({ type: "screen", offset: frame.offset, cols: frame.cols, rows: frame.rows, data: frame.data });
        return false;
      }
    }
  }

  /** The credit to grant on `s` now (taken from what it is owed), or 0 when none is due; `force` grants whatever is owed. */
  takeCredit(s: StreamState, force: boolean): number {
    if (s.owed <= 0) return 0;
    if (!(force || s.discard || s.owed >= this.threshold || s.unconsumed === 0)) return 0;
    const bytes = s.owed;
    s.owed = 0;
    return bytes;
  }

  /** Records each stream's final length from an exited process object. */
  learnTotals(info: ProcessInfo): void {
    this.stdout.total = info.stdout_bytes;
    this.stderr.total = info.stderr_bytes;
    for (const s of this.both) s.wake();
  }

  /** True when both streams are complete. */
  get atEnd(): boolean {
    return this.stdout.atEnd && this.stderr.atEnd;
  }

  /** Nothing more will come: readers end once they have what is queued. */
  finish(): void {
    for (const s of this.both) {
      s.finished = true;
      s.wake();
    }
  }

  /** The attachment failed: readers of an incomplete stream get `error` after what is queued. */
  fail(error: unknown): void {
    for (const s of this.both) {
      if (!s.atEnd) s.failure = error instanceof Error ? error : new ClosedError(String(error));
      s.finished = true;
      s.wake();
    }
  }
}
