// The tether.v1 wire protocol in TypeScript: the twin of the Rust crate
// `tether-protocol` (protocol/src/frame.rs, process.rs). No IO here, so the
// module works in a browser and in node alike.
//
// Every binary WebSocket message is one MessagePack map with a string field
// `type`. Bytes travel as MessagePack bin (Uint8Array here). Offsets and
// counts are u64 on the wire; JavaScript numbers are exact up to 2^53 - 1,
// far beyond any stream a browser will see, so they are normalised to
// `number` and anything larger is rejected rather than silently rounded.
//
// protocol/vectors/frames.json pins the encoding: the encoder below must
// produce the same bytes as the Rust one, so maps are written with `type`
// first and then the fields in Rust declaration order, and integers in the
// smallest MessagePack width (which is what @msgpack/msgpack does).

import { Decoder, Encoder } from "@msgpack/msgpack";

/** The WebSocket subprotocol name. */
export const SUBPROTOCOL = "tether.v1";
/** The protocol version carried in the `hello` frame. */
export const PROTOCOL_VERSION = 1;

/** An output stream. A PTY's whole output is `stdout`. */
export type StreamName = "stdout" | "stderr";
/** `exited` means reaped *and* output fully captured. */
export type ProcessStatus = "running" | "exited";
/** Why a process ended: `timeout` only when the server's deadline fired, `killed` for a kill request and shutdown, `unattached` when its `unattached_timeout_ms` passed with nobody attached, `lost` when a restarted server read it back from its data directory, `oom` when the kernel's OOM killer ended a member at its memory limit. */
export type ExitReason = "exit" | "signal" | "timeout" | "killed" | "unattached" | "lost" | "oom";

/** Resource limits of a process and everything it forks (protocol/src/resources.rs `Limits`); each optional. */
export interface Limits {
  /** Memory in bytes (`memory.max`, no swap); past it the OOM killer ends it, reason `oom`. */
  memory_bytes?: number;
  /** A share of CPUs as `docker --cpus` (`cpu.max`): 0.5 is half of one CPU. */
  cpus?: number;
  /** Most tasks (processes and threads) at once (`pids.max`); past it fork fails. */
  pids?: number;
  /** A soft memory limit in bytes (`memory.high`, cgroup v2 only): slowed, never killed. */
  memory_high_bytes?: number;
}

/** What a process and everything it forked used: live while it runs, final at its exit. */
export interface Usage {
  /** CPU seconds in user mode. */
  cpu_user_s: number;
  /** CPU seconds in the kernel on its behalf. */
  cpu_system_s: number;
  /** The most memory its cgroup held at once, in bytes. */
  memory_peak_bytes: number;
  /** The most tasks (processes and threads) at once. */
  processes: number;
  /** Bytes read from block devices, where the kernel accounts it. */
  io_read_bytes?: number;
  /** Bytes written to block devices, where the kernel accounts it. */
  io_write_bytes?: number;
}
/** What a full retention does: evict the oldest bytes (`drop`) or pace the program (`block`). */
export type Overflow = "drop" | "block";

