// The toolbar and panels without a mouse. Every control is in the Tab
// order, in the order it is shown, with a focus ring (style.css,
// `:focus-visible`). In the terminal, Tab is the program's (completion):
// Ctrl+Shift+E, then Tab (or Shift+Tab), leaves it for the next (previous)
// control. Neither key reaches the program, and none is lost to it: xterm
// sends Ctrl+Shift+E as Ctrl+E, which is what a program gets from Ctrl+E.
// (Escape then Tab, as CodeMirror does, would leave the program a pending
// Escape: readline's Meta prefix, eating the first key typed on return.)
// The share box and the side panel (its overlay on a narrow window) close
// with Escape, giving the focus back to the button that opened them.

import type { Terminal } from "@xterm/xterm";

export interface KeyboardElements {
  shareOpen: HTMLButtonElement;
  share: HTMLElement;
  shareFirst: HTMLButtonElement;
  shareClose: HTMLButtonElement;
  panelToggle: HTMLButtonElement;
  panel: HTMLElement;
  panelClose: HTMLButtonElement;
}

export interface Popovers {
  /** Opens the share box (focus on its first choice), or closes it. */
  toggleShare(open: boolean): void;
}

/** Whether the next Tab leaves the terminal (Ctrl+Shift+E was pressed), for the tests. */
export interface KeyboardState {
  leaving: boolean;
}

export function installKeyboard(term: Terminal, el: KeyboardElements, state: KeyboardState): Popovers {
  // Ctrl+Shift+E, then Tab: out of the terminal. Modifier keys alone (the
  // Shift of Shift+Tab) keep it in mind; any other key forgets it.
  term.attachCustomKeyEventHandler((event) => {
    if (event.type !== "keydown" || ["Shift", "Control", "Alt", "Meta"].includes(event.key)) return true;
    if (event.ctrlKey && event.shiftKey && !event.altKey && !event.metaKey && event.code === "KeyE") {
      event.preventDefault();
      state.leaving = true;
      return false;
    }
    const leave = state.leaving && event.key === "Tab" && !event.ctrlKey && !event.altKey && !event.metaKey;
    state.leaving = false;
    // Not xterm's: the browser's own Tab moves the focus on.
    return !leave;
  });
  term.textarea?.addEventListener("blur", () => (state.leaving = false));

  const toggleShare = (open: boolean) => {
    el.share.hidden = !open;
    el.shareOpen.setAttribute("aria-expanded", String(open));
    if (open) el.shareFirst.focus();
  };
  const closeShare = () => {
    if (el.share.hidden) return;
    const hadFocus = el.share.contains(document.activeElement);
    toggleShare(false);
    if (hadFocus) el.shareOpen.focus();
  };
  el.shareOpen.addEventListener("click", () => (el.share.hidden ? toggleShare(true) : closeShare()));
  el.shareClose.addEventListener("click", () => {
    toggleShare(false);
    el.shareOpen.focus();
  });
  el.share.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.preventDefault();
    closeShare();
  });
  // A click elsewhere closes it too.
  document.addEventListener("pointerdown", (event) => {
    const target = event.target as Node;
    if (!el.share.hidden && !el.share.contains(target) && !el.shareOpen.contains(target)) toggleShare(false);
  });

  // The side panel: beside the terminal on a wide window; on a narrow one
  // (style.css) an overlay the ☰ button opens.
  const togglePanel = (open: boolean) => {
    document.body.classList.toggle("panel-open", open);
    el.panelToggle.setAttribute("aria-expanded", String(open));
    if (open) el.panelClose.focus();
    else if (el.panel.contains(document.activeElement) || document.activeElement === document.body) el.panelToggle.focus();
  };
  el.panelToggle.addEventListener("click", () => togglePanel(!document.body.classList.contains("panel-open")));
  el.panelClose.addEventListener("click", () => togglePanel(false));
  el.panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("panel-open")) {
      event.preventDefault();
      togglePanel(false);
    }
  });

  return { toggleShare };
}
