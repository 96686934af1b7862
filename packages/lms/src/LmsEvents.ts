import { EventEmitter } from 'eventemitter3';
import type { StorageImpl } from '@stowage/core';

/**
 * What LMS reports on a device (`Residency.events`), past tense. `address` is the device address of the block a
 * page-out freed or a page-in filled.
 */
export interface LmsEvents {
  /** A storage was reclaimed: its block freed, its bytes in host memory (`copied` false: a valid host copy was reused). */
  pagedOut: [e: { readonly storage: StorageImpl; readonly bytes: number; readonly copied: boolean; readonly address: number }];
  /** A reclaimed storage was brought back: a block allocated and the host bytes copied into it. */
  pagedIn: [e: { readonly storage: StorageImpl; readonly bytes: number; readonly address: number }];
  /** A listener or a policy hook (`policy.onPin`, …) threw; LMS went on. */
  listenerFailed: [e: { readonly event: string; readonly error: unknown }];
}

/**
 * LMS's emitter. Paging runs inside allocations, so a listener that throws must not break them: each listener
 * runs on its own, and an error is re-emitted as `listenerFailed` (whose own listeners' errors are dropped).
 */
export class LmsEmitter extends EventEmitter<LmsEvents> {
  /** Emits to every listener in turn, isolating their errors. */
  safeEmit<K extends keyof LmsEvents>(event: K, ...args: LmsEvents[K]): void {
    for (const listener of this.listeners(event)) {
      try {
        (listener as (...a: LmsEvents[K]) => void)(...args);
      } catch (error) {
        if (event === 'listenerFailed') continue;
        this.safeEmit('listenerFailed', { event, error });
      }
    }
  }
}

/** What listeners see of LMS's emitter: they subscribe; only LMS emits. */
export type LmsEventSource = Pick<LmsEmitter, 'on' | 'once' | 'off' | 'listenerCount'>;
