// The sessions a tab knows: which ones it started and how long they outlive
// it (kept in sessionStorage, so a reload still knows), what a scoped
// token (a share link) allows, and the side panel's list of running
// sessions, any of which the tab can attach to.

import type { ProcessInfo, TetherClient } from "@tether/client";

/**
 * How long the sessions this tab started outlive it: "own" (unnamed, the
 * grace) or "kept" (named or shared: 10 minutes), by id. In sessionStorage,
 * so a reload still knows, and raises an own session when it is shared.
 * Sessions started elsewhere are not here: the page never changes theirs.
 */
export type Lifetime = "own" | "kept";
const LIFETIMES_KEY = "tether.lifetimes";

export function lifetimes(): Record<string, Lifetime> {
  try {
    return JSON.parse(sessionStorage.getItem(LIFETIMES_KEY) ?? "{}") as Record<string, Lifetime>;
  } catch {
    return {};
  }
}

export function rememberLifetime(id: string, lifetime: Lifetime): void {
  // The newest 50 sessions: a tab starts a handful.
  const kept = Object.entries({ ...lifetimes(), [id]: lifetime }).slice(-50);
  try {
    sessionStorage.setItem(LIFETIMES_KEY, JSON.stringify(Object.fromEntries(kept)));
  } catch {
    // No storage (a private window's quota): a reload forgets, nothing else.
  }
}

/** What a scoped token (`tether1.CLAIMS.MAC`) says: the one process and its rights. The server decides; this only shapes the page. */
export interface Scope {
  process: string;
  write: boolean;
}

export function scopeOf(token: string | undefined): Scope | undefined {
  if (!token?.startsWith("tether1.")) return undefined;
  try {
    const body = token.split(".")[1] ?? "";
    const claims = JSON.parse(atob(body.replace(/-/g, "+").replace(/_/g, "/"))) as { p: string; r?: { write?: boolean } };
    return { process: claims.p, write: claims.r?.write === true };
  } catch {
    return undefined;
  }
}

/** What a process runs, as typed: the command line for `sh -c TEXT`, else the argv. */
export function describeCommand(p: ProcessInfo): string {
  const [program, flag, text] = p.argv;
  return program === "/bin/sh" && flag === "-c" && text !== undefined && p.argv.length === 3 ? text : p.argv.join(" ");
}

/** The list of running PTY sessions; `refresh` redraws it (one list at a time). */
export function sessionList(conn: TetherClient, list: HTMLUListElement, shown: () => string | undefined, attach: (id: string) => void): () => Promise<void> {
  let refreshing = false;
  return async () => {
    // One list at a time: while the server is away a list retries for its
    // budget, and the periodic refresh must not pile them up.
    if (refreshing) return;
    refreshing = true;
    let processes: ProcessInfo[];
    try {
      // No prompt here: the periodic refresh must not nag; spawn and attach ask.
      processes = await conn.list();
    } catch (e) {
      list.replaceChildren(Object.assign(document.createElement("li"), { textContent: (e as Error).message }));
      return;
    } finally {
      refreshing = false;
    }
    const running = processes.filter((p) => p.status === "running" && p.tty);
    const items = running.map((p) => {
      const li = document.createElement("li");
      const label = document.createElement("span");
      label.textContent = `${p.id.slice(0, 8)} ${describeCommand(p)}`;
      label.title = `${p.id}: pid ${p.pid}, started ${p.started_at}`;
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.session = p.id;
      const current = p.id === shown();
      button.textContent = current ? "attached" : "attach";
      button.setAttribute("aria-label", `${current ? "attached to" : "attach to"} ${p.id.slice(0, 8)} ${describeCommand(p)}`);
      button.disabled = current;
      button.addEventListener("click", () => attach(p.id));
      li.append(label, button);
      return li;
    });
    if (items.length === 0) items.push(Object.assign(document.createElement("li"), { textContent: "no running sessions" }));
    list.replaceChildren(...items);
  };
}
