// The Node entry of @tether/client (the `node` export condition): the same
// library, with the `ws` package as WebSocket where the runtime has no
// global one (Node 20). Node 22 and later use their global WebSocket.

import WebSocket from "ws";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { setLocalTokenLookup } from "./client.js";
import { setDefaultWebSocket, type WebSocketConstructor } from "./websocket.js";

/**
 * Where tetherd writes a token it generated (the server's rule):
 * `$TETHER_TOKEN_FILE`, else `$XDG_RUNTIME_DIR/tether/token`, else
 * `~/.local/state/tether/token`.
 */
export function localTokenPath(): string {
  if (process.env.TETHER_TOKEN_FILE) return process.env.TETHER_TOKEN_FILE;
  if (process.env.XDG_RUNTIME_DIR) return join(process.env.XDG_RUNTIME_DIR, "tether", "token");
  return join(process.env.HOME || homedir(), ".local", "state", "tether", "token");
}

setLocalTokenLookup(() => {
  try {
    return readFileSync(localTokenPath(), "utf8").split("\n")[0]?.trim() || undefined;
  } catch {
    return undefined;
  }
});

if (typeof (globalThis as { WebSocket?: unknown }).WebSocket !== "function") {
  setDefaultWebSocket(WebSocket as unknown as WebSocketConstructor);
}

export * from "./index.js";
