// Retries with exponential backoff and a time budget, and abortable sleeps.

import { isTransient, RetryBudgetExhaustedError, type TetherError } from "./errors.js";

/**
 * How transient failures are retried: backoff from `initialBackoffMs`,
 * doubling up to `maxBackoffMs`, until `budgetMs` has passed since the
 * first failure of a run of consecutive failures (any answer starts the
 * budget afresh, so a long `wait` survives many blips). `Infinity` retries
 * for ever; 0 not at all.
 */
export interface RetryPolicy {
  /** Total time to keep retrying after the first failure (default 30 000 ms). */
  budgetMs: number;
  /** The first pause (default 100 ms). */
  initialBackoffMs: number;
  /** The longest pause (default 2 000 ms). */
  maxBackoffMs: number;
}

/** The default policy: 30 s budget, 100 ms doubling to 2 s. */
export const DEFAULT_RETRY: Readonly<RetryPolicy> = Object.freeze({
  budgetMs: 30_000,
  initialBackoffMs: 100,
  maxBackoffMs: 2_000,
});

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

/** Tracks one run of consecutive transient failures against a policy. */
export class Backoff {
  private firstFailure: number | undefined;
  private attempts = 0;
  private nextPause: number;

  constructor(private readonly policy: RetryPolicy) {
    this.nextPause = policy.initialBackoffMs;
  }

  /** A success: the next failure starts a new budget. */
  reset(): void {
    this.firstFailure = undefined;
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
    const now = Date.now();
    this.firstFailure ??= now;
    this.attempts += 1;
    const elapsed = now - this.firstFailure;
    const remaining = this.policy.budgetMs - elapsed;
    if (remaining <= 0) throw new RetryBudgetExhaustedError(this.attempts, elapsed, error);
    // 75% to 100% of the pause, so that many clients do not retry in lockstep.
    const pause = Math.min(remaining, Math.round(this.nextPause * (0.75 + Math.random() * 0.25)));
    this.nextPause = Math.min(this.nextPause * 2, this.policy.maxBackoffMs);
    onPause?.(pause, this.attempts);
    await sleep(pause, signal);
  }
}
