// @tether/client: the TypeScript client of tetherd, for browsers and Node.
// This is the browser (default) entry; node.ts adds `ws` for Node 20.

export { DEFAULT_MAX_ANSWER_BYTES, EXEC_SILENCE_GRACE_MS, TetherClient, setLocalTokenLookup, type CallOptions, type ClientOptions, type MintedToken, type WaitOptions } from "./client.js";
export { Attachment, type AttachOptions, type AttachState, type Rejection } from "./attach.js";
export { OutputStream, concat, type Chunk, type StreamStats } from "./output.js";
export { type ExecOptions, type ExecResult } from "./exec.js";
export { DEFAULT_MAX_DOWNLOAD, type DownloadOptions, type UploadData, type UploadOptions } from "./files.js";
export {
  ClosedError,
  FileTooLargeError,
  FileTransferError,
  HttpError,
  InvalidArgumentError,
  isRefused,
  isTransient,
  ProtocolError,
  RetryBudgetExhaustedError,
  TetherError,
  TransportError,
} from "./errors.js";
export { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
export { setDefaultTransport, type HttpTransport, type TransportRequest, type TransportResponse } from "./transport.js";
export { setDefaultWebSocket, type WebSocketConstructor, type WebSocketLike } from "./websocket.js";
export * from "./protocol.js";