/** The process object of HTTP responses, `hello` and `exit` frames. */
export interface ProcessInfo {
  /** Server-assigned id used in URLs. */
  id: string;
  /** The name given at spawn, if any. */
  name?: string;
  /** OS pid of the session leader. */
  pid: number;
  /** What was executed (`["/bin/sh", "-c", TEXT]` for a `command`). */
  argv: string[];
  /** Runs on a PTY (one output stream, `stdout`). */
  tty: boolean;
  /** What a full retention does. */
  overflow: Overflow;
  /** `exited` = reaped and output capture complete. */
  status: ProcessStatus;
  /** RFC 3339 UTC with milliseconds. */
  started_at: string;
  /** The program's own code for `exit`, 128+N for a signal death, 124 for `timeout`. */
  exit_code: number | null;
  /** Name (no `SIG`) of the signal that ended it. */
  signal: string | null;
  /** Why it ended, once exited. */
  reason: ExitReason | null;
  /** The moment it counted as exited. */
  finished_at: string | null;
  /** Monotonic spawn-to-reap time. */
  duration_ms: number | null;
  /** Total bytes written to stdout so far, retained or not. */
  stdout_bytes: number;
  /** Total bytes written to stderr so far, retained or not. */
  stderr_bytes: number;
  /** A descendant held an output open past the server's drain bound. */
  output_incomplete: boolean;
  /**
   * RFC 3339 UTC with milliseconds: when the oldest retained byte (either
   * stream) was written, from the server's time index (at most one mark's
   * spacing early). Absent with nothing retained or no time known.
   */
  first_retained_at?: string;
  /** When the newest retained byte was written; absent as `first_retained_at` is. */
  last_retained_at?: string;
  /** True when its input is recorded (the spawn's `record_input`): what is typed into it shows in its recording. Absent when false. */
  records_input?: boolean;
  /** The resource limits applied; absent when none. */
  limits?: Limits;
  /** What it used; absent where the server cannot account (session containment). */
  usage?: Usage;
  /** It hit its `pids` limit (a fork failed); absent otherwise. */
  pids_limit_hit?: boolean;
}

/** Frames the server sends. */
export type ServerFrame =
  | { type: "hello"; version: number; process: ProcessInfo; stdout: number; stderr: number }
  | { type: "stdout"; offset: number; data: Uint8Array }
  | { type: "stderr"; offset: number; data: Uint8Array }
  | { type: "dropped"; stream: StreamName; offset: number; length: number }
  | { type: "screen"; offset: number; cols: number; rows: number; data: Uint8Array }
  | { type: "input_ack"; applied: number }
  | { type: "exit"; process: ProcessInfo }
  | { type: "error"; code: string; message: string };

/**
 * What a numbered `input` frame does (attach with `input=ID`): the same as
 * the unnumbered frame of the same `type`. Stdin takes one sequence unit
 * per byte, every other action one.
 */
export type InputAction =
  | { type: "stdin"; data: Uint8Array }
  | { type: "stdin_eof" }
  | { type: "signal"; signal: string }
  | { type: "resize"; cols: number; rows: number };

/** Units of the input sequence an action takes. */
export function inputUnits(action: InputAction): number {
  return action.type === "stdin" ? action.data.length : 1;
}

/** Frames a client sends. */
export type ClientFrame =
  | { type: "stdin"; data: Uint8Array }
  | { type: "stdin_eof" }
  | { type: "signal"; signal: string }
  | { type: "resize"; cols: number; rows: number }
  | { type: "input"; seq: number; action: InputAction }
  | { type: "credit"; stream: StreamName; bytes: number };

/** A data frame of either stream. */
export type DataFrame = Extract<ServerFrame, { type: StreamName }>;

/**
 * Body of `POST /v1/processes` (protocol/src/api.rs `SpawnRequest`). The
 * server rejects unknown fields with 400, so send only these.
 */
