// A fake tetherd that lies, on loopback: each act of
// tests/hostile/cases.json (see its README), written by hand down to the
// WebSocket frames, so that it can send what no library would. It counts
// the request heads it reads (HTTP requests and WebSocket upgrades).

import { Encoder } from "@msgpack/msgpack";
import { createHash } from "node:crypto";
import { createServer, type Server, type Socket } from "node:net";
import { listenOnLoopback } from "./harness.js";

/** The running process every hello describes. */
export const PROCESS = {
  id: "0123456789abcdef0123456789abcdef",
  pid: 4242,
  argv: ["sleep", "30"],
  tty: false,
  overflow: "drop",
  status: "running",
  started_at: "2024-01-01T00:00:00.000Z",
  exit_code: null,
  signal: null,
  reason: null,
  finished_at: null,
  duration_ms: null,
  stdout_bytes: 0,
  stderr_bytes: 0,
  output_incomplete: false,
};

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const PIECE = 1 << 20;
// bigint for offsets past 2^53 (the encoder writes them as uint64).
const encoder = new Encoder({ useBigInt64: true });

/** The process object of an exit frame: exited 0 with reason `exit`, `stdoutBytes` written. */
function exited(stdoutBytes: number): object {
  return { ...PROCESS, status: "exited", exit_code: 0, reason: "exit", finished_at: "2024-01-01T00:00:01.000Z", duration_ms: 1000, stdout_bytes: stdoutBytes };
}

function pack(value: unknown): Buffer {
  return Buffer.from(encoder.encode(value));
}

/** One server frame (unmasked): `opcode` 0 continuation, 1 text, 2 binary, 8 close, 9 ping. */
export function wsFrame(opcode: number, payload: Uint8Array, fin = true): Buffer {
  return Buffer.concat([wsHead(opcode, payload.length, fin), payload]);
}

function wsHead(opcode: number, length: number, fin = true): Buffer {
  const first = (fin ? 0x80 : 0) | opcode;
  if (length < 126) return Buffer.from([first, length]);
  if (length < 1 << 16) {
    const head = Buffer.from([first, 126, 0, 0]);
    head.writeUInt16BE(length, 2);
    return head;
  }
  const head = Buffer.alloc(10);
  head[0] = first;
  head[1] = 127;
  head.writeBigUInt64BE(BigInt(length), 2);
  return head;
}

/** A hello whose argv is `count` empty strings, as the MessagePack bytes before and after the items (`count` bytes of 0xa0). */
function helloWithArgv(count: number): [Buffer, Buffer] {
  const whole = pack({ type: "hello", version: 1, process: { ...PROCESS, argv: [] }, stdout: 0, stderr: 0 });
  const marker = Buffer.from([0xa4, ...Buffer.from("argv"), 0x90]);
  const at = whole.indexOf(marker) + marker.length - 1;
  const head = Buffer.alloc(5);
  head[0] = 0xdd;
  head.writeUInt32BE(count, 1);
  return [Buffer.concat([whole.subarray(0, at), head]), whole.subarray(at + 1)];
}

/** One connection of the fake server. */
export class Peer {
  private buffer = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  private closed = false;
  private readonly gone: Promise<void>;

  constructor(readonly socket: Socket) {
    this.gone = new Promise((resolve) => socket.once("close", () => resolve()));
    socket.on("data", (data: Buffer) => {
      // Heads are small; what follows an upgrade is read and dropped.
      if (this.buffer.length < 1 << 20) this.buffer = Buffer.concat([this.buffer, data]);
      this.wake?.();
    });
    socket.on("close", () => {
      this.closed = true;
      this.wake?.();
    });
    socket.on("error", () => {});
  }

