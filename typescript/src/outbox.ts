// Outbox: the input side of an attachment (stdin, EOF, resize, signals).
//
// Numbered (the default; attach with `input=ID`, docs/PROTOCOL.md): every
// action gets a position in one sequence (a stdin byte one, any other
// action one) and is kept until the server's `input_ack` covers it. On a
// live connection it goes out at once; while reconnecting it waits; a
// resume resends exactly what the server says it has not applied, so each
// keystroke reaches the process once, in order, however often the
// connection drops. At most MAX_UNACKNOWLEDGED units wait: past it a
// writer waits (back-pressure).
//
// Unnumbered (`numberedInput: false`, for servers without it): input goes
// out at once, or is held in order while reconnecting; what a broken
// connection carried may be lost (sent at most once).
//
// Either way, past MAX_SOCKET_BUFFER bytes buffered in the socket a writer
// waits for it to drain.

import { ClosedError } from "./errors.js";
import { encodeClientFrame, inputUnits, type ClientFrame, type InputAction } from "./protocol.js";
import { sleep } from "./retry.js";
import type { WebSocketLike } from "./websocket.js";

/** Input units (stdin bytes, one per other action) held unacknowledged, or queued unnumbered while reconnecting; past it, `send` waits. */
export const MAX_UNACKNOWLEDGED = 1024 * 1024;
/** Past this many bytes buffered in the socket, `write` waits for it to drain. */
const MAX_SOCKET_BUFFER = 1024 * 1024;

/** Where the outbox sends: the live socket (undefined while reconnecting), and whether the attachment has ended. */
export interface OutboxTarget {
  live(): WebSocketLike | undefined;
  ended(): boolean;
}

export class Outbox {
  /** Numbered: `[seq, action]` sent or waiting, not yet acknowledged. Unnumbered: queued while reconnecting. */
  private pending: Array<{ seq: number; action: InputAction }> = [];
  /** The position of the next new action (numbered), or the units queued (unnumbered). */
  private next = 0;
  /** Where the server said it stands: every unit before it is applied. */
  private acknowledged = 0;
  private waiters: Array<() => void> = [];
  /** Unnumbered: the last size asked for while reconnecting (only the last one matters). */
  private pendingResize: { cols: number; rows: number } | undefined;
  /** Unnumbered: `stdin_eof` was sent; on pipes it is repeated after each resume. */
  private eofSent = false;

  constructor(
    private readonly target: OutboxTarget,
    /** Numbered input: the stream's id (`input=ID`); undefined: unnumbered. */
    readonly inputId: string | undefined,
  ) {}

  /** True once anything was numbered: a new connection resumes the stream (`input_resume=1`). */
  get started(): boolean {
    return this.inputId !== undefined && this.next > 0;
  }

  /** Units sent (or waiting to be) that the server has not acknowledged. */
  get unacknowledged(): number {
    return this.next - this.acknowledged;
  }

  /** Sends `action` now, or keeps it for the resume; waits while the unacknowledged bound or the socket's buffer is full (`signal` ends the wait). */
  async send(action: InputAction, signal?: AbortSignal): Promise<void> {
    if (this.inputId === undefined) return this.sendUnnumbered(action, signal);
    while (this.next - this.acknowledged >= MAX_UNACKNOWLEDGED) {
      signal?.throwIfAborted();
      if (this.target.ended()) throw new ClosedError("the attachment has ended");
      await this.waitForRoom(signal);
    }
    signal?.throwIfAborted();
    if (this.target.ended()) throw new ClosedError("the attachment has ended");
    // Copy: the caller may reuse its buffer before the resume.
    const kept: InputAction = action.type === "stdin" ? { type: "stdin", data: action.data.slice() } : action;
    const seq = this.next;
    this.next += inputUnits(kept);
    this.pending.push({ seq, action: kept });
    const socket = this.target.live();
    if (socket) {
      socket.send(encodeClientFrame({ type: "input", seq, action: kept }));
      await this.drained(socket, signal);
    }
  }