export interface SpawnRequest {
  /** Program and arguments, executed directly. Give this or `command`. */
  argv?: string[];
  /** A shell command line, run by `/bin/sh -c`. Give this or `argv`. */
  command?: string;
  /** Variables added to the server's environment. */
  env?: Record<string, string>;
  /** Working directory. */
  cwd?: string;
  /** Deadline in milliseconds: the whole session is killed, reason `timeout`, exit code 124. */
  timeout_ms?: number;
  /** Run on a PTY. */
  tty?: boolean;
  /** PTY width (1..4096, default 80). */
  cols?: number;
  /** PTY height (1..4096, default 24). */
  rows?: number;
  /** Retention per stream in bytes (the server's default when absent). */
  retain_bytes?: number;
  /** Give the process a stdin (default: `/dev/null`; always on for a PTY). */
  stdin?: boolean;
  /** `drop` (default) or `block`. */
  overflow?: Overflow;
  /** A name unique among the server's known processes, usable wherever the id is. */
  name?: string;
  /** End the process (reason `unattached`) once it has had no attachment this long (ms), counted afresh from each detach; 0 or absent: never. */
  unattached_timeout_ms?: number;
  /** Resource limits; each absent one is the server's default. */
  limits?: Limits;
  /**
   * Run beside this process (an id or a name): as its user and group, in
   * its working directory (its current one while it runs, read from
   * `/proc`, so a shell's `cd` counts; else the one it started in). `cwd`
   * still wins over the directory; the server refuses it with `user` or
   * `group` (400) and for an unknown process (404), and only the
   * operator's token may spawn (a scoped one gets 403). The client's
   * `upload` and `download` run their `sh` and `cat` so.
   */
  beside?: string;
  /** Record what is written to its stdin as the `i` events of its recording (default false: keystrokes include passwords). */
  record_input?: boolean;
}

/** Why a frame could not be decoded; mirrors the Rust `DecodeError`. */
export class FrameDecodeError extends Error {
  constructor(
    /** `malformed_frame`, `unknown_type` or `invalid_frame`, as in Rust. */
    readonly code: "malformed_frame" | "unknown_type" | "invalid_frame",
    message: string,
  ) {
    super(message);
    this.name = "FrameDecodeError";
  }
}

/**
 * The most items (array elements and map entries, all levels together) a
 * frame may hold, counted from its MessagePack headers before it is
 * decoded, as the Rust decoder counts them: a frame's size alone does not
 * bound what it decodes into (a megabyte of empty strings is a million of
 * them). 2^20 is past any argv the kernel runs and any process object
 * tetherd sends.
 */
export const MAX_ITEMS = 1 << 20;
/** The deepest nesting of a decoded frame (a frame nests three levels); deeper is a `malformed_frame`, found before anything is decoded. */
export const MAX_DEPTH = 1024;

// One encoder and decoder for the module: both are reusable and keep an
// internal buffer, which saves an allocation per frame on the hot path.
const encoder = new Encoder();
// useBigInt64 makes u64 values arrive as bigint, so a value above 2^53 is
// detected in `u64` below instead of being rounded by the decoder.
const decoder = new Decoder({ useBigInt64: true, maxArrayLength: MAX_ITEMS, maxMapLength: MAX_ITEMS });

/**
 * Throws when the MessagePack value at the start of `data` holds more than
 * {@link MAX_ITEMS} items or nests deeper than {@link MAX_DEPTH}, read from
 * its headers alone: nothing is decoded, and a count declared is counted
 * whether or not its items follow. The decoder would otherwise allocate
 * per item and keep a state per open level (tens of bytes each: two
 * megabytes of one-item arrays cost hundreds of megabytes). What is
 * malformed otherwise is left to the decoder to report.
 */
