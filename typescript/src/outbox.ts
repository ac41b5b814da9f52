// Outbox: input (stdin, EOF, signals) written while an attachment has no
// live connection, held in order until the resume sends it. Bounded: past
// MAX_QUEUED_INPUT bytes a writer waits for room, so a program that is away
// cannot make the client buffer without limit.

import type { ClientFrame } from "./protocol.js";

/** Input queued while reconnecting; past it, `write` waits. */
const MAX_QUEUED_INPUT = 1024 * 1024;

export class Outbox {
  private frames: ClientFrame[] = [];
  private bytes = 0;
  private waiters: Array<() => void> = [];

  /** Queues `frame` when there is room (always when empty); false when full. */
  tryPush(frame: ClientFrame): boolean {
    const size = frame.type === "stdin" ? frame.data.length : 16;
    if (this.bytes + size > MAX_QUEUED_INPUT && this.frames.length > 0) return false;
    // Copy: the caller may reuse its buffer before the resume.
    this.frames.push(frame.type === "stdin" ? { type: "stdin", data: frame.data.slice() } : frame);
    this.bytes += size;
    return true;
  }

  /** Resolves once room may have been made (a resume sent the queue, or the attachment ended); rejects when `signal` aborts. */
  waitForRoom(signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.waiters.push(resolve);
      signal?.addEventListener("abort", () => reject(signal.reason), { once: true });
    });
  }

  /** Takes every queued frame, in order, and wakes the writers waiting for room. */
  drain(): ClientFrame[] {
    const frames = this.frames;
    this.frames = [];
    this.bytes = 0;
    for (const w of this.waiters.splice(0)) w();
    return frames;
  }
}
