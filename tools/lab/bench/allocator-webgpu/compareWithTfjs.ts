import type { PassLine } from './PassLine.js';
import type { ReplayPlan } from './ReplayPlan.js';

/** The targets for Stowage against tfjs's buffer manager. */
export const TARGETS = {
  /** Stowage's createBuffer calls over tfjs's, at most. */
  createBufferCallsRatio: 0.02,
  /** peakReserved / peakAllocated, at most. */
  reservedOverAllocated: 1.15,
  /** rssAboveBaseline / peakAllocated, at most. */
  rssOverAllocated: 1.2,
  /** Stowage's ops/s over tfjs's, at least, cold and warm. */
  opsPerSecRatio: 1,
} as const;

/**
 * The per-trace summary line: Stowage against tfjs on the lines of one trace. Ratios are Stowage's figure over
 * tfjs's; memory ratios take each allocator's worse pass. Null where an allocator has no line or a zero figure.
 * `liveAndPendingOverAllocated` is the plan's lower bound on reserved bytes for allocators whose frees wait for
 * the next submit, over peak live bytes.
 */
export function compareWithTfjs(trace: string, plan: ReplayPlan, lines: readonly PassLine[]): Record<string, unknown> {
  const line = (allocator: string, pass: PassLine['pass']): PassLine | undefined =>
    lines.find((l) => l.allocator === allocator && l.pass === pass && l.failed === undefined);
  // A replay that stopped early covers part of the trace: its figures meet no target (every pass must finish).
  const failed = (allocator: string): boolean => lines.some((l) => l.allocator === allocator && l.failed !== undefined);
  const both = (allocator: string): PassLine[] => (failed(allocator) ? [] : lines.filter((l) => l.allocator === allocator));
  const ratio = (a: number | undefined, b: number | undefined): number | null => (a === undefined || b === undefined || b === 0 ? null : round(a / b));
  const sum = (allocator: string, f: (l: PassLine) => number): number | undefined => {
    const ls = both(allocator);
    return ls.length === 0 ? undefined : ls.reduce((s, l) => s + f(l), 0);
  };
  const worst = (allocator: string, f: (l: PassLine) => number): number | undefined => {
    const ls = both(allocator);
    return ls.length === 0 ? undefined : Math.max(...ls.map((l) => f(l) / l.peakAllocated));
  };
  const createBufferCallsRatio = ratio(
    sum('stowage', (l) => l.createBufferCalls),
    sum('tfjs', (l) => l.createBufferCalls),
  );
  const stowageReserved = worst('stowage', (l) => l.peakReserved);
  const stowageRss = worst('stowage', (l) => l.rssAboveBaseline);
  const tfjsRss = worst('tfjs', (l) => l.rssAboveBaseline);
  const opsPerSecRatioCold = ratio(line('stowage', 'cold')?.opsPerSec, line('tfjs', 'cold')?.opsPerSec);
  const opsPerSecRatioWarm = ratio(line('stowage', 'warm')?.opsPerSec, line('tfjs', 'warm')?.opsPerSec);
  const opsPerSecRatioSteady = ratio(line('stowage', 'steady')?.opsPerSec, line('tfjs', 'steady')?.opsPerSec);
  return {
    scenario: 'summary',
    trace,
    createBufferCallsRatio,
    liveAndPendingOverAllocated: round(plan.peakLiveAndPendingBytes / plan.peakLiveBytes),
    stowageReservedOverAllocated: maybeRound(stowageReserved),
    tfjsReservedOverAllocated: maybeRound(worst('tfjs', (l) => l.peakReserved)),
    stowageRssOverAllocated: maybeRound(stowageRss),
    tfjsRssOverAllocated: maybeRound(tfjsRss),
    rssRatio: ratio(stowageRss, tfjsRss),
    opsPerSecRatioCold,
    opsPerSecRatioWarm,
    opsPerSecRatioSteady, // information: no target
    targetsMet: {
      createBufferCalls: createBufferCallsRatio !== null && createBufferCallsRatio <= TARGETS.createBufferCallsRatio,
      reserved: stowageReserved !== undefined && stowageReserved <= TARGETS.reservedOverAllocated,
      rss: stowageRss !== undefined && stowageRss <= TARGETS.rssOverAllocated,
      opsPerSecCold: opsPerSecRatioCold !== null && opsPerSecRatioCold >= TARGETS.opsPerSecRatio,
      opsPerSecWarm: opsPerSecRatioWarm !== null && opsPerSecRatioWarm >= TARGETS.opsPerSecRatio,
    },
  };
}

function maybeRound(value: number | undefined): number | null {
  return value === undefined ? null : round(value);
}

function round(value: number): number {
  return Number(value.toFixed(4));
}
