import { EventEmitter } from 'eventemitter3';
import type { AllocatorEvents } from '../contracts/AllocatorEvents.js';

/** What a safe emitter's event map must have: `listenerFailed`, with the event a listener threw in and the error. */
export interface SafeEvents {
  listenerFailed: [e: { readonly event: string; readonly error: unknown }];
}

/**
 * The one safe emitter (allocators', LMS's, IPC's, a plugin's): the owner's private emitter, whose `safeEmit` never
 * throws. A listener's error is re-emitted as `listenerFailed` (or, with nobody listening for that, printed once as
 * a warning), so a faulty listener cannot break the allocation path that emitted, nor keep the listeners after it
 * from hearing the event. Expose it to listeners as `Pick<SafeEmitter<E>, 'on' | 'once' | 'off'>`.
 */
export class SafeEmitter<E extends SafeEvents = AllocatorEvents> extends EventEmitter<E> {
  #warned = false;

  /**
   * True when anyone listens for `event`. The allocation and free paths check it before they build an event
   * object nobody would hear (Note [Flat statistics] says why the unoptimized cost of such work matters).
   */
  hears(event: EventEmitter.EventNames<E>): boolean {
    return this.listenerCount(event) !== 0;
  }

  safeEmit<K extends EventEmitter.EventNames<E>>(event: K, ...args: EventEmitter.EventArgs<E, K>): void {
    if (this.listenerCount(event) === 0) return;
    // Note [Listener isolation]: eventemitter3's emit stops at the first listener that throws, so every
    // listener runs here on its own, in order, `once` listeners removed first, as emit would.
    // The records are eventemitter3's internals (5.x); should they ever change shape, fall back to its emit, so
    // that listeners are never skipped (only isolated less well).
    const registered = (this as unknown as { _events?: Record<string, Listener | Listener[] | undefined> })._events?.[event as string];
    const listeners = registered === undefined ? [] : Array.isArray(registered) ? [...registered] : [registered];
    if (listeners.length === 0 || !listeners.every((l) => typeof l?.fn === 'function')) {
      try {
        (this.emit as (e: K, ...a: EventEmitter.EventArgs<E, K>) => boolean)(event, ...args);
      } catch (error) {
        this.#report(event, error);
      }
      return;
    }
    for (const listener of listeners) {
      if (listener.once) this.removeListener(event, listener.fn as never, listener.context as never, true);
      try {
        listener.fn.apply(listener.context, args as unknown[]);
      } catch (error) {
        this.#report(event, error);
      }
    }
  }

  #report(event: EventEmitter.EventNames<E>, error: unknown): void {
    const failed = 'listenerFailed' as EventEmitter.EventNames<E>;
    if (event !== failed && this.listenerCount(failed) > 0) {
      this.safeEmit(failed, ...([{ event: String(event), error }] as unknown as EventEmitter.EventArgs<E, typeof failed>));
    } else if (!this.#warned) {
      this.#warned = true;
      console.warn(`stowage: a listener for '${String(event)}' threw; the emitter's owner is unaffected.`, error);
    }
  }
}

/** eventemitter3's record of one listener (its `_events` entries). */
interface Listener {
  readonly fn: (...args: unknown[]) => void;
  readonly context: unknown;
  readonly once: boolean;
}
