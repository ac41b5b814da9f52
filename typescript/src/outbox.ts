// Outbox: the input side of an attachment (stdin, EOF, resize, signals).
// On a live connection input goes out at once, pausing while the socket's
// buffer is full; while reconnecting it is held in order until the resume
// sends it. Bounded both ways: past MAX_QUEUED_INPUT bytes queued, or
// MAX_SOCKET_BUFFER buffered in the socket, a writer waits, so a program
// that is away cannot make the client buffer without limit.

import { ClosedError } from "./errors.js";
import { encodeClientFrame, type ClientFrame } from "./protocol.js";
import { sleep } from "./retry.js";
import type { WebSocketLike } from "./websocket.js";

/** Input queued while reconnecting; past it, `write` waits. */
const MAX_QUEUED_INPUT = 1024 * 1024;
/** Past this many bytes buffered in the socket, `write` waits for it to drain. */
const MAX_SOCKET_BUFFER = 1024 * 1024;

/** Where the outbox sends: the live socket (undefined while reconnecting), and whether the attachment has ended. */
export interface OutboxTarget {
  live(): WebSocketLike | undefined;
  ended(): boolean;
}

export class Outbox {
  private frames: ClientFrame[] = [];
  private bytes = 0;
  private waiters: Array<() => void> = [];
  /** The last size asked for while reconnecting: only the last one matters. */
  private pendingResize: { cols: number; rows: number } | undefined;
  /** `stdin_eof` was sent: on pipes it is repeated after each resume. */
  private eofSent = false;

  constructor(private readonly target: OutboxTarget) {}

  /** Sends `frame` now, or queues it while reconnecting; waits while the socket's buffer or the queue is full (`signal` ends the wait). */
  async send(frame: ClientFrame, signal?: AbortSignal): Promise<void> {
    if (frame.type === "stdin_eof") this.eofSent = true;
    for (;;) {
      signal?.throwIfAborted();
      if (this.target.ended()) throw new ClosedError("the attachment has ended");
      const socket = this.target.live();
      if (socket) {
        const buffered = (socket as unknown as { bufferedAmount?: number }).bufferedAmount ?? 0;
        if (buffered <= MAX_SOCKET_BUFFER) {
          socket.send(encodeClientFrame(frame));
          return;
        }
        await sleep(5, signal); // the standard API has no drain event
        continue;
      }
      if (this.tryPush(frame)) return;
      await this.waitForRoom(signal);
    }
  }

  /** Sets the PTY size now, or after the resume (the last size asked for). */
  resize(cols: number, rows: number): void {
    const socket = this.target.live();
    if (socket) socket.send(encodeClientFrame({ type: "resize", cols, rows }));
    else this.pendingResize = { cols, rows };
  }

  /**
   * Sends what a new connection owes: a lost `stdin_eof` would leave the
   * process waiting for input for ever, so on pipes (where closing twice is
   * harmless) it is repeated on each resume, on a PTY (where it types ^D)
   * never; then the queued input, then the last size asked for.
   */
  resume(socket: WebSocketLike, resumed: boolean, tty: boolean): void {
    if (resumed && this.eofSent && !tty) socket.send(encodeClientFrame({ type: "stdin_eof" }));
    for (const frame of this.drain()) socket.send(encodeClientFrame(frame));
    if (this.pendingResize) {
      socket.send(encodeClientFrame({ type: "resize", ...this.pendingResize }));
      this.pendingResize = undefined;
    }
  }

  /** Takes every queued frame, in order, and wakes the writers waiting for room. */
  drain(): ClientFrame[] {
    const frames = this.frames;
    this.frames = [];
    this.bytes = 0;
    for (const w of this.waiters.splice(0)) w();
    return frames;
  }

  /** Queues `frame` when there is room (always when empty); false when full. */
  private tryPush(frame: ClientFrame): boolean {
    const size = frame.type === "stdin" ? frame.data.length : 16;
    if (this.bytes + size > MAX_QUEUED_INPUT && this.frames.length > 0) return false;
    // Copy: the caller may reuse its buffer before the resume.
    this.frames.push(frame.type === "stdin" ? { type: "stdin", data: frame.data.slice() } : frame);
    this.bytes += size;
    return true;
  }

  /** Resolves once room may have been made (a resume sent the queue, or the attachment ended); rejects when `signal` aborts. */
  private waitForRoom(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiters.push(resolve);
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }
}
