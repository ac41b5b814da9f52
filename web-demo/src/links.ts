// Clickable links: URLs in the output (@xterm/addon-web-links) and OSC 8
// hyperlinks (`ESC ] 8 ; ; URL ESC \ text ESC ] 8 ; ; ESC \`, xterm's
// linkHandler). A click opens an http: or https: URL in a new tab, without
// an opener or a referrer; anything else (javascript:, data:, file:,
// mailto:) opens nothing. xterm itself already offers only http(s) OSC 8
// links; this checks again, since the handler is what opens them. An OSC 8
// link's text may say anything, so hovering one shows where it goes.

import type { Terminal } from "@xterm/xterm";
import { WebLinksAddon } from "@xterm/addon-web-links";

/** What the page did with links, for the tests and the console. */
export interface LinkLog {
  opened: string[];
  refused: string[];
}

/** The URL if it is one a click may open (http: or https:), else undefined. */
export function safeUrl(text: string): URL | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url : undefined;
}

export function installLinks(term: Terminal, log: LinkLog): void {
  const open = (event: MouseEvent, text: string) => {
    const url = safeUrl(text);
    if (!url) {
      log.refused.push(text);
      return;
    }
    event.preventDefault();
    log.opened.push(url.href);
    // noopener: the new tab cannot reach (or navigate) this one; noreferrer:
    // it is not told which page, with which fragment and token, linked it.
    window.open(url.href, "_blank", "noopener,noreferrer");
  };
  term.loadAddon(new WebLinksAddon(open));

  // Where an OSC 8 link goes, shown while the pointer is on it. `xterm-hover`
  // keeps the mouse over it from reaching the terminal.
  const tip = document.createElement("div");
  tip.className = "xterm-hover link-tip";
  tip.hidden = true;
  term.element?.append(tip);
  term.options.linkHandler = {
    activate: open,
    hover: (event, text) => {
      const url = safeUrl(text);
      tip.textContent = url ? url.href : `not opened: ${text}`;
      const box = term.element?.getBoundingClientRect();
      tip.style.left = `${Math.max(0, event.clientX - (box?.left ?? 0) + 8)}px`;
      tip.style.top = `${Math.max(0, event.clientY - (box?.top ?? 0) + 16)}px`;
      tip.hidden = false;
    },
    leave: () => {
      tip.hidden = true;
    },
  };
}
