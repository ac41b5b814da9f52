// Copy on select: what is selected in the terminal goes to the clipboard
// (`copyOnSelect=0` in the URL, or the panel, turns it off), where the browser allows it
// (a secure context: https or localhost; otherwise the browser's own copy
// still works). Pasting needs nothing here: xterm's own paste handling
// (Ctrl+Shift+V, the browser's paste) wraps the text in ESC[200~ ... ESC[201~
// when the program asked for bracketed paste (ESC[?2004h), so a shell or an
// editor can tell a paste from typing.

import type { Terminal } from "@xterm/xterm";

export interface CopyState {
  /** The last text the clipboard accepted from a selection. */
  copied?: string;
}

/** `enabled` is asked at each selection: the panel (settings.ts) may turn it off and on. */
export function installCopyOnSelect(term: Terminal, enabled: () => boolean, state: CopyState): void {
  let pending = false;
  term.onSelectionChange(() => {
    if (!enabled()) return;
    // A drag changes the selection at every mouse move: copy once a frame.
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const text = term.getSelection();
      if (!text || !navigator.clipboard) return;
      navigator.clipboard.writeText(text).then(
        () => {
          state.copied = text;
        },
        () => {
          // Not allowed here (no focus, no permission): nothing is lost, the selection stays.
        },
      );
    });
  });
}
