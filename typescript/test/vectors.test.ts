// Decodes and re-encodes every vector of protocol/vectors/frames.json, the
// same file the Rust protocol crate tests against, so that the TypeScript
// and Rust implementations of tether.v1 cannot drift apart.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  decodeClientFrame,
  decodeServerFrame,
  encodeClientFrame,
  encodeServerFrame,
  FrameDecodeError,
  type ClientFrame,
  type ServerFrame,
} from "@tether/client";

interface Vector {
  name: string;
  direction: "server" | "client";
  hex: string;
  frame: unknown;
}

// Compiled to typescript/test-dist/, so the repository root is two levels up.
const vectorsUrl = new URL("../../protocol/vectors/frames.json", import.meta.url);
const vectors: Vector[] = JSON.parse(readFileSync(vectorsUrl, "utf8"));

const fromHex = (hex: string): Uint8Array => Uint8Array.from(hex.match(/../g) ?? [], (b) => parseInt(b, 16));
const toHex = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

// The JSON form of a decoded frame: bytes as {"$bin": hex}, as in the file.
function toJson(value: unknown): unknown {
  if (value instanceof Uint8Array) return { $bin: toHex(value) };
  if (Array.isArray(value)) return value.map(toJson);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, toJson(v)]));
  }
  return value;
}

// The inverse, for building a frame from its JSON meaning.
function fromJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(fromJson);
  if (value && typeof value === "object") {
    const entries = Object.entries(value);
    if (entries.length === 1 && entries[0]![0] === "$bin") return fromHex(entries[0]![1] as string);
    return Object.fromEntries(entries.map(([k, v]) => [k, fromJson(v)]));
  }
  return value;
}

test("the vector file covers every frame type of both directions", () => {
  const seen = new Set(vectors.map((v) => `${v.direction}:${(v.frame as { type: string }).type}`));
  for (const t of ["hello", "stdout", "stderr", "dropped", "screen", "input_ack", "exit", "error"]) assert.ok(seen.has(`server:${t}`), t);
  for (const t of ["stdin", "stdin_eof", "signal", "resize", "input", "credit"]) assert.ok(seen.has(`client:${t}`), t);
  assert.ok(vectors.some((v) => v.frame && (v.frame as { offset?: number }).offset === Number.MAX_SAFE_INTEGER));
});

for (const v of vectors) {
  test(`vector ${v.name}`, () => {
    const bytes = fromHex(v.hex);
    const decoded = v.direction === "server" ? decodeServerFrame(bytes) : decodeClientFrame(bytes);
    // Same meaning, and the same key order (JSON.stringify keeps order).
    assert.deepStrictEqual(toJson(decoded), v.frame);
    assert.equal(JSON.stringify(toJson(decoded)), JSON.stringify(v.frame));
    // Re-encoding the decoded frame gives back the exact bytes.
    const again = v.direction === "server" ? encodeServerFrame(decoded as ServerFrame) : encodeClientFrame(decoded as ClientFrame);
    assert.equal(toHex(again), v.hex);
    // Encoding the frame built from the JSON meaning gives the bytes too.
    const built = fromJson(v.frame);
    const encoded = v.direction === "server" ? encodeServerFrame(built as ServerFrame) : encodeClientFrame(built as ClientFrame);
    assert.equal(toHex(encoded), v.hex);
  });
}

test("decode errors carry the same codes as the Rust decoder", () => {
  const code = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      assert.ok(e instanceof FrameDecodeError);
      return e.code;
    }
    assert.fail("no error");
  };
  // Truncated MessagePack, a non-map, a map without `type`.
  assert.equal(code(() => decodeServerFrame(fromHex("83a474797065"))), "malformed_frame");
  assert.equal(code(() => decodeServerFrame(fromHex("93010203"))), "malformed_frame");
  assert.equal(code(() => decodeServerFrame(fromHex("81a16101"))), "malformed_frame");
  // {"type":"bogus"}
  assert.equal(code(() => decodeServerFrame(fromHex("81a474797065a5626f677573"))), "unknown_type");
  // A client frame type is unknown to the server-frame decoder and vice versa.
  assert.equal(code(() => decodeServerFrame(encodeClientFrame({ type: "stdin_eof" }))), "unknown_type");
  // {"type":"stdout","offset":"x","data":bin} has a bad field.
  assert.equal(code(() => decodeServerFrame(fromHex("83a474797065a67374646f7574a66f6666736574a178a464617461c400"))), "invalid_frame");
  // An offset of 2^53 cannot be represented exactly: rejected, not rounded.
  assert.equal(code(() => decodeServerFrame(fromHex("83a474797065a67374646f7574a66f6666736574cf0020000000000000a464617461c400"))), "invalid_frame");
});

test("ArrayBuffer input (WebSocket binaryType arraybuffer) decodes too", () => {
  const bytes = fromHex(vectors.find((v) => v.name === "stdout_text")!.hex);
  const frame = decodeServerFrame(bytes.slice().buffer);
  assert.equal(frame.type, "stdout");
  assert.equal(new TextDecoder().decode((frame as { data: Uint8Array }).data), "hello\r\n");
});
