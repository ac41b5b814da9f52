// How a client sends one HTTP request: fetch by default (browsers, any
// runtime), replaced under Node by node-http.ts. Kept apart so that the
// client's calls (client.ts) do not depend on which one runs.

import { ProtocolError } from "./errors.js";

/** One request, as the client hands it over. */
export interface TransportRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Aborting it ends the request (the call's own signal or the client's timeout). */
  signal: AbortSignal;
  /** The largest answer body to read: past it, reject with {@link answerTooLong}'s error and read no further. */
  maxAnswerBytes?: number;
  /** When set, the answer may not pause longer than this many ms between two pieces (a request bounded by its silence, not its length). */
  idleTimeoutMs?: number;
}

/** The whole answer. */
export interface TransportResponse {
  status: number;
  body: Uint8Array;
  /** The `Location` header of a redirect (which is not followed). */
  location?: string;
}

/** Sends requests; rejects with the runtime's own error when no answer came (the client turns it into a {@link TransportError}). */
export interface HttpTransport {
  request(request: TransportRequest): Promise<TransportResponse>;
  /**
   * The longest an answer may take to start before the runtime gives up on
   * its own (fetch in Node and Chromium: 300 s): exec asks for one request
   * only when the command's deadline is well within it.
   */
  readonly longestAnswerMs: number;
}

/** The error of an answer longer than the bound (a {@link ProtocolError}: never retried). */
export function answerTooLong(url: string, bound: number): ProtocolError {
  return new ProtocolError(`the answer from ${url} is longer than ${bound} bytes (maxAnswerBytes): not read`);
}

/** fetch: what every browser and Node have. Redirects are followed by fetch itself (a loop ends in its own error). */
export const fetchTransport: HttpTransport = {
  async request(r: TransportRequest): Promise<TransportResponse> {
    const response = await fetch(r.url, {
      method: r.method,
      headers: r.headers,
      body: r.body as string | Uint8Array<ArrayBuffer> | undefined,
      signal: r.signal,
    });
    const bound = r.maxAnswerBytes ?? Infinity;
    const declared = Number(response.headers.get("content-length") ?? NaN);
    if (declared > bound) {
      void response.body?.cancel().catch(() => {});
      throw answerTooLong(r.url, bound);
    }
    const parts: Uint8Array[] = [];
    let size = 0;
    // No body at all (a 204): nothing to read.
    const reader = response.body?.getReader();
    let idle: ReturnType<typeof setTimeout> | undefined;
    try {
      while (reader) {
        const next = reader.read();
        const piece = r.idleTimeoutMs === undefined
          ? await next
          : await Promise.race([
              next,
              new Promise<never>((_, reject) => (idle = setTimeout(() => reject(new Error(`the answer stopped for ${r.idleTimeoutMs} ms`)), r.idleTimeoutMs))),
            ]);
        clearTimeout(idle);
        if (piece.done) break;
        size += piece.value.length;
        if (size > bound) throw answerTooLong(r.url, bound);
        parts.push(piece.value);
      }
    } catch (e) {
      void reader?.cancel().catch(() => {});
      throw e;
    } finally {
      clearTimeout(idle);
    }
    const body = new Uint8Array(size);
    let at = 0;
    for (const p of parts) {
      body.set(p, at);
      at += p.length;
    }
    return { status: response.status, body, location: response.headers.get("location") ?? undefined };
  },
  longestAnswerMs: 240_000,
};

let registered: HttpTransport | undefined;

/** Sets the transport of every client made afterwards (the Node entry registers node:http's). */
export function setDefaultTransport(transport: HttpTransport | undefined): void {
  registered = transport;
}

/** The transport in force: the registered one, else fetch. */
export function defaultTransport(): HttpTransport {
  return registered ?? fetchTransport;
}
