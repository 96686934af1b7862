import { collectGarbage } from '@stowage/lab/bench-kit';

/** Milliseconds to let Dawn's device thread finish and reclaim destroyed buffers. */
const SETTLE_MS = 50;

/**
 * Brings the process to a quiet state between measurements: submits nothing, waits for the queue to drain and
 * Dawn to reclaim destroyed buffers (a later submit ticks the device), and collects garbage (GPUBuffer wrappers,
 * the replay's handle arrays).
 */
export async function settleMemory(device: GPUDevice): Promise<void> {
  device.queue.submit([]);
  await device.queue.onSubmittedWorkDone();
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  device.queue.submit([]);
  await device.queue.onSubmittedWorkDone();
  collectGarbage();
  collectGarbage();
}