function checkShape(data: Uint8Array): void {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  /** Items still to come in each open container, innermost last. */
  const open: number[] = [];
  let items = 0;
  let at = 0;
  while (at < data.length) {
    const b = data[at]!;
    let head = 1;
    let skip = 0;
    let begun = 0;
    let perItem = 0;
    const need = (n: number) => at + n <= data.length;
    if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) {
      // fixint, nil, booleans
    } else if (b <= 0x8f) [begun, perItem] = [b & 0x0f, 2];
    else if (b <= 0x9f) [begun, perItem] = [b & 0x0f, 1];
    else if (b <= 0xbf) skip = b & 0x1f;
    else {
      switch (b) {
        case 0xc4: case 0xd9: if (!need(2)) return; head = 2; skip = data[at + 1]!; break;
        case 0xc5: case 0xda: if (!need(3)) return; head = 3; skip = view.getUint16(at + 1); break;
        case 0xc6: case 0xdb: if (!need(5)) return; head = 5; skip = view.getUint32(at + 1); break;
        case 0xc7: if (!need(2)) return; head = 3; skip = data[at + 1]!; break;
        case 0xc8: if (!need(3)) return; head = 4; skip = view.getUint16(at + 1); break;
        case 0xc9: if (!need(5)) return; head = 6; skip = view.getUint32(at + 1); break;
        case 0xcc: case 0xd0: skip = 1; break;
        case 0xcd: case 0xd1: skip = 2; break;
        case 0xca: case 0xce: case 0xd2: skip = 4; break;
        case 0xcb: case 0xcf: case 0xd3: skip = 8; break;
        case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: skip = 1 + (1 << (b - 0xd4)); break;
        case 0xdc: if (!need(3)) return; head = 3; [begun, perItem] = [view.getUint16(at + 1), 1]; break;
        case 0xdd: if (!need(5)) return; head = 5; [begun, perItem] = [view.getUint32(at + 1), 1]; break;
        case 0xde: if (!need(3)) return; head = 3; [begun, perItem] = [view.getUint16(at + 1), 2]; break;
        case 0xdf: if (!need(5)) return; head = 5; [begun, perItem] = [view.getUint32(at + 1), 2]; break;
        default: return; // 0xc1, never used: the decoder refuses it
      }
    }
    items += begun;
    if (items > MAX_ITEMS) {
      throw new FrameDecodeError("invalid_frame", `invalid frame: it holds ${items} or more items (array elements and map entries); the most a frame may hold is ${MAX_ITEMS}`);
    }
    at += head + skip;
    if (open.length > 0) open[open.length - 1]! -= 1;
    if (begun > 0) {
      open.push(begun * perItem);
      if (open.length > MAX_DEPTH) throw new FrameDecodeError("malformed_frame", `malformed frame: nested deeper than ${MAX_DEPTH} levels`);
    }
    while (open.length > 0 && open[open.length - 1] === 0) open.pop();
    if (open.length === 0) return;
  }
}

type Fields = Record<string, unknown>;

function invalid(kind: string, message: string): never {
  throw new FrameDecodeError("invalid_frame", `invalid ${kind} frame: ${message}`);
}

function u64(kind: string, name: string, value: unknown): number {
  if (typeof value === "bigint") {
    if (value < 0n || value > BigInt(Number.MAX_SAFE_INTEGER)) {
      invalid(kind, `${name} ${value} is out of the supported range (0 to 2^53-1)`);
    }
    return Number(value);
  }
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    invalid(kind, `${name} must be an unsigned integer`);
  }
  return value;
}

function int(kind: string, name: string, value: unknown): number {
  if (typeof value === "bigint") return u64(kind, name, value);
  if (typeof value !== "number" || !Number.isSafeInteger(value)) {
    invalid(kind, `${name} must be an integer`);
  }
  return value;
}

function str(kind: string, name: string, value: unknown): string {
  if (typeof value !== "string") invalid(kind, `${name} must be a string`);
  return value;
}

function bool(kind: string, name: string, value: unknown): boolean {
  if (typeof value !== "boolean") invalid(kind, `${name} must be a boolean`);
  return value;
}

function bytes(kind: string, name: string, value: unknown): Uint8Array {
  if (!(value instanceof Uint8Array)) invalid(kind, `${name} must be bin`);
  return value;
}

function oneOf<T extends string>(kind: string, name: string, value: unknown, allowed: readonly T[]): T {
  if (typeof value !== "string" || !(allowed as readonly string[]).includes(value)) {
    invalid(kind, `${name} must be one of ${allowed.join(", ")}`);
  }
  return value as T;
}

// Option<T> fields: Rust's serde treats an absent one as None, so do we.
function nullable<T>(value: unknown, parse: (v: unknown) => T): T | null {
  return value === null || value === undefined ? null : parse(value);
}

const STREAMS = ["stdout", "stderr"] as const;