  /** Sets the PTY size: numbered, in order with the rest; unnumbered, now or after the resume (the last size asked for). */
  async resize(cols: number, rows: number): Promise<void> {
    if (this.inputId !== undefined) return this.send({ type: "resize", cols, rows });
    const socket = this.target.live();
    if (socket) socket.send(encodeClientFrame({ type: "resize", cols, rows }));
    else this.pendingResize = { cols, rows };
  }

  /** The server has applied every unit before `applied` (an `input_ack`): forget them, and wake writers waiting for room. */
  acknowledge(applied: number): void {
    const upTo = Math.min(applied, this.next);
    if (upTo <= this.acknowledged) return;
    this.acknowledged = upTo;
    while (this.pending.length > 0) {
      const first = this.pending[0]!;
      const units = inputUnits(first.action);
      if (first.seq + units <= upTo && !(units === 0 && first.seq === upTo)) {
        this.pending.shift();
        continue;
      }
      if (first.seq < upTo && first.action.type === "stdin") {
        // Applied in part: keep its tail.
        first.action = { type: "stdin", data: first.action.data.subarray(upTo - first.seq) };
        first.seq = upTo;
      }
      break;
    }
    for (const w of this.waiters.splice(0)) w();
  }

  /**
   * Sends what a new connection owes. Numbered: `applied` is where the
   * server said the stream stands (its `input_ack` after `hello`); only
   * what it has not applied is resent. Unnumbered: a lost `stdin_eof`
   * would leave the process waiting for input for ever, so on pipes (where
   * closing twice is harmless) it is repeated on each resume, on a PTY
   * (where it types ^D) never; then the queued input, then the last size.
   */
  resume(socket: WebSocketLike, resumed: boolean, tty: boolean, applied?: number): void {
    if (this.inputId !== undefined) {
      if (applied !== undefined) this.acknowledge(applied);
      for (const { seq, action } of this.pending) socket.send(encodeClientFrame({ type: "input", seq, action }));
      return;
    }
    if (resumed && this.eofSent && !tty) socket.send(encodeClientFrame({ type: "stdin_eof" }));
    for (const { action } of this.pending) socket.send(encodeClientFrame(action));
    this.pending = [];
    this.next = 0;
    for (const w of this.waiters.splice(0)) w();
    if (this.pendingResize) {
      socket.send(encodeClientFrame({ type: "resize", ...this.pendingResize }));
      this.pendingResize = undefined;
    }
  }

  /** The attachment has ended: what waits goes nowhere; writers waiting for room see the end. */
  end(): void {
    this.pending = [];
    for (const w of this.waiters.splice(0)) w();
  }

  private async sendUnnumbered(action: InputAction, signal?: AbortSignal): Promise<void> {
    if (action.type === "stdin_eof") this.eofSent = true;
    for (;;) {
      signal?.throwIfAborted();
      if (this.target.ended()) throw new ClosedError("the attachment has ended");
      const socket = this.target.live();
      if (socket) {
        await this.drained(socket, signal);
        if (this.target.live() !== socket) continue;
        socket.send(encodeClientFrame(action as ClientFrame));
        return;
      }
      // Queued while reconnecting (always when empty).
      const size = action.type === "stdin" ? action.data.length : 16;
      if (this.next + size <= MAX_UNACKNOWLEDGED || this.pending.length === 0) {
        const kept: InputAction = action.type === "stdin" ? { type: "stdin", data: action.data.slice() } : action;
        this.pending.push({ seq: 0, action: kept });
        this.next += size;
        return;
      }
      await this.waitForRoom(signal);
    }
  }

  /** Resolves once the socket's buffer is below the bound (the standard API has no drain event). */
  private async drained(socket: WebSocketLike, signal?: AbortSignal): Promise<void> {
    for (;;) {
      const buffered = (socket as unknown as { bufferedAmount?: number }).bufferedAmount ?? 0;
      if (buffered <= MAX_SOCKET_BUFFER || this.target.live() !== socket) return;
      await sleep(5, signal);
    }
  }

  /** Resolves once room may have been made (an acknowledgement, a resume, or the end); rejects when `signal` aborts. */
  private waitForRoom(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiters.push(resolve);
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }
}
