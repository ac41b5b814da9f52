// Search in the scrollback (@xterm/addon-search): the toolbar's search
// field, or Ctrl+Shift+F from anywhere on the page. Typing searches as it
// goes; Enter (or the down arrow button) goes to the next match, Shift+Enter
// (or the up arrow button) to the previous one, Escape clears the highlights
// and returns to the terminal. Every match is highlighted (decorations, up to
// 1000) and the current one is selected and scrolled into view.

import type { Terminal } from "@xterm/xterm";
import { SearchAddon, type ISearchOptions } from "@xterm/addon-search";
import type { ThemeName } from "./preferences";

/** The current match (0-based; -1 past the highlight limit) and how many there are. */
export interface SearchState {
  query: string;
  resultIndex: number;
  resultCount: number;
}

export interface SearchElements {
  input: HTMLInputElement;
  previous: HTMLButtonElement;
  next: HTMLButtonElement;
  count: HTMLElement;
}

const DECORATIONS: Record<ThemeName, NonNullable<ISearchOptions["decorations"]>> = {
  dark: {
    matchBackground: "#5a4a1f",
    matchOverviewRuler: "#e5c07b",
    activeMatchBackground: "#b5852a",
    activeMatchBorder: "#e5c07b",
    activeMatchColorOverviewRuler: "#ffd27a",
  },
  light: {
    matchBackground: "#f6e3a8",
    matchOverviewRuler: "#b5852a",
    activeMatchBackground: "#f0b429",
    activeMatchBorder: "#8a6100",
    activeMatchColorOverviewRuler: "#8a6100",
  },
};

/** `theme` is asked at each search: the page's theme may change (the panel, the system's colour scheme). */
export function installSearch(term: Terminal, el: SearchElements, state: SearchState, theme: () => ThemeName): void {
  const addon = new SearchAddon({ highlightLimit: 1000 });
  term.loadAddon(addon);

  const show = () => {
    const { query, resultIndex, resultCount } = state;
    el.count.textContent =
      query === "" ? "" : resultCount === 0 ? "none" : resultIndex < 0 ? `${resultCount}` : `${resultIndex + 1}/${resultCount}`;
  };
  addon.onDidChangeResults(({ resultIndex, resultCount }) => {
    state.resultIndex = resultIndex;
    state.resultCount = resultCount;
    show();
  });

  const find = (direction: "next" | "previous", incremental = false) => {
    state.query = el.input.value;
    if (state.query === "") {
      addon.clearDecorations();
      state.resultIndex = -1;
      state.resultCount = 0;
      show();
      return;
    }
    const options: ISearchOptions = { decorations: DECORATIONS[theme()], incremental };
    if (direction === "next") addon.findNext(state.query, options);
    else addon.findPrevious(state.query, options);
  };

  el.input.addEventListener("input", () => find("next", true));
  el.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter") {
      event.preventDefault();
      find(event.shiftKey ? "previous" : "next");
    } else if (event.key === "Escape") {
      event.preventDefault();
      addon.clearDecorations();
      term.clearSelection();
      term.focus();
    }
  });
  el.next.addEventListener("click", () => find("next"));
  el.previous.addEventListener("click", () => find("previous"));

  // Ctrl+Shift+F, also while the terminal has the focus: in the capture
  // phase, before xterm sees the key (it is no key a program gets anyway).
  document.addEventListener(
    "keydown",
    (event) => {
      if (event.ctrlKey && event.shiftKey && !event.altKey && !event.metaKey && event.code === "KeyF") {
        event.preventDefault();
        event.stopPropagation();
        el.input.focus();
        el.input.select();
      }
    },
    true,
  );
}
