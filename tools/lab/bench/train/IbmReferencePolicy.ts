import type { LmsPolicy, ReclaimCandidate, ReclaimRequest } from '@stowage/lms';

/**
 * IBM PyTorch LMS's reclaim choice (`reclaim-algo=first`, CUDACachingAllocator.cpp v1.5), written from the
 * description in ../shared/reference/lms-anchors.md §1 "Reclaim algorithm" and not from @stowage/lms's policies, so
 * that the bench can check `lru` against it. LMS offers the candidates in reclaim-list order (head first: the least
 * recently unpinned) and only those of the request's pool, which is IBM's "skipping blocks from the other pool".
 *
 * - reclaim_one: the first block on the list whose size, plus the sizes of the free blocks next to it in its
 *   segment (the engine coalesces free blocks, so one on each side at most), is at least the request.
 * - reclaim_fragments: every inactive block whose whole segment is at least the request.
 */
export class IbmReferencePolicy implements LmsPolicy {
  readonly name: string = 'ibm-reference';

  chooseOne(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): ReclaimCandidate | undefined {
    for (const block of candidates) {
      const { size, freeBefore, freeAfter } = block.placement;
      if (size + freeBefore + freeAfter >= request.bytes) return block;
    }
    return undefined;
  }

  chooseFragments(request: ReclaimRequest, candidates: Iterable<ReclaimCandidate>): readonly ReclaimCandidate[] {
    const inSegmentLargeEnough: ReclaimCandidate[] = [];
    for (const block of candidates) if (block.placement.segmentBytes >= request.bytes) inSegmentLargeEnough.push(block);
    return inSegmentLargeEnough;
  }
}
