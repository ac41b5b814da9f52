// The leave warning: closing (or reloading) the tab asks first, but only
// while closing it would end a session: one this tab started without a
// name, which the server ends its grace after the last tab has gone
// (main.ts, DEFAULT_GRACE_MS). A named or shared session is kept 10 minutes,
// one this tab only attached to keeps whatever it was given, and an exited
// one has nothing left to lose: none of them asks. `disableLeaveAlert=1`
// (as ttyd's) never asks.
//
// The browser shows its own words, and only after the person has used the
// page (a click, a key): a tab nobody touched closes without asking.

export interface LeaveState {
  /** Times the page asked (the browser may still not show it). */
  asked: number;
}

export function installLeaveWarning(wouldEndSession: () => boolean, state: LeaveState): void {
  window.addEventListener("beforeunload", (event) => {
    if (!wouldEndSession()) return;
    state.asked++;
    event.preventDefault();
    // What older browsers look for instead.
    event.returnValue = "";
  });
}