/** Validates a process object (from MessagePack or JSON), fields in wire order. */
export function parseProcess(value: unknown, kind = "process"): ProcessInfo {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    invalid(kind, "process must be a map");
  }
  const p = value as Fields;
  const argv = p.argv;
  if (!Array.isArray(argv)) invalid(kind, "argv must be an array");
  return {
    id: str(kind, "id", p.id),
    ...(p.name === undefined ? {} : { name: str(kind, "name", p.name) }),
    pid: u64(kind, "pid", p.pid),
    argv: argv.map((a) => str(kind, "argv", a)),
    tty: bool(kind, "tty", p.tty),
    overflow: oneOf(kind, "overflow", p.overflow, ["drop", "block"] as const),
    status: oneOf(kind, "status", p.status, ["running", "exited"] as const),
    started_at: str(kind, "started_at", p.started_at),
    exit_code: nullable(p.exit_code, (v) => int(kind, "exit_code", v)),
    signal: nullable(p.signal, (v) => str(kind, "signal", v)),
    reason: nullable(p.reason, (v) => oneOf(kind, "reason", v, ["exit", "signal", "timeout", "killed", "unattached", "lost", "oom"] as const)),
    finished_at: nullable(p.finished_at, (v) => str(kind, "finished_at", v)),
    duration_ms: nullable(p.duration_ms, (v) => u64(kind, "duration_ms", v)),
    stdout_bytes: u64(kind, "stdout_bytes", p.stdout_bytes),
    stderr_bytes: u64(kind, "stderr_bytes", p.stderr_bytes),
    output_incomplete: bool(kind, "output_incomplete", p.output_incomplete),
    ...(p.first_retained_at === undefined ? {} : { first_retained_at: str(kind, "first_retained_at", p.first_retained_at) }),
    ...(p.last_retained_at === undefined ? {} : { last_retained_at: str(kind, "last_retained_at", p.last_retained_at) }),
    ...(p.records_input === undefined ? {} : { records_input: bool(kind, "records_input", p.records_input) }),
    ...(p.limits === undefined ? {} : { limits: parseLimits(kind, p.limits) }),
    ...(p.usage === undefined ? {} : { usage: parseUsage(kind, p.usage) }),
    ...(p.pids_limit_hit === undefined ? {} : { pids_limit_hit: bool(kind, "pids_limit_hit", p.pids_limit_hit) }),
  };
}

function number(kind: string, name: string, value: unknown): number {
  if (typeof value === "bigint") return u64(kind, name, value);
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    invalid(kind, `${name} must be a non-negative number`);
  }
  return value;
}

function map(kind: string, name: string, value: unknown): Fields {
  if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Uint8Array) {
    invalid(kind, `${name} must be a map`);
  }
  return value as Fields;
}

/** Validates `limits`, fields in wire order (each optional). */
function parseLimits(kind: string, value: unknown): Limits {
  const l = map(kind, "limits", value);
  return {
    ...(l.memory_bytes === undefined ? {} : { memory_bytes: u64(kind, "limits.memory_bytes", l.memory_bytes) }),
    ...(l.cpus === undefined ? {} : { cpus: number(kind, "limits.cpus", l.cpus) }),
    ...(l.pids === undefined ? {} : { pids: u64(kind, "limits.pids", l.pids) }),
    ...(l.memory_high_bytes === undefined ? {} : { memory_high_bytes: u64(kind, "limits.memory_high_bytes", l.memory_high_bytes) }),
  };
}

/** Validates `usage`, fields in wire order. */
function parseUsage(kind: string, value: unknown): Usage {
  const u = map(kind, "usage", value);
  return {
    cpu_user_s: number(kind, "usage.cpu_user_s", u.cpu_user_s),
    cpu_system_s: number(kind, "usage.cpu_system_s", u.cpu_system_s),
    memory_peak_bytes: u64(kind, "usage.memory_peak_bytes", u.memory_peak_bytes),
    processes: u64(kind, "usage.processes", u.processes),
    ...(u.io_read_bytes === undefined ? {} : { io_read_bytes: u64(kind, "usage.io_read_bytes", u.io_read_bytes) }),
    ...(u.io_write_bytes === undefined ? {} : { io_write_bytes: u64(kind, "usage.io_write_bytes", u.io_write_bytes) }),
  };
}

