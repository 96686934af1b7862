import type { StorageImpl } from '@stowage/core';
import type { SafeEmitter } from '@stowage/core/plugin-kit';

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

/** What listeners see of LMS's emitter (core's SafeEmitter): they subscribe; only LMS emits. */
export type LmsEventSource = Pick<SafeEmitter<LmsEvents>, 'on' | 'once' | 'off' | 'listenerCount'>;
