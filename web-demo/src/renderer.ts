// The renderer: WebGL (@xterm/addon-webgl) unless the URL asks for the DOM
// one (`renderer=dom`); xterm 6 has no canvas renderer any more. When WebGL
// cannot start (no WebGL2) or its context is lost for good (a GPU reset, too
// many contexts), the terminal goes on with xterm's DOM renderer, and the
// page says which one it uses and why.

import type { Terminal } from "@xterm/xterm";
import { WebglAddon } from "@xterm/addon-webgl";
import type { RendererName } from "./preferences";

export interface RendererState {
  /** What the URL asked for (or the default). */
  wanted: RendererName;
  /** What draws the terminal now. */
  active: RendererName;
  /** Why it is not the one wanted, if it is not. */
  fallback?: string;
}

/** Call after `term.open()`. `info` shows which renderer is in use (and why). */
export function installRenderer(term: Terminal, wanted: RendererName, state: RendererState, info: HTMLElement): void {
  const changed = () => {
    info.textContent = `renderer: ${state.active === "webgl" ? "WebGL" : "DOM"}${state.fallback ? ` (${state.fallback})` : ""}`;
    if (state.fallback) console.info(`tether: ${info.textContent}`);
  };
  state.wanted = wanted;
  state.active = "dom";
  state.fallback = undefined;
  if (wanted === "webgl") {
    let addon: WebglAddon | undefined;
    try {
      addon = new WebglAddon();
      const loaded = addon;
      loaded.onContextLoss(() => {
        // Disposing the addon hands the terminal back to the DOM renderer.
        loaded.dispose();
        state.active = "dom";
        state.fallback = "the WebGL context was lost";
        changed();
      });
      term.loadAddon(loaded);
      state.active = "webgl";
    } catch (e) {
      state.fallback = `WebGL is not available (${(e as Error).message})`;
      try {
        addon?.dispose();
      } catch {
        // It never started; there is nothing of it to undo.
      }
    }
  }
  changed();
}