// Step one of decoding, as in Rust: a map with a string `type`, or malformed.
function decodeMap(input: Uint8Array | ArrayBuffer): { kind: string; f: Fields } {
  checkShape(input instanceof Uint8Array ? input : new Uint8Array(input));
  let value: unknown;
  try {
    value = decoder.decode(input);
  } catch (e) {
    throw new FrameDecodeError("malformed_frame", `malformed frame: ${(e as Error).message}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value) || value instanceof Uint8Array) {
    throw new FrameDecodeError("malformed_frame", "malformed frame: not a map");
  }
  const kind = (value as Fields).type;
  if (typeof kind !== "string") {
    throw new FrameDecodeError("malformed_frame", "malformed frame: no string field `type`");
  }
  return { kind, f: value as Fields };
}

/** Decodes one message sent by a server. Throws {@link FrameDecodeError}. */
export function decodeServerFrame(input: Uint8Array | ArrayBuffer): ServerFrame {
  const { kind, f } = decodeMap(input);
  switch (kind) {
    case "hello":
      return {
        type: "hello",
        version: u64(kind, "version", f.version),
        process: parseProcess(f.process, kind),
        stdout: u64(kind, "stdout", f.stdout),
        stderr: u64(kind, "stderr", f.stderr),
      };
    case "stdout":
    case "stderr":
      return { type: kind, offset: u64(kind, "offset", f.offset), data: bytes(kind, "data", f.data) };
    case "dropped":
      return {
        type: "dropped",
        stream: oneOf(kind, "stream", f.stream, STREAMS),
        offset: u64(kind, "offset", f.offset),
        length: u64(kind, "length", f.length),
      };
    case "screen":
      return {
        type: "screen",
        offset: u64(kind, "offset", f.offset),
        cols: u64(kind, "cols", f.cols),
        rows: u64(kind, "rows", f.rows),
        data: bytes(kind, "data", f.data),
      };
    case "input_ack":
      return { type: "input_ack", applied: u64(kind, "applied", f.applied) };
    case "exit":
      return { type: "exit", process: parseProcess(f.process, kind) };
    case "error":
      return { type: "error", code: str(kind, "code", f.code), message: str(kind, "message", f.message) };
    default:
      throw new FrameDecodeError("unknown_type", `unknown frame type ${JSON.stringify(kind)}`);
  }
}

/** Decodes one message sent by a client (what a server or test peer needs). */
export function decodeClientFrame(input: Uint8Array | ArrayBuffer): ClientFrame {
  const { kind, f } = decodeMap(input);
  switch (kind) {
    case "stdin":
      return { type: "stdin", data: bytes(kind, "data", f.data) };
    case "stdin_eof":
      return { type: "stdin_eof" };
    case "signal":
      return { type: "signal", signal: str(kind, "signal", f.signal) };
    case "resize":
      return { type: "resize", cols: u64(kind, "cols", f.cols), rows: u64(kind, "rows", f.rows) };
    case "input":
      return { type: "input", seq: u64(kind, "seq", f.seq), action: parseAction(f.action) };
    case "credit":
      return { type: "credit", stream: oneOf(kind, "stream", f.stream, STREAMS), bytes: u64(kind, "bytes", f.bytes) };
    default:
      throw new FrameDecodeError("unknown_type", `unknown frame type ${JSON.stringify(kind)}`);
  }
}

function parseAction(value: unknown): InputAction {
  const kind = "input";
  if (typeof value !== "object" || value === null || Array.isArray(value)) invalid(kind, "action must be a map");
  const a = value as Fields;
  switch (a.type) {
    case "stdin":
      return { type: "stdin", data: bytes(kind, "data", a.data) };
    case "stdin_eof":
      return { type: "stdin_eof" };
    case "signal":
      return { type: "signal", signal: str(kind, "signal", a.signal) };
    case "resize":
      return { type: "resize", cols: u64(kind, "cols", a.cols), rows: u64(kind, "rows", a.rows) };
    default:
      invalid(kind, "action type must be stdin, stdin_eof, signal or resize");
  }
}

// The object literals below spell out every field in Rust declaration order:
// @msgpack/msgpack writes keys in insertion order, and that order is part of
// the byte-exact contract with the Rust encoder.
function orderedProcess(p: ProcessInfo): ProcessInfo {
  return {
    id: p.id,
    ...(p.name === undefined ? {} : { name: p.name }),
    pid: p.pid,
    argv: p.argv,
    tty: p.tty,
    overflow: p.overflow,
    status: p.status,
    started_at: p.started_at,
    exit_code: p.exit_code ?? null,
    signal: p.signal ?? null,
    reason: p.reason ?? null,
    finished_at: p.finished_at ?? null,
    duration_ms: p.duration_ms ?? null,
    stdout_bytes: p.stdout_bytes,
    stderr_bytes: p.stderr_bytes,
    output_incomplete: p.output_incomplete,
    ...(p.first_retained_at === undefined ? {} : { first_retained_at: p.first_retained_at }),
    ...(p.last_retained_at === undefined ? {} : { last_retained_at: p.last_retained_at }),
    ...(p.records_input ? { records_input: true } : {}),
    ...(p.limits === undefined ? {} : { limits: parseLimits("process", p.limits) }),
    ...(p.usage === undefined ? {} : { usage: parseUsage("process", p.usage) }),
    ...(p.pids_limit_hit ? { pids_limit_hit: true } : {}),
  };
}

function orderedServer(f: ServerFrame): object {
  switch (f.type) {
    case "hello":
      return { type: f.type, version: f.version, process: orderedProcess(f.process), stdout: f.stdout, stderr: f.stderr };
    case "stdout":
    case "stderr":
      return { type: f.type, offset: f.offset, data: f.data };
    case "dropped":
      return { type: f.type, stream: f.stream, offset: f.offset, length: f.length };
    case "screen":
      return { type: f.type, offset: f.offset, cols: f.cols, rows: f.rows, data: f.data };
    case "input_ack":
      return { type: f.type, applied: f.applied };
    case "exit":
      return { type: f.type, process: orderedProcess(f.process) };
    case "error":
      return { type: f.type, code: f.code, message: f.message };
  }
}

function orderedClient(f: ClientFrame): object {
  switch (f.type) {
    case "input":
      return { type: f.type, seq: f.seq, action: orderedClient(f.action) };
    case "stdin":
      return { type: f.type, data: f.data };
    case "stdin_eof":
      return { type: f.type };
    case "signal":
      return { type: f.type, signal: f.signal };
    case "resize":
      return { type: f.type, cols: f.cols, rows: f.rows };
    case "credit":
      return { type: f.type, stream: f.stream, bytes: f.bytes };
  }
}

/** MessagePack bytes of a client frame, identical to the Rust encoding. */
export function encodeClientFrame(frame: ClientFrame): Uint8Array<ArrayBuffer> {
  // encode() copies out of the encoder's buffer into a fresh ArrayBuffer.
  return encoder.encode(orderedClient(frame)) as Uint8Array<ArrayBuffer>;
}

/** MessagePack bytes of a server frame, identical to the Rust encoding. */
export function encodeServerFrame(frame: ServerFrame): Uint8Array<ArrayBuffer> {
  return encoder.encode(orderedServer(frame)) as Uint8Array<ArrayBuffer>;
}
