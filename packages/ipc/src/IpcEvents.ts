import type { Device } from '@stowage/core';
import type { SafeEmitter } from '@stowage/core/plugin-kit';

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

/** What listeners see of IPC's emitter (core's SafeEmitter): they subscribe; only IPC emits. */
export type IpcEventSource = Pick<SafeEmitter<IpcEvents>, 'on' | 'once' | 'off' | 'listenerCount'>;
