// How a client sends one HTTP request: fetch by default (browsers, any
// runtime), replaced under Node by node-http.ts. Kept apart so that the
// client's calls (client.ts) do not depend on which one runs.

/** One request, as the client hands it over. */
export interface TransportRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string | Uint8Array;
  /** Aborting it ends the request (the call's own signal or the client's timeout). */
  signal: AbortSignal;
}

/** The whole answer. */
export interface TransportResponse {
  status: number;
  body: Uint8Array;
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

/** fetch: what every browser and Node have. */
export const fetchTransport: HttpTransport = {
  async request(r: TransportRequest): Promise<TransportResponse> {
    const response = await fetch(r.url, {
      method: r.method,
      headers: r.headers,
      body: r.body as string | Uint8Array<ArrayBuffer> | undefined,
      signal: r.signal,
    });
    return { status: response.status, body: new Uint8Array(await response.arrayBuffer()) };
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
