import type { StorageImpl } from '@stowage/core';
import type { Residency } from '@stowage/lms';
import { StorageResidency } from '@stowage/lms';

// Note [Host copies where a reclaim is predicted]: a host copy made at an async point costs a copy of the tensor
// through a staging buffer (inside the budget), and a step that rewrites its persistent tensors (weights,
// optimizer state) would pay it every step. So once LMS has learned a step (after the first `endLmsStep()`), an
// async point copies a dirty inactive tensor only where a reclaim is predicted: every one when the stretch that
// just ended reclaimed (a loop's next stretch is alike, and its reclaims must find clean tensors), otherwise only
// those the learned sequence reclaims before their next pin (`reclaimPredicted`). Before that nothing is learned,
// and every dirty inactive tensor is copied (a loop's first step is a guess: its reclaims must find clean ones).
// A program that knows better asks for every copy (`lmsSettle({ hostCopies: 'all' })`). Uploaded tensors need
// none (Note [Clean uploads]): inference (weights uploaded, activations freed within the prediction, outputs read
// and disposed) finds nothing dirty to copy at its async points, whatever the budget.

/**
 * The host-copy rounds of an async point (`StowageWebGpuBackend#lmsSettle`): starts a page-out of every inactive
 * tensor among `storages` that has no host copy and is to get one (`copyAll`, else where a reclaim is predicted),
 * waits for the copies and the device's page-outs in flight, and retries those the device refused for lack of room
 * while landed copies give room back.
 */
export async function settleHostCopies(residency: Residency, storages: Iterable<StorageImpl>, copyAll: boolean): Promise<void> {
  for (;;) {
    const started = residency.stats.pageOut;
    let refused = false;
    const waits: Promise<void>[] = [];
    for (const storage of storages) {
      const lms = storage.lms;
      if (!(lms instanceof StorageResidency) || lms.state !== 'inactive') continue;
      if (!lms.hasHostCopy && (copyAll || lms.reclaimPredicted) && !lms.pageOutEarly()) refused = true;
      if (!lms.hostCopyReady) waits.push(lms.hostCopySettled());
    }
    await Promise.all(waits);
    await residency.settlePageOuts();
    // Refused copies get the room the landed ones gave back; none landed this round: no room will come.
    if (!refused || residency.stats.pageOut === started) break;
  }
}
