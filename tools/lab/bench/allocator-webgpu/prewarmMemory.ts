/** The size of each buffer the prewarm creates. */
const CHUNK_BYTES = 256 * 2 ** 20;

/**
 * Creates buffers of `bytes` in all on `device` (the driver fills them), then destroys the device.
 *
 * Note [Prewarm]: on this machine (a virtual machine with a memory balloon and DAMON page-out) memory the process
 * has not touched lately costs about twice as much to fill as memory it freed a moment ago: the host backs
 * guest pages again on first use, and takes freed ones back a few seconds later. Without a prewarm the first
 * allocator on a trace pays that for its createBuffer calls and the next ones, reusing its freed pages, do not.
 * The caller passes a device of its own, which is unusable afterwards.
 */
export async function prewarmMemory(device: GPUDevice, bytes: number): Promise<void> {
  for (let made = 0; made < bytes; made += CHUNK_BYTES) {
    device.createBuffer({ size: Math.min(CHUNK_BYTES, bytes - made), usage: 0x0008 /* COPY_DST */ });
  }
  device.queue.submit([]);
  await device.queue.onSubmittedWorkDone();
  device.destroy();
}
