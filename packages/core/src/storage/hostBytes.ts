import { DataPtr } from './DataPtr.js';
import { formatDevice } from '../contracts/Device.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';
import { UseAfterReleaseError } from '../errors/UseAfterReleaseError.js';

/**
 * A Uint8Array over a host pointer's bytes, without copying: for kernels that run on the CPU. Take it from
 * `storage.mutableData()` to write and from `storage.data()` to read, and do not keep it past the pointer.
 * @throws InvalidArgumentError when the pointer's memory is not host memory (ArrayBuffer/SharedArrayBuffer)
 * (or is not a DataPtr)
 * @throws UseAfterReleaseError when the pointer was released
 */
export function hostBytes(ptr: DataPtr): Uint8Array {
  if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError('ptr', ptr, 'a DataPtr (storage.data() or storage.mutableData())');
  if (ptr.isReleased) throw new UseAfterReleaseError(`The ${ptr.byteLength}-byte allocation on ${formatDevice(ptr.device)} was released.`);
  const handle = ptr.handle;
  if (!(handle instanceof ArrayBuffer) && !(typeof SharedArrayBuffer !== 'undefined' && handle instanceof SharedArrayBuffer)) {
    throw new InvalidArgumentError('ptr', ptr, `a pointer to host memory (this one is on ${formatDevice(ptr.device)}; use Runtime#read instead)`);
  }
  return new Uint8Array(handle, ptr.byteOffset, ptr.byteLength);
}
