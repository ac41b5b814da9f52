// Files (issue 49): a file dropped on the terminal is uploaded into the
// session's working directory, and "download" saves a file the person
// names, as the session sees it. Both run a process beside the session
// (TetherClient.upload and downloadStream: the spawn request's `beside`,
// so the session's user and its current directory), with the progress
// shown in the status line. Only the operator spawns: on a shared link the
// page says that files need the operator's token. No zmodem or trzsz: the
// server moves files itself.

import { HttpError, type TetherClient } from "@tether/client";

/** What the tests read: what went through, and the last error. */
export interface FilesState {
  uploaded: string[];
  downloaded: string[];
  error: string;
}

export interface FilesUi {
  /** Where files are dropped (the terminal's pane). */
  pane: HTMLElement;
  /** The "download" button. */
  download: HTMLButtonElement;
}

const MIB = 1 << 20;

function size(bytes: number): string {
  return bytes >= MIB ? `${(bytes / MIB).toFixed(1)} MiB` : `${Math.ceil(bytes / 1024)} KiB`;
}

/** A refusal said the way a person can act on it. */
function why(error: unknown): string {
  if (error instanceof HttpError && error.status === 403) {
    return "files need the operator's token: a shared link may not start the process that copies them";
  }
  return error instanceof Error ? error.message : String(error);
}

/** The bytes of `file`, counted into `progress` as they are read. */
async function* counted(file: Blob, progress: (sent: number) => void): AsyncIterable<Uint8Array> {
  const reader = file.stream().getReader();
  let sent = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    sent += value.length;
    progress(sent);
    yield value;
  }
}

export function installFiles(
  ui: FilesUi,
  client: TetherClient,
  session: () => string | undefined,
  say: (text: string, kind: "ok" | "warn" | "bad" | "idle") => void,
  state: FilesState,
): void {
  const fail = (what: string, error: unknown) => {
    state.error = why(error);
    say(`${what}: ${state.error}`, "bad");
  };

  ui.pane.addEventListener("dragover", (event) => {
    if (!event.dataTransfer?.types.includes("Files")) return;
    event.preventDefault();
    ui.pane.classList.add("dropping");
  });
  ui.pane.addEventListener("dragleave", () => ui.pane.classList.remove("dropping"));
  ui.pane.addEventListener("drop", (event) => {
    event.preventDefault();
    ui.pane.classList.remove("dropping");
    const id = session();
    const files = [...(event.dataTransfer?.files ?? [])];
    if (!id || files.length === 0) return;
    void (async () => {
      for (const file of files) {
        try {
          say(`uploading ${file.name} (${size(file.size)})…`, "idle");
          const data = counted(file, (sent) => say(`uploading ${file.name}: ${size(sent)} of ${size(file.size)}`, "idle"));
          await client.upload(id, file.name, data);
          state.uploaded.push(file.name);
          say(`uploaded ${file.name} (${size(file.size)}) into the session's directory`, "ok");
        } catch (error) {
          fail(`uploading ${file.name}`, error);
        }
      }
    })();
  });

  ui.download.addEventListener("click", () => {
    const id = session();
    if (!id) return;
    const path = prompt("Download which file? (a path as the session sees it: relative to its directory)")?.trim();
    if (!path) return;
    void (async () => {
      try {
        const parts: Uint8Array[] = [];
        let received = 0;
        for await (const chunk of client.downloadStream(id, path, { maxBytes: 1 << 30 })) {
          parts.push(chunk);
          received += chunk.length;
          say(`downloading ${path}: ${size(received)}`, "idle");
        }
        const link = document.createElement("a");
        link.href = URL.createObjectURL(new Blob(parts as BlobPart[]));
        link.download = path.split("/").filter(Boolean).pop() ?? "download";
        link.click();
        setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
        state.downloaded.push(path);
        say(`downloaded ${path} (${size(received)})`, "ok");
      } catch (error) {
        fail(`downloading ${path}`, error);
      }
    })();
  });
}
