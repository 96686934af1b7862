import { EventEmitter } from 'eventemitter3';
import type { Device } from '@stowage/core';

/** One allocation as IPC reports it: its device, its device address and its bytes. */
export interface IpcEvent {
  readonly device: Device;
  readonly address: number;
  readonly bytes: number;
}

/** What a runtime's IPC reports (`Ipc#events`), past tense. Listeners run after IPC's state is consistent. */
export interface IpcEvents {
  /** One send of a storage (a storage sent twice reports twice). */
  sent: [e: IpcEvent];
  /** A descriptor another thread or process put became a storage of this runtime (host memory). */
  received: [e: IpcEvent];
  /** The producer released a storage a consumer still holds: it waits in the limbo, allocated. */
  enteredLimbo: [e: IpcEvent];
  /** A collection freed an allocation from the limbo. */
  collected: [e: IpcEvent];
  /** A listener threw; IPC went on. */
  listenerFailed: [e: { readonly event: string; readonly error: unknown }];
}

/** IPC's emitter: each listener runs on its own, and an error is re-emitted as `listenerFailed`. */
export class IpcEmitter extends EventEmitter<IpcEvents> {
  /** Emits to every listener in turn, isolating their errors. */
  safeEmit<K extends keyof IpcEvents>(event: K, ...args: IpcEvents[K]): void {
    for (const listener of this.listeners(event)) {
      try {
        (listener as (...a: IpcEvents[K]) => void)(...args);
      } catch (error) {
        if (event === 'listenerFailed') continue;
        this.safeEmit('listenerFailed', { event, error });
      }
    }
  }
}

/** What listeners see of IPC's emitter: they subscribe; only IPC emits. */
export type IpcEventSource = Pick<IpcEmitter, 'on' | 'once' | 'off' | 'listenerCount'>;
