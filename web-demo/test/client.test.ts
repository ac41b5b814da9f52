// Unit tests of the attachment logic in src/client.ts against a scripted
// fake WebSocket: offsets, resume after a drop, de-duplication, `dropped`,
// credit batching and queued input. No server, no browser, no timers to
// wait on except the (1 ms) reconnect backoff, awaited as an event.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  decodeClientFrame,
  encodeServerFrame,
  TetherConnection,
  type AttachHandlers,
  type ClientFrame,
  type ProcessInfo,
  type ServerFrame,
} from "../src/client.ts";

class FakeSocket {
  static readonly CONNECTING = 0;
  static readonly OPEN = 1;
  static readonly CLOSING = 2;
  static readonly CLOSED = 3;
  static created: FakeSocket[] = [];
  static waiters: Array<(s: FakeSocket) => void> = [];

  readyState = FakeSocket.OPEN;
  binaryType = "blob";
  sent: ClientFrame[] = [];
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number }) => void) | null = null;
  readonly url: URL;

  constructor(
    url: string,
    readonly protocols: string[],
  ) {
    this.url = new URL(url);
    FakeSocket.created.push(this);
    FakeSocket.waiters.splice(0).forEach((w) => w(this));
  }
  send(bytes: Uint8Array): void {
    this.sent.push(decodeClientFrame(bytes));
  }
  close(): void {
    this.readyState = FakeSocket.CLOSED;
  }
  // Test side: the server sends a frame, or the network drops.
  receive(frame: ServerFrame): void {
    const bytes = encodeServerFrame(frame);
    this.onmessage?.({ data: bytes.buffer });
  }
  drop(): void {
    this.readyState = FakeSocket.CLOSED;
    this.onclose?.({ code: 1006 });
  }
  static next(): Promise<FakeSocket> {
    return new Promise((r) => FakeSocket.waiters.push(r));
  }
}
Object.assign(globalThis, { WebSocket: FakeSocket });

const process: ProcessInfo = {
  id: "p1",
  pid: 1,
  argv: ["bash"],
  tty: true,
  overflow: "drop",
  status: "running",
  started_at: "2025-01-01T00:00:00.000Z",
  exit_code: null,
  signal: null,
  reason: null,
  finished_at: null,
  duration_ms: null,
  stdout_bytes: 0,
  stderr_bytes: 0,
  output_incomplete: false,
};
const hello = (stdout = 0, stderr = 0): ServerFrame => ({ type: "hello", version: 1, process, stdout, stderr });
const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);

function recorder() {
  const events: string[] = [];
  const pending: Array<() => void> = [];
  const handlers: AttachHandlers = {
    onData: (stream, data, done) => {
      events.push(`${stream}:${text(data)}`);
      pending.push(done);
    },
    onDropped: (stream, offset, length) => events.push(`dropped:${stream}:${offset}+${length}`),
    onOpen: (_p, resumed) => events.push(resumed ? "resumed" : "open"),
    onReconnecting: () => events.push("reconnecting"),
    onExit: (p) => events.push(`exit:${p.exit_code}`),
    onClosed: (reason) => events.push(`closed:${reason}`),
  };
  return { events, pending, handlers };
}

const conn = new TetherConnection({ baseUrl: "http://127.0.0.1:9/", token: "s3cret" });
const backoffMs = { initial: 1, max: 1 };

test("attaches with the subprotocol, offsets, window and token", () => {
  const { handlers } = recorder();
  const a = conn.attach("p1", handlers, { window: 1024, offsets: { stdout: 5, stderr: 7 } });
  const s = FakeSocket.created.at(-1)!;
  assert.deepEqual(s.protocols, ["tether.v1"]);
  assert.equal(s.binaryType, "arraybuffer");
  assert.equal(s.url.protocol, "ws:");
  assert.equal(s.url.pathname, "/v1/processes/p1/attach");
  assert.equal(s.url.searchParams.get("stdout"), "5");
  assert.equal(s.url.searchParams.get("stderr"), "7");
  assert.equal(s.url.searchParams.get("window"), "1024");
  assert.equal(s.url.searchParams.get("access_token"), "s3cret");
  a.close();
});

test("delivers in order, grants credit in quarter-window batches", () => {
  const { events, pending, handlers } = recorder();
  const a = conn.attach("p1", handlers, { window: 1024 });
  const s = FakeSocket.created.at(-1)!;
  s.receive(hello());
  s.receive({ type: "stdout", offset: 0, data: bytes("abc") });
  s.receive({ type: "stderr", offset: 0, data: bytes("E") });
  s.receive({ type: "stdout", offset: 3, data: bytes("x".repeat(300)) });
  assert.deepEqual(events, ["open", "stdout:abc", "stderr:E", `stdout:${"x".repeat(300)}`]);
  assert.deepEqual(a.offsets, { stdout: 303, stderr: 1 });
  // No credit before the output is consumed; then one frame per 256 bytes.
  assert.deepEqual(s.sent, []);
  pending.forEach((done) => done());
  assert.deepEqual(s.sent, [{ type: "credit", stream: "stdout", bytes: 303 }]);
  a.close();
});

