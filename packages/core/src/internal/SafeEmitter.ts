import { EventEmitter } from 'eventemitter3';
import type { AllocatorEvents } from '../contracts/AllocatorEvents.js';

/**
 * An allocator's private emitter. `safeEmit` never throws: a listener's error is re-emitted as
 * `listenerFailed` (or, with nobody listening for that, printed once as a warning), so a faulty listener
 * cannot break the allocation path that emitted, nor keep the listeners after it from hearing the event.
 */
export class SafeEmitter extends EventEmitter<AllocatorEvents> {
  #warned = false;

  /**
   * True when anyone listens for `event`. The allocation and free paths check it before they build an event
   * object nobody would hear (Note [Flat statistics] says why the unoptimized cost of such work matters).
   */
  hears(event: keyof AllocatorEvents): boolean {
    return this.listenerCount(event) !== 0;
  }

  safeEmit<K extends keyof AllocatorEvents>(event: K, ...args: AllocatorEvents[K]): void {
    if (this.listenerCount(event) === 0) return;
    // Note [Listener isolation]: eventemitter3's emit stops at the first listener that throws, so every
    // listener runs here on its own, in order, `once` listeners removed first, as emit would.
    // The records are eventemitter3's internals (5.x); should they ever change shape, fall back to its emit, so
    // that listeners are never skipped (only isolated less well).
    const registered = (this as unknown as { _events?: Record<string, Listener | Listener[] | undefined> })._events?.[event as string];
    const listeners = registered === undefined ? [] : Array.isArray(registered) ? [...registered] : [registered];
    if (listeners.length === 0 || !listeners.every((l) => typeof l?.fn === 'function')) {
      try {
        (this.emit as (e: K, ...a: AllocatorEvents[K]) => boolean)(event, ...args);
      } catch (error) {
        this.#report(event, error);
      }
      return;
    }
    for (const listener of listeners) {
      if (listener.once) this.removeListener(event, listener.fn as never, listener.context, true);
      try {
        listener.fn.apply(listener.context, args);
      } catch (error) {
        this.#report(event, error);
      }
    }
  }

  #report(event: keyof AllocatorEvents, error: unknown): void {
    if (event !== 'listenerFailed' && this.listenerCount('listenerFailed') > 0) {
      this.safeEmit('listenerFailed', { event, error });
    } else if (!this.#warned) {
      this.#warned = true;
      console.warn(`stowage: a listener for '${String(event)}' threw; the allocator's state is unaffected.`, error);
    }
  }
}

/** eventemitter3's record of one listener (its `_events` entries). */
interface Listener {
  readonly fn: (...args: unknown[]) => void;
  readonly context: unknown;
  readonly once: boolean;
}
