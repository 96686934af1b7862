import type { AllocatorEventSource } from '../contracts/Allocator.js';
import type { AllocatorEvents } from '../contracts/AllocatorEvents.js';
import { SafeEmitter } from './SafeEmitter.js';

/** Every allocator event but `listenerFailed`. */
type RelayedEvent = Exclude<keyof AllocatorEvents, 'listenerFailed'>;

/**
 * The events an upstream's listeners see, relayed, as an emitter of its own. Every upstream event is
 * re-emitted here except `listenerFailed`, which stays with the emitter whose listener failed. For an adaptor
 * that emits events the upstream never sees (a `LimitingAllocator` rejecting a request without calling it).
 * A listener here that throws is reported as this emitter's `listenerFailed`, never to the upstream.
 */
export class RelayEmitter extends SafeEmitter {
  readonly #source: AllocatorEventSource;
  readonly #relays: { readonly [K in RelayedEvent]: (...args: AllocatorEvents[K]) => void };
  #attached = true;

  constructor(source: AllocatorEventSource) {
    super();
    this.#source = source;
    this.#relays = {
      allocated: (e) => this.safeEmit('allocated', e),
      freed: (e) => this.safeEmit('freed', e),
      freeCompleted: (e) => this.safeEmit('freeCompleted', e),
      segmentReserved: (e) => this.safeEmit('segmentReserved', e),
      segmentReleased: (e) => this.safeEmit('segmentReleased', e),
      outOfMemory: (e) => this.safeEmit('outOfMemory', e),
      deviceError: (e) => this.safeEmit('deviceError', e),
    };
    for (const event of this.#events()) source.on(event, this.#relays[event] as never);
  }

  /** Stops relaying and drops every listener. Idempotent. */
  detach(): void {
    if (!this.#attached) return;
    this.#attached = false;
    for (const event of this.#events()) this.#source.off(event, this.#relays[event] as never);
    this.removeAllListeners();
  }

  /** The relayed event names; `#relays`' mapped type makes the compiler flag an event missing from it. */
  #events(): RelayedEvent[] {
    return Object.keys(this.#relays) as RelayedEvent[];
  }
}
