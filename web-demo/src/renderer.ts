// The renderer: WebGL (@xterm/addon-webgl) unless the preferences ask for
// the DOM one (`renderer=dom`); xterm 6 has no canvas renderer any more.
// When WebGL cannot start (no WebGL2) or its context is lost for good (a GPU
// reset, too many contexts), the terminal goes on with xterm's DOM renderer,
// and the page says which one it uses and why. The panel (settings.ts) may
// switch between them at any time.

import type { Terminal } from "@xterm/xterm";
import { WebglAddon } from "@xterm/addon-webgl";
import type { RendererName } from "./preferences";

export interface RendererState {
  /** What the preferences ask for. */
  wanted: RendererName;
  /** What draws the terminal now. */
  active: RendererName;
  /** Why it is not the one wanted, if it is not. */
  fallback?: string;
}

export interface Renderer {
  /** Draws with this renderer from now on (WebGL falling back to DOM). */
  use(wanted: RendererName): void;
}

/** Call after `term.open()`. `info` shows which renderer is in use (and why). */
export function installRenderer(term: Terminal, wanted: RendererName, state: RendererState, info: HTMLElement): Renderer {
  let addon: WebglAddon | undefined;
  const changed = () => {
    info.textContent = `renderer: ${state.active === "webgl" ? "WebGL" : "DOM"}${state.fallback ? ` (${state.fallback})` : ""}`;
    if (state.fallback) console.info(`tether: ${info.textContent}`);
  };
  const drop = () => {
    try {
      // Disposing the addon hands the terminal back to the DOM renderer.
      addon?.dispose();
    } catch {
      // It never started; there is nothing of it to undo.
    }
    addon = undefined;
  };
  const use = (wanted: RendererName) => {
    state.wanted = wanted;
    state.fallback = undefined;
    if (wanted === "dom") {
      drop();
      state.active = "dom";
    } else if (!addon) {
      state.active = "dom";
      try {
        const loaded = new WebglAddon();
        addon = loaded;
        loaded.onContextLoss(() => {
          if (addon !== loaded) return;
          drop();
          state.active = "dom";
          state.fallback = "the WebGL context was lost";
          changed();
        });
        term.loadAddon(loaded);
        state.active = "webgl";
      } catch (e) {
        state.fallback = `WebGL is not available (${(e as Error).message})`;
        drop();
      }
    }
    changed();
  };
  use(wanted);
  return { use };
}