  /** Reads one request head: its target and its headers (names in lower case). */
  async head(): Promise<{ target: string; headers: Record<string, string> }> {
    for (;;) {
      const end = this.buffer.indexOf("\r\n\r\n");
      if (end >= 0) {
        const lines = this.buffer.subarray(0, end).toString("latin1").split("\r\n");
        this.buffer = this.buffer.subarray(end + 4);
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const colon = line.indexOf(":");
          if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
        }
        return { target: lines[0]!.split(" ")[1] ?? "/", headers };
      }
      if (this.closed) throw new Error("the client went away");
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Writes, waiting while the socket's buffer is full; throws once the client has gone. */
  async send(data: Uint8Array): Promise<void> {
    if (this.closed) throw new Error("the client went away");
    if (this.socket.write(data)) return;
    await Promise.race([new Promise<void>((resolve) => this.socket.once("drain", () => resolve())), this.gone]);
    if (this.closed) throw new Error("the client went away");
  }

  message(payload: Uint8Array): Promise<void> {
    return this.send(wsFrame(2, payload));
  }

  frame(value: object): Promise<void> {
    return this.message(pack(value));
  }

  /** Waits (reading and dropping) until the client goes away. */
  hold(): Promise<void> {
    return this.gone;
  }
}

type Act = (peer: Peer, target: string, server: HostileServer) => Promise<void>;

const query = (target: string) => new URL(target, "http://x").searchParams;

/** A valid hello, and the input_ack that numbered input (`input=`) waits for. */
async function hello(peer: Peer, target: string): Promise<void> {
  await peer.frame({ type: "hello", version: 1, process: PROCESS, stdout: 0, stderr: 0 });
  if (query(target).has("input")) await peer.frame({ type: "input_ack", applied: 0 });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every act this fake server performs (`tcp_refused` needs no server: the suite gives a closed port). */
export const ACTS: Record<string, Act> = {
  async http_silent(peer) {
    await peer.hold();
  },
  async http_trickle(peer) {
    await peer.send(Buffer.from("HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000\r\n\r\n"));
    for (;;) {
      await peer.send(Buffer.from("["));
      await sleep(1000); // the act itself: a byte a second
    }
  },
  async http_endless_body(peer) {
    await peer.send(Buffer.from("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"));
    const data = Buffer.alloc(65536, "[");
    const chunk = Buffer.concat([Buffer.from(`${data.length.toString(16)}\r\n`), data, Buffer.from("\r\n")]);
    for (;;) await peer.send(chunk);
  },
  async http_endless_headers(peer) {
    await peer.send(Buffer.from("HTTP/1.1 200 OK\r\n"));
    const lines = Buffer.from(`x-filler: ${"a".repeat(88)}\r\n`.repeat(64));
    for (;;) await peer.send(lines);
  },
  async http_redirect_loop(peer, target, server) {
    for (;;) {
      await peer.send(Buffer.from(`HTTP/1.1 307 Temporary Redirect\r\nlocation: ${target}\r\ncontent-length: 0\r\n\r\n`));
      ({ target } = await peer.head());
      server.requests += 1;
    }
  },
  async ws_silent(peer) {
    await peer.hold();
  },
  async ws_hello_then_close(peer, target) {
    await hello(peer, target);
    await peer.send(wsFrame(8, Buffer.from([0x03, 0xe8])));
  },
  async ws_ping_flood(peer, target) {
    await hello(peer, target);
    peer.socket.pause(); // never reads
    const pings = Buffer.concat(Array.from({ length: 1024 }, () => wsFrame(9, Buffer.alloc(125, "p"))));
    for (;;) await peer.send(pings);
  },
  async ws_huge_hello(peer) {
    const [before, after] = helloWithArgv(1_500_000);
    await peer.message(Buffer.concat([before, Buffer.alloc(1_500_000, 0xa0), after]));
    await peer.hold();
  },
  async ws_oversized_message(peer) {
    const count = 60_000_000;
    const [before, after] = helloWithArgv(count);
    await peer.send(Buffer.concat([wsHead(2, before.length + count + after.length), before]));
    const piece = Buffer.alloc(PIECE, 0xa0);
    for (let i = 0; i < Math.floor(count / PIECE); i++) await peer.send(piece);
    await peer.send(Buffer.concat([Buffer.alloc(count % PIECE, 0xa0), after]));
    await peer.hold();
  },
  async ws_endless_fragments(peer, target) {
    await hello(peer, target);
    const piece = Buffer.alloc(65536);
    await peer.send(wsFrame(2, piece, false));
    const continuation = wsFrame(0, piece, false);
    for (;;) await peer.send(continuation);
  },
  async ws_deep_nesting(peer, target) {
    await hello(peer, target);
    await peer.message(Buffer.concat([Buffer.alloc(2_000_000, 0x91), Buffer.from([0xc0])]));
    await peer.hold();
  },
  async ws_text_frame(peer, target) {
    await hello(peer, target);
    await peer.send(wsFrame(1, Buffer.from("hello")));
    await peer.hold();
  },
  async ws_unsolicited_screen(peer, target) {
    await hello(peer, target);
    await peer.frame({ type: "stdout", offset: 0, data: Buffer.from("abc") });
    await peer.frame({ type: "screen", offset: 3, cols: 80, rows: 24, data: Buffer.from("SCREEN") });
    await peer.frame({ type: "exit", process: exited(3) });
    await peer.hold();
  },
  async ws_dropped_past_2_64(peer, target) {
    const top = (1n << 64n) - 1n;
    await hello(peer, target);
    await peer.frame({ type: "dropped", stream: "stdout", offset: 0, length: top });
    await peer.frame({ type: "stdout", offset: top, data: Buffer.from("wrapped") });
    await peer.frame({ type: "exit", process: exited(7) });
    await peer.hold();
  },
  async ws_offset_backwards(peer, target) {
    await hello(peer, target);
    await peer.frame({ type: "stdout", offset: 0, data: Buffer.from("abc") });
    await peer.frame({ type: "stdout", offset: 1, data: Buffer.from("bc") });
    await peer.frame({ type: "exit", process: exited(3) });
    await peer.hold();
  },
  async ws_data_beyond_credit(peer, target) {
    const size = 2 * Number(query(target).get("window")) + 1;
    await hello(peer, target);
    await peer.frame({ type: "stdout", offset: 0, data: Buffer.alloc(size, "x") });
    await peer.frame({ type: "exit", process: exited(size) });
    await peer.hold();
  },
};

/** Serves one act on an ephemeral loopback port. */
export class HostileServer {
  /** Request heads read so far (HTTP requests and WebSocket upgrades). */
  requests = 0;
  url = "";
  private readonly server: Server;
  private readonly sockets = new Set<Socket>();

  constructor(readonly act: string) {
    const perform = ACTS[act];
    if (!perform) throw new Error(`no act ${act}`);
    this.server = createServer((socket) => {
      this.sockets.add(socket);
      socket.once("close", () => this.sockets.delete(socket));
      void this.serve(new Peer(socket), perform).catch(() => {}).finally(() => socket.destroy());
    });
  }

  async start(): Promise<HostileServer> {
    this.url = `http://127.0.0.1:${await listenOnLoopback(this.server)}`;
    return this;
  }

  stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  private async serve(peer: Peer, perform: Act): Promise<void> {
    const { target, headers } = await peer.head();
    this.requests += 1;
    if ((headers.upgrade ?? "").toLowerCase() === "websocket") {
      const accept = createHash("sha1").update(`${headers["sec-websocket-key"]}${GUID}`).digest("base64");
      await peer.send(
        Buffer.from(
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            `Sec-WebSocket-Accept: ${accept}\r\nSec-WebSocket-Protocol: tether.v1\r\n\r\n`,
        ),
      );
      await perform(peer, target, this);
    } else if (this.act.startsWith("http_")) {
      await perform(peer, target, this);
    } else {
      // Beside a WebSocket act: a wait long-poll, a GET.
      await peer.hold();
    }
  }
}
