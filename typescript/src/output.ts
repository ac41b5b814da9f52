// OutputStream: one output stream of an attachment, read as an async
// iterator of chunks. The attachment pushes frames into its queue; credit is
// granted to the server only as the application takes chunks, so the queue
// holds at most the credit window and unread output waits on the server.

import { ClosedError } from "./errors.js";
import type { StreamName } from "./protocol.js";

/** One item of an output stream: bytes, or a notice that bytes were lost. */
export type Chunk =
  /** Bytes of the stream; `offset` is that of `data[0]` since spawn. */
  | { type: "data"; offset: number; data: Uint8Array }
  /** Bytes `offset..offset+length` were evicted on the server (drop mode) before this attachment got them. */
  | { type: "dropped"; offset: number; length: number }
  /**
   * The terminal screen at `offset` (stdout of a PTY, with the `screen`
   * option): reset the terminal, resize it to `cols x rows`, write `data`;
   * the data chunks that follow start at `offset`. Not counted as credit.
   */
  | { type: "screen"; offset: number; cols: number; rows: number; data: Uint8Array };

/** Flow-control figures of one stream, for tests and curious callers. */
export interface StreamStats {
  /** Data bytes received over every connection. */
  received: number;
  /** Bytes received and not yet consumed by the reader (never above the window). */
  buffered: number;
  /** The most ever buffered. */
  maxBuffered: number;
  /** Bytes reported as `dropped`. */
  dropped: number;
}

/**
 * Per-stream state shared by the attachment (producer) and the reader.
 * Internal: the public face is {@link OutputStream}.
 */
export class StreamState {
  private queue: Chunk[] = [];
  private head = 0;
  /** Offset just past the last item received: where a resume starts. */
  next: number;
  /** The stream's final length, once the process has exited. */
  total: number | undefined;
  /** The exit frame has arrived, or the attachment ended: nothing more will come. */
  finished = false;
  /** Fatal failure, reported after the queued items. */
  failure: Error | undefined;
  /** The reader stopped: data is credited and thrown away. */
  discard = false;
  /** Data bytes taken from the server and not yet consumed (queued or in the reader's hands). */
  unconsumed = 0;
  /** Credit to grant on the current connection; negative is a debt. */
  owed = 0;
  received = 0;
  maxBuffered = 0;
  droppedBytes = 0;
  private waiters: Array<() => void> = [];

  constructor(
    readonly name: StreamName,
    start: number,
    /** Called when bytes were consumed, so that credit may be granted. */
    readonly onConsumed: (state: StreamState) => void,
  ) {
    this.next = start;
  }

  get atEnd(): boolean {
    return this.finished || (this.total !== undefined && this.next >= this.total);
  }

  push(chunk: Chunk): void {
    if (chunk.type === "screen") {
      // What was queued before it is replaced by it.
      this.consumed(this.unconsumed);
      this.queue = [];
      this.head = 0;
    } else if (chunk.type === "dropped") {
      this.droppedBytes += chunk.length;
      const last = this.queue.length > this.head ? this.queue[this.queue.length - 1] : undefined;
      if (last?.type === "dropped" && last.offset + last.length === chunk.offset) {
        last.length += chunk.length;
        this.wake();
        return;
      }
    } else {
      this.unconsumed += chunk.data.length;
      this.maxBuffered = Math.max(this.maxBuffered, this.unconsumed);
    }
    this.queue.push(chunk);
    this.wake();
  }

  shift(): Chunk | undefined {
    if (this.head >= this.queue.length) return undefined;
    const chunk = this.queue[this.head]!;
    this.queue[this.head] = undefined as unknown as Chunk;
    this.head += 1;
    // Compact now and then so the array does not grow without bound.
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    return chunk;
  }

  get queuedOffset(): number {
    const front = this.queue[this.head];
    return front ? front.offset : this.next;
  }

  consumed(n: number): void {
    if (n <= 0) return;
    this.unconsumed -= n;
    this.owed += n;
    this.onConsumed(this);
  }

  /** Stops buffering: what is queued is credited and thrown away, and so is what comes later. */
  stopReading(): void {
    if (this.discard) return;
    this.discard = true;
    const n = this.unconsumed;
    this.queue = [];
    this.head = 0;
    this.consumed(n);
  }

  wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  stats(): StreamStats {
    return { received: this.received, buffered: this.unconsumed, maxBuffered: this.maxBuffered, dropped: this.droppedBytes };
  }
}

/**
 * One output stream of an {@link Attachment}: `for await (const chunk of
 * attachment.stdout)` yields {@link Chunk}s in order, each byte once across
 * reconnects, with `dropped` notices for anything the server evicted. The
 * iteration ends once the process has exited and every byte of this stream
 * has been read, whatever happens to the other stream; it throws if the
 * attachment failed (after every chunk received before the failure).
 *
 * Credit: the chunk last yielded counts as consumed when the loop asks for
 * the next one, so the client holds at most the credit window of each stream,
 * the chunk being processed included, and a slow loop paces the server (in
 * block mode, the program). One reader per stream; leaving the loop early
 * (`break`, `return`, a throw) stops reading that stream for good: its output
 * is then credited and discarded, so it never holds the process back.
 */
export class OutputStream implements AsyncIterable<Chunk> {
  private inHand = 0;
  private iterating = false;

  /** @internal */
  constructor(private readonly state: StreamState) {}

  /** Which stream this is. */
  get name(): StreamName {
    return this.state.name;
  }

  /** The offset of the next byte this reader will return (the stream's end once all is read). */
  get offset(): number {
    return this.state.queuedOffset;
  }

  /** Flow-control figures of this stream. */
  get stats(): StreamStats {
    return this.state.stats();
  }

  /** The chunks of the stream; see the class documentation. */
  [Symbol.asyncIterator](): AsyncIterator<Chunk> {
    if (this.iterating) throw new ClosedError(`${this.name} is already being read`);
    this.iterating = true;
    const state = this.state;
    return {
      next: async (): Promise<IteratorResult<Chunk>> => {
        this.release();
        for (;;) {
          const chunk = state.shift();
          if (chunk) {
            if (chunk.type === "data") this.inHand = chunk.data.length;
            return { value: chunk, done: false };
          }
          if (state.failure) {
            const failure = state.failure;
            state.failure = undefined;
            throw failure;
          }
          if (state.atEnd || state.discard) return { value: undefined, done: true };
          await state.wait();
        }
      },
      return: async (): Promise<IteratorResult<Chunk>> => {
        this.release();
        state.stopReading();
        return { value: undefined, done: true };
      },
    };
  }

  /** The data of the stream as byte arrays, skipping `dropped` gaps (their sizes are in `stats.dropped`). */
  async *bytes(): AsyncGenerator<Uint8Array, void, undefined> {
    for await (const chunk of this) if (chunk.type === "data") yield chunk.data;
  }

  /** Reads the stream to its end and returns every byte (gaps skipped). Holds it all in memory. */
  async readAll(): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    for await (const data of this.bytes()) parts.push(data);
    return concat(parts);
  }

  /** Reads the stream to its end as UTF-8 text (a split code point is kept whole; invalid bytes become U+FFFD). */
  async text(): Promise<string> {
    const decoder = new TextDecoder();
    let text = "";
    for await (const chunk of this) {
      if (chunk.type === "data") text += decoder.decode(chunk.data, { stream: true });
      else text += decoder.decode(); // a gap ends any partial code point
    }
    return text + decoder.decode();
  }

  private release(): void {
    const n = this.inHand;
    this.inHand = 0;
    this.state.consumed(n);
  }
}

/** Joins byte arrays into one. */
export function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
