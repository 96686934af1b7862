// Where a device's createBuffer calls and peak bytes come from, per usage class (issue 36's targets on peak device
// bytes and createBuffer calls): `pnpm bench:ort` wraps each side's real device with `countByClass` and reports,
// per class, the calls and the live bytes at the moment of the device's peak.

/** GPUBufferUsage flags (spec values: no globals needed in Node). */
const MAP_READ = 0x0001;
const MAP_WRITE = 0x0002;
const QUERY_RESOLVE = 0x0200;
const UNIFORM = 0x0040;
const STORAGE = 0x0080;

/** The class of a buffer: Stowage's segments by their label, the program's buffers by their usage. */
export function bufferClass(descriptor: GPUBufferDescriptor): string {
  const label = descriptor.label ?? '';
  if (label.startsWith('stowage segment')) return (descriptor.usage & UNIFORM) !== 0 ? 'segment-uniform' : 'segment-storage';
  if (label.startsWith('stowage')) return 'stowage-other';
  const usage = descriptor.usage;
  if ((usage & MAP_READ) !== 0) return 'readback';
  if ((usage & MAP_WRITE) !== 0) return 'upload';
  if ((usage & QUERY_RESOLVE) !== 0) return 'query';
  if ((usage & UNIFORM) !== 0) return 'uniform';
  if ((usage & STORAGE) !== 0) return descriptor.mappedAtCreation === true ? 'storage-mapped' : 'storage';
  return 'other';
}

/** Per class: createBuffer calls, and the live bytes when the device's live bytes peaked. */
export interface ClassCount {
  calls: Record<string, number>;
  atPeak: Record<string, number>;
}

/**
 * Wraps `device.createBuffer` (and each buffer's destroy) to count per class (`bufferClass`) into the returned
 * counts. Wrap the real device: on a Stowage device that sees segments and every buffer passed through.
 */
export function countByClass(device: GPUDevice): ClassCount {
  const count: ClassCount = { calls: {}, atPeak: {} };
  const live: Record<string, number> = {};
  let liveBytes = 0;
  let peakBytes = -1;
  const createBuffer = device.createBuffer.bind(device);
  device.createBuffer = (descriptor: GPUBufferDescriptor) => {
    const buffer = createBuffer(descriptor);
    const cls = bufferClass(descriptor);
    count.calls[cls] = (count.calls[cls] ?? 0) + 1;
    live[cls] = (live[cls] ?? 0) + descriptor.size;
    liveBytes += descriptor.size;
    if (liveBytes > peakBytes) {
      peakBytes = liveBytes;
      count.atPeak = { ...live };
    }
    const destroy = buffer.destroy.bind(buffer);
    let destroyed = false;
    buffer.destroy = () => {
      if (!destroyed) {
        live[cls]! -= descriptor.size;
        liveBytes -= descriptor.size;
      }
      destroyed = true;
      destroy();
    };
    return buffer;
  };
  return count;
}
