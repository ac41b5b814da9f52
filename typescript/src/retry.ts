// Retries with exponential backoff and a time budget, and abortable sleeps.

import { isRefused, isTransient, RetryBudgetExhaustedError, TransportError, type TetherError } from "./errors.js";

/**
 * How transient failures are retried: backoff from `initialBackoffMs`,
 * doubling up to `maxBackoffMs`, until `budgetMs` has passed since the call
 * began, or since its last success (any answer starts the budget afresh,
 * so a long `wait` survives many blips). A call therefore ends within the
 * larger of the budget and its request timeout, retries included: each
 * attempt's timeout is cut to what is left of that (as the Rust client
 * does). `Infinity` retries for ever; 0 not at all. Until the server has
 * answered this client once, a refused connection is retried only
 * `firstContactRefusedMs`: nothing listens there, and retrying longer
 * cannot help.
 */
export interface RetryPolicy {
  /** Total time to keep retrying after the first failure (default 30 000 ms). */
  budgetMs: number;
  /** The first pause (default 100 ms). */
  initialBackoffMs: number;
  /** The longest pause (default 2 000 ms). */
  maxBackoffMs: number;
  /** The budget of a refused connection to a server that never answered this client (default 400 ms, as the Rust client's `FIRST_CONTACT_REFUSED`). */
  firstContactRefusedMs: number;
}

/** The default policy: 30 s budget, 100 ms doubling to 2 s, 400 ms for a refused first contact. */
export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  budgetMs: 30_000,
  initialBackoffMs: 100,
  maxBackoffMs: 2_000,
  firstContactRefusedMs: 400,
});

/** The least time an attempt is given, however little of the budget is left. */
const SHORTEST_ATTEMPT_MS = 10;

/** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Tracks one run of attempts, from the start of a call or its last success, against a policy. */
export class Backoff {
  private since = Date.now();
  private attempts = 0;
  private nextPause: number;

  /** `contacted` says whether the server has ever answered this client (see {@link RetryPolicy.firstContactRefusedMs}); without it, it has. */
  constructor(
    private readonly policy: RetryPolicy,
    private readonly contacted: () => boolean = () => true,
  ) {
    this.nextPause = policy.initialBackoffMs;
  }

  /** The timeout of the next attempt: `timeoutMs`, cut to what is left of the call's deadline (the larger of the budget and `timeoutMs`, from the start of the run), so that retries never stretch a call past it. */
  clip(timeoutMs: number): number {
    const deadline = Math.max(this.policy.budgetMs, timeoutMs);
    return Math.max(SHORTEST_ATTEMPT_MS, Math.min(timeoutMs, deadline - (Date.now() - this.since)));
  }

  /** A success: the budget starts afresh from now. */
  reset(): void {
    this.since = Date.now();
    this.attempts = 0;
    this.nextPause = this.policy.initialBackoffMs;
  }

  /** The pause the next failure would wait (for progress reports). */
  get pendingPauseMs(): number {
    return this.nextPause;
  }

  /**
   * After a failure: waits and returns when another attempt fits in the
   * budget; throws `error` itself when it is not transient, or
   * {@link RetryBudgetExhaustedError} when the budget is spent.
   */
  async failed(error: TetherError, signal?: AbortSignal, onPause?: (ms: number, attempt: number) => void): Promise<void> {
    if (!isTransient(error)) throw error;
    this.attempts += 1;
    const elapsed = Date.now() - this.since;
    let budget = this.policy.budgetMs;
    if (error instanceof TransportError && isRefused(error) && !this.contacted()) budget = Math.min(budget, this.policy.firstContactRefusedMs);
    const remaining = budget - elapsed;
    if (remaining <= 0) throw new RetryBudgetExhaustedError(this.attempts, elapsed, error);
    // 75% to 100% of the pause, so that many clients do not retry in lockstep.
    const pause = Math.min(remaining, Math.round(this.nextPause * (0.75 + Math.random() * 0.25)));
    this.nextPause = Math.min(this.nextPause * 2, this.policy.maxBackoffMs);
    onPause?.(pause, this.attempts);
    await sleep(pause, signal);
  }
}
