// The Node transport: node:http and node:https with keep-alive agents.
//
// Not Node's fetch, for one reason: its undici gives up on an answer whose
// headers take more than 300 s (`UND_ERR_HEADERS_TIMEOUT`), and a `POST
// /v1/exec` answers when its command has exited, which may be hours later.
// node:http waits as long as the call's own signal allows. At 50 requests
// in flight both reach the server's rate here (docs/BENCHMARKS.md).

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { answerTooLong, type HttpTransport, type TransportRequest, type TransportResponse } from "./transport.js";

/**
 * Idle pooled connections close after this many ms: below tetherd's
 * `--header-timeout-ms` (10 s by default), so a request never goes out on
 * a connection the server is closing. (An agent's `timeout` ends only idle
 * sockets; a request waiting for its answer is left alone.)
 */
const KEEPALIVE_IDLE_MS = 4_000;

/** The longest a connection may take to be made, in ms (the request's own bounds count from there; Python's and Rust's clients take 10 s too). */
const CONNECT_TIMEOUT_MS = 10_000;

const agents = {
  http: new HttpAgent({ keepAlive: true, timeout: KEEPALIVE_IDLE_MS }),
  https: new HttpsAgent({ keepAlive: true, timeout: KEEPALIVE_IDLE_MS }),
};

/** Redirects are not followed (tetherd never redirects): the client reports one with its status and `Location`. */
export const nodeTransport: HttpTransport = {
  request(r: TransportRequest): Promise<TransportResponse> {
    return new Promise((resolve, reject) => {
      if (r.signal.aborted) return reject(r.signal.reason);
      const url = new URL(r.url);
      const https = url.protocol === "https:";
      const body = r.body === undefined ? undefined : typeof r.body === "string" ? Buffer.from(r.body) : r.body;
      const headers: Record<string, string | number> = { ...r.headers };
      if (body !== undefined) headers["Content-Length"] = body.byteLength;
      const send = https ? httpsRequest : httpRequest;
      const bound = r.maxAnswerBytes ?? Infinity;
      const request = send(url, { method: r.method, headers, agent: https ? agents.https : agents.http }, (response: IncomingMessage) => {
        // The declared length first: a longer answer is refused unread.
        if (Number(response.headers["content-length"] ?? NaN) > bound) {
          request.destroy(answerTooLong(r.url, bound));
          return;
        }
        const parts: Buffer[] = [];
        let size = 0;
        response.on("data", (part: Buffer) => {
          size += part.byteLength;
          if (size > bound) {
            parts.length = 0;
            request.destroy(answerTooLong(r.url, bound));
            return;
          }
          parts.push(part);
        });
        response.on("end", () => {
          r.signal.removeEventListener("abort", onAbort);
          const all = Buffer.concat(parts);
          const location = response.headers.location;
          resolve({ status: response.statusCode ?? 0, body: new Uint8Array(all.buffer, all.byteOffset, all.byteLength), location });
        });
        response.on("error", fail);
      });
      // Bounded even where the request itself is not (an exec without a
      // deadline): a connection that is never made is an unsent request.
      request.on("socket", (socket) => {
        if (!socket.connecting) return;
        const timer = setTimeout(() => {
          request.destroy(Object.assign(new Error(`could not connect within ${CONNECT_TIMEOUT_MS} ms`), { code: "ETIMEDOUT_CONNECT" }));
        }, CONNECT_TIMEOUT_MS);
        socket.once("connect", () => clearTimeout(timer));
        socket.once("close", () => clearTimeout(timer));
      });
      if (r.idleTimeoutMs !== undefined) {
        const idleMs = r.idleTimeoutMs;
        request.setTimeout(idleMs, () => request.destroy(new Error(`the answer stopped for ${idleMs} ms`)));
      }
      function fail(e: unknown): void {
        r.signal.removeEventListener("abort", onAbort);
        reject(e);
      }
      function onAbort(): void {
        request.destroy(r.signal.reason instanceof Error ? r.signal.reason : new Error("aborted"));
      }
      r.signal.addEventListener("abort", onAbort, { once: true });
      request.on("error", fail);
      request.end(body);
    });
  },
  longestAnswerMs: Infinity,
};
