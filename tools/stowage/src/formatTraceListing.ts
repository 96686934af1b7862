import { formatBytes } from '@stowage/core';

/** One entry of a listing: a trace event, a snapshot's trace entry or a recorded one. */
export interface ListedEntry {
  readonly action: string;
  readonly size: number;
  readonly stream: number;
  /** The address, where the trace recorded one. */
  readonly addr?: number | undefined;
  /** The allocation's id in a JSON-lines trace (-1 or absent otherwise); without it allocations go by address. */
  readonly id?: number | undefined;
  readonly pre?: boolean | undefined;
  /** `oom`: the bytes the device reported free. */
  readonly deviceFree?: number | undefined;
}

/** A live segment of the listing. */
interface Segment {
  readonly start: number;
  readonly size: number;
  readonly name: string;
}

/**
 * A trace as a readable listing, one line per entry, as PyTorch's `_memory_viz trace` prints one: allocations
 * get names (`a`, `b`, … `z`, `ba`, …; never reused), segments `s0`, `s1`…, and an allocation says which segment
 * it is in and where: `a = alloc 1.00 MiB in s0 at +0x200`. The last line sums what is live at the end.
 * @param options.segments a snapshot's segments (at its end), for allocations in segments the trace does not see
 * reserved: such an allocation is placed in `seg#i`, the i-th of them, when one holds its address
 * @param heading the first line (what the listing is of)
 */
export function formatTraceListing(entries: readonly ListedEntry[], heading: string, options: { readonly segments?: readonly { readonly address: number; readonly total_size: number }[] } = {}): string {
  const lines = [`${heading}: ${entries.length} entries`];
  const width = String(Math.max(0, entries.length - 1)).length;
  const names = new Map<number | string, { name: string; size: number }>();
  const segments: Segment[] = [];
  const known: Segment[] = [];
  (options.segments ?? []).forEach((s, i) => insertSegment(known, { start: s.address, size: s.total_size, name: `seg#${i}` }));
  let nextName = 0;
  let nextSegment = 0;
  let liveBytes = 0;
  let reservedBytes = 0;
  // A trace without free_completed (a planner's, an RMM log) frees at free_requested.
  const freesAtRequest = !entries.some((e) => e.action === 'free_completed');
  const keyOf = (e: ListedEntry): number | string | undefined => (e.id !== undefined && e.id >= 0 ? `id${e.id}` : e.addr);
  /** The name last freed at each key: a page-out is recorded after the free of the block it pages out. */
  const freed = new Map<number | string, string>();
  const nameAt = (e: ListedEntry): string => {
    const key = keyOf(e);
    return (key === undefined ? undefined : (names.get(key)?.name ?? freed.get(key))) ?? (e.addr === undefined ? '?' : `0x${e.addr.toString(16)}`);
  };
  const release = (key: number | string | undefined): void => {
    const live = key === undefined ? undefined : names.get(key);
    if (key === undefined || live === undefined) return;
    names.delete(key);
    freed.set(key, live.name);
    liveBytes -= live.size;
  };
  entries.forEach((e, index) => {
    const stream = e.stream === 0 ? '' : ` on stream ${e.stream}`;
    let line: string;
    switch (e.action) {
      case 'alloc': {
        const name = allocationName(nextName++);
        const key = keyOf(e);
        if (key !== undefined) {
          names.set(key, { name, size: e.size });
          freed.delete(key);
        }
        liveBytes += e.size;
        line = `${name} = alloc ${formatBytes(e.size)}${where(segments, known, e.addr)}${stream}${e.pre ? ' (live before the trace began)' : ''}`;
        break;
      }
      case 'free_requested': {
        line = `del ${nameAt(e)} (${formatBytes(e.size)})`;
        if (freesAtRequest) release(keyOf(e));
        break;
      }
      case 'free_completed':
        line = `free completed: ${nameAt(e)}'s block may be reused`;
        release(keyOf(e));
        break;
      case 'segment_alloc':
      case 'segment_map': {
        const name = `s${nextSegment++}`;
        reservedBytes += e.size;
        if (e.addr !== undefined) insertSegment(segments, { start: e.addr, size: e.size, name });
        line = `${name} = ${e.action === 'segment_alloc' ? 'cudaMalloc' : 'map'}(${formatBytes(e.size)})${e.addr === undefined ? '' : ` at 0x${e.addr.toString(16)}`}${stream}`;
        break;
      }
      case 'segment_free':
      case 'segment_unmap': {
        reservedBytes -= e.size;
        const segment = e.addr === undefined ? undefined : removeSegment(segments, e.addr);
        line = `${e.action === 'segment_free' ? 'cudaFree' : 'unmap'}(${segment?.name ?? (e.addr === undefined ? '?' : `0x${e.addr.toString(16)}`)}) ${formatBytes(e.size)}`;
        break;
      }
      case 'oom':
        line = `out of memory: ${formatBytes(e.size)} requested${e.deviceFree === undefined ? '' : `, ${formatBytes(e.deviceFree)} free on the device`}${stream}`;
        break;
      case 'page_out':
        line = `page out ${nameAt(e)} (${formatBytes(e.size)} to host memory)`;
        break;
      case 'page_in':
        line = `page in ${formatBytes(e.size)}${where(segments, known, e.addr)}${stream}`;
        break;
      case 'snapshot':
        line = `snapshot taken (${formatBytes(e.size)} active)`;
        break;
      default:
        line = `${e.action} ${nameAt(e)} (${formatBytes(e.size)})${stream}`;
    }
    lines.push(`${String(index).padStart(width)}  ${line}`);
  });
  lines.push(`live at the end: ${names.size} allocations, ${formatBytes(liveBytes)} requested; the trace's segments net ${formatBytes(reservedBytes)} reserved`);
  return `${lines.join('\n')}\n`;
}

/** `a`, `b`, … `z`, `ba`, `bb`, …: the base-26 digits of `n` as letters. */
function allocationName(n: number): string {
  let name = '';
  do {
    name = String.fromCharCode(97 + (n % 26)) + name;
    n = Math.floor(n / 26);
  } while (n > 0);
  return name;
}

/**
 * ` in s3 at +0x200` for an address in a live segment (else in one of `known`), ` at 0x7f…` for another, `` without
 * one.
 */
function where(segments: readonly Segment[], known: readonly Segment[], addr: number | undefined): string {
  if (addr === undefined) return '';
  const segment = findSegment(segments, addr) ?? findSegment(known, addr);
  return segment === undefined ? ` at 0x${addr.toString(16)}` : ` in ${segment.name} at +0x${(addr - segment.start).toString(16)}`;
}

/** The live segment holding `addr` (segments sorted by start, not overlapping), by binary search. */
function findSegment(segments: readonly Segment[], addr: number): Segment | undefined {
  let lo = 0;
  let hi = segments.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const s = segments[mid]!;
    if (addr < s.start) hi = mid - 1;
    else if (addr >= s.start + s.size) lo = mid + 1;
    else return s;
  }
  return undefined;
}

function insertSegment(segments: Segment[], segment: Segment): void {
  let at = segments.length;
  while (at > 0 && segments[at - 1]!.start > segment.start) at--;
  segments.splice(at, 0, segment);
}

function removeSegment(segments: Segment[], addr: number): Segment | undefined {
  const at = segments.findIndex((s) => s.start === addr);
  return at < 0 ? undefined : segments.splice(at, 1)[0];
}
