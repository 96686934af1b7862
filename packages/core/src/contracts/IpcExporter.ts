import type { DataPtr } from '../storage/DataPtr.js';
import type { Token } from './Token.js';

/**
 * A device service: export a live pointer's memory for another process and open such an export (CUDA IPC
 * handles, shareable pages). The export is plain data the device defines (structured-cloneable); IPC checks its
 * shape before it opens one.
 */
export interface IpcExporter<E = unknown> {
  /**
   * A description of `ptr`'s memory another process can open while `ptr` is live.
   * @throws ForeignPointerError or InvalidArgumentError for a pointer the device cannot export
   */
  exportIpc(ptr: DataPtr): E;
  /** Maps an export made by another process; the pointer's release closes the mapping. */
  openIpc(exported: E): DataPtr;
}

export const IpcExporter: Token<IpcExporter> = Symbol('stowage.IpcExporter');
