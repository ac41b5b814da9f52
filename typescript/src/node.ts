// The Node entry of @tether/client (the `node` export condition): the same
// library, with the `ws` package as WebSocket where the runtime has no
// global one (Node 20). Node 22 and later use their global WebSocket.

import WebSocket from "ws";
import { setDefaultWebSocket, type WebSocketConstructor } from "./websocket.js";

if (typeof (globalThis as { WebSocket?: unknown }).WebSocket !== "function") {
  setDefaultWebSocket(WebSocket as unknown as WebSocketConstructor);
}

export * from "./index.js";
