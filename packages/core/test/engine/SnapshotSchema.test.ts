import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Parser } from 'pickleparser';
import { findTraceRoot } from '@stowage/lab/replay';
import { engine, MiB } from './helpers.js';

type Json = Record<string, unknown>;

/** The type of each key of an object, as JSON sees it. */
function shape(value: Json): Record<string, string> {
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v]));
}

/**
 * PyTorch's memory visualizer loads `torch.cuda.memory._snapshot()` output; a Stowage snapshot saved as JSON
 * must have the same structure. The reference is the example snapshot pickle under ../shared/traces/examples.
 */
describe('CachingAllocator#snapshot schema', () => {
  const root = findTraceRoot();
  const pickle = root && readdirSync(join(root, 'examples')).find((f) => f.endsWith('.pickle'));

  it('has the structure of a PyTorch snapshot: segments, blocks, trace entries and settings', function () {
    if (!root || !pickle) {
      console.log('    skipped: no example snapshot pickle under ../shared/traces/examples');
      this.skip();
    }
    const reference = new Parser().parse(readFileSync(join(root, 'examples', pickle))) as Json;
    const refSegment = (reference.segments as Json[])[0]!;
    const refBlock = (refSegment.blocks as Json[])[0]!;
    const refEntry = (reference.device_traces as Json[][]).flat()[0]!;
    const refFrame = (refEntry.frames as Json[])[0]!;

    const { allocator } = engine({ preset: 'pytorch' }, { capacityBytes: 64 * MiB });
    allocator.recordHistory({ stacks: true });
    const a = allocator.allocate(3 * MiB);
    allocator.allocate(1000);
    allocator.free(a);
    const ours = JSON.parse(JSON.stringify(allocator.snapshot())) as Json;

    expect(Object.keys(ours).sort()).to.deep.equal(Object.keys(reference).sort());
    const segment = (ours.segments as Json[])[0]!;
    expect(shape(segment)).to.deep.equal(shape(refSegment));
    expect(shape((segment.blocks as Json[])[0]!)).to.deep.equal(shape(refBlock));
    const entries = (ours.device_traces as Json[][])[0]!;
    for (const entry of entries) {
      const { device_free: _ignored, ...common } = shape(entry);
      expect(common).to.deep.equal(shape(refEntry));
    }
    expect(shape((entries[0]!.frames as Json[])[0]!)).to.deep.equal(shape(refFrame));
    const refSettings = reference.allocator_settings as Json;
    for (const key of ['max_split_size', 'garbage_collection_threshold', 'expandable_segments', 'roundup_power2_divisions', 'PYTORCH_CUDA_ALLOC_CONF']) {
      expect(shape(ours.allocator_settings as Json)[key], `allocator_settings.${key}`).to.equal(shape(refSettings)[key]);
    }
    expect(Object.keys((ours.allocator_settings as Json).roundup_power2_divisions as Json)).to.deep.equal(Object.keys(refSettings.roundup_power2_divisions as Json));
    const states = new Set((reference.segments as Json[]).flatMap((s) => (s.blocks as Json[]).map((b) => b.state)));
    for (const b of (ours.segments as Json[]).flatMap((s) => s.blocks as Json[])) expect([...states, 'active_pending_free']).to.include(b.state);
    const actions = new Set((reference.device_traces as Json[][]).flat().map((e) => e.action));
    expect([...actions].every((x) => ['alloc', 'free_requested', 'free_completed', 'segment_alloc', 'segment_free', 'segment_map', 'segment_unmap', 'oom', 'snapshot'].includes(x as string))).to.equal(true);
  });
});
