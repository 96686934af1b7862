import type { Runtime, Token } from '@stowage/core';
import { DisposedError } from '@stowage/core';

/**
 * The COW contexts whose data one runtime shared with other threads and still pins (Note [COW across threads]
 * in shareCow.ts). One per runtime, in its container: two runtimes in one thread never collect each other's.
 *
 * Invariants: a context is in `contexts` exactly while it holds a sharing pin; every context in it was pinned
 * by a storage of this runtime.
 */
/** What the set needs of a pinned COW context (CowContext). */
export interface PinnedCowContext {
  /** Frees the data when the pin is its last reference; returns the bytes freed, else 0. */
  releasePinIfLast(): number;
}

export interface SharedCowPins {
  /** Contexts with a sharing pin; each adds and removes itself (CowContext#pinForSharing). */
  readonly contexts: Set<PinnedCowContext>;
  /**
   * Frees the data of every context whose sharing pin is its last reference (all receivers and local storages
   * are done); returns the bytes freed.
   */
  collect(): number;
}

export const SharedCowPins: Token<SharedCowPins> = Symbol('stowage.cow.SharedCowPins');

/** A runtime's empty set of pins. */
export function createSharedCowPins(): SharedCowPins {
  const contexts = new Set<PinnedCowContext>();
  return {
    contexts,
    collect() {
      let bytes = 0;
      for (const context of [...contexts]) bytes += context.releasePinIfLast();
      return bytes;
    },
  };
}

/**
 * The runtime's pins: the set the cow plugin registered, or one made and registered now (a runtime without the
 * plugin still shares storages; only the collection in the out-of-memory path needs the plugin).
 */
export function sharedCowPinsOf(rt: Runtime): SharedCowPins {
  if (rt.isDisposed) throw new DisposedError('Cannot share or collect COW storages of a disposed runtime: its storages were released when it was disposed.');
  if (rt.container.isRegistered(SharedCowPins, true)) return rt.container.resolve(SharedCowPins);
  const pins = createSharedCowPins();
  rt.container.register(SharedCowPins, { useValue: pins });
  return pins;
}
