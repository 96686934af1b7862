import { EventEmitter } from 'eventemitter3';
import type { AllocatorEvents } from '../AllocatorEvents.js';

/**
 * An allocator's private emitter. `emit` never throws: a listener's error is re-emitted as `listenerFailed`
 * (or, with nobody listening for that, printed once as a warning), so a faulty listener cannot break the
 * allocation path that emitted.
 */
export class SafeEmitter extends EventEmitter<AllocatorEvents> {
  #warned = false;

  safeEmit<K extends keyof AllocatorEvents>(event: K, ...args: AllocatorEvents[K]): void {
    if (this.listenerCount(event) === 0) return;
    try {
      (this.emit as (e: K, ...a: AllocatorEvents[K]) => boolean)(event, ...args);
    } catch (error) {
      if (event !== 'listenerFailed' && this.listenerCount('listenerFailed') > 0) {
        this.safeEmit('listenerFailed', { event, error });
      } else if (!this.#warned) {
        this.#warned = true;
        console.warn(`stowage: a listener for '${String(event)}' threw; the allocator's state is unaffected.`, error);
      }
    }
  }
}