test("resumes from saved offsets after a drop, exactly once per byte", async () => {
  const { events, pending, handlers } = recorder();
  const a = conn.attach("p1", handlers, { window: 1024, backoffMs });
  const first = FakeSocket.created.at(-1)!;
  first.receive(hello());
  first.receive({ type: "stdout", offset: 0, data: bytes("hello ") });
  a.sendStdin(bytes("typed"));
  assert.deepEqual(first.sent, [{ type: "stdin", data: bytes("typed") }]);

  const reconnected = FakeSocket.next();
  first.drop();
  assert.equal(a.state, "reconnecting");
  // Typed while disconnected: queued, sent once the next socket is open.
  a.sendStdin(bytes("queued"));
  const second = await reconnected;
  assert.equal(second.url.searchParams.get("stdout"), "6");
  assert.equal(second.url.searchParams.get("stderr"), "0");
  assert.deepEqual(second.sent, []);
  second.receive(hello(6, 0));
  assert.deepEqual(second.sent, [{ type: "stdin", data: bytes("queued") }]);

  // Defensive: repeated and overlapping ranges are cut to the new bytes.
  second.receive({ type: "stdout", offset: 0, data: bytes("hello ") });
  second.receive({ type: "stdout", offset: 3, data: bytes("lo world") });
  assert.deepEqual(events, ["open", "stdout:hello ", "reconnecting", "resumed", "stdout:world"]);
  assert.equal(a.offsets.stdout, 11);

  // `done` of a frame from the first socket grants nothing on the second,
  // whose window started afresh.
  pending[0]!();
  assert.equal((second.sent as ClientFrame[]).filter((f) => f.type === "credit").length, 0);
  a.close();
});

test("a dropped frame moves the offset and is reported; exit ends it", () => {
  const { events, handlers } = recorder();
  const a = conn.attach("p1", handlers, { backoffMs });
  const s = FakeSocket.created.at(-1)!;
  s.receive(hello());
  s.receive({ type: "dropped", stream: "stdout", offset: 0, length: 100 });
  s.receive({ type: "stdout", offset: 100, data: bytes("kept") });
  // A range already covered is not reported twice.
  s.receive({ type: "dropped", stream: "stdout", offset: 50, length: 10 });
  // A gap without a dropped frame is reported rather than hidden.
  s.receive({ type: "stdout", offset: 110, data: bytes("after gap") });
  s.receive({ type: "exit", process: { ...process, status: "exited", exit_code: 3, reason: "exit" } });
  const count = FakeSocket.created.length;
  s.drop(); // the close after exit must not reconnect
  assert.equal(FakeSocket.created.length, count);
  assert.deepEqual(events, ["open", "dropped:stdout:0+100", "stdout:kept", "dropped:stdout:104+6", "stdout:after gap", "exit:3"]);
  assert.equal(a.state, "exited");
});

test("an error frame is reported; followed by a close it ends the attachment", () => {
  const { events, handlers } = recorder();
  handlers.onError = (code) => events.push(`error:${code}`);
  const a = conn.attach("p1", handlers, { backoffMs });
  const s = FakeSocket.created.at(-1)!;
  s.receive(hello());
  // Not fatal by itself: the server keeps the attachment open.
  s.receive({ type: "error", code: "invalid_request", message: "terminal size 0x10 is out of range" });
  s.receive({ type: "stdout", offset: 0, data: bytes("still here") });
  assert.equal(a.state, "open");
  // Then the server closes: no retry, since it would get the same answer.
  const count = FakeSocket.created.length;
  s.drop();
  assert.equal(FakeSocket.created.length, count);
  assert.equal(a.state, "closed");
  assert.deepEqual(events, [
    "open",
    "error:invalid_request",
    "stdout:still here",
    "closed:server error invalid_request: terminal size 0x10 is out of range",
  ]);
});

test("a failed attach asks over HTTP why; 404 ends it instead of retrying", async () => {
  const requests: string[] = [];
  const realFetch = globalThis.fetch;
  globalThis.fetch = (async (url: string) => {
    requests.push(String(url));
    return new Response(JSON.stringify({ error: { code: "not_found", message: "no process with id \"p1\"" } }), { status: 404 });
  }) as typeof fetch;
  try {
    const { events, handlers } = recorder();
    const closed = new Promise<void>((r) => {
      const inner = handlers.onClosed!;
      handlers.onClosed = (reason, error) => {
        inner(reason, error);
        r();
      };
    });
    const a = conn.attach("p1", handlers, { backoffMs });
    const count = FakeSocket.created.length;
    FakeSocket.created.at(-1)!.drop(); // the upgrade failed: no hello
    await closed;
    assert.deepEqual(requests, ["http://127.0.0.1:9/v1/processes/p1"]);
    assert.equal(a.state, "closed");
    assert.equal(FakeSocket.created.length, count);
    assert.deepEqual(events, ['closed:no process with id "p1"']);
  } finally {
    globalThis.fetch = realFetch;
  }
});

test("reconnect() drops the socket and resumes from the saved offsets", async () => {
  const { events, handlers } = recorder();
  const a = conn.attach("p1", handlers, { backoffMs });
  const first = FakeSocket.created.at(-1)!;
  first.receive(hello());
  first.receive({ type: "stdout", offset: 0, data: bytes("abc") });
  const next = FakeSocket.next();
  a.reconnect();
  assert.equal(first.readyState, FakeSocket.CLOSED);
  // Late frames of the dropped socket are ignored.
  first.receive({ type: "stdout", offset: 3, data: bytes("late") });
  const second = await next;
  assert.equal(second.url.searchParams.get("stdout"), "3");
  second.receive(hello(3, 0));
  second.receive({ type: "stdout", offset: 3, data: bytes("def") });
  assert.deepEqual(events, ["open", "stdout:abc", "reconnecting", "resumed", "stdout:def"]);
  a.close();
});
