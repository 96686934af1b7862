import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import { CHROMIUM_PATH, hasChromium, launchChromium } from '@stowage/lab/browser';
import type { MemorySnapshot } from '@stowage/core';
import { findTraceRoot } from '@stowage/lab/replay';
import { readSnapshotPickle } from '@stowage/snapshot-pickle';
import { buildVizPage, EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

/** Screenshots go here (git-ignored): tools/stowage/screenshots/. */
const SCREENSHOTS = fileURLToPath(new URL('../screenshots/', import.meta.url));

/** The peak of reserved bytes over a snapshot's trace, walked back from its segments (as PyTorch's viewer does). */
function peakReserved(snapshot: MemorySnapshot): number {
  const entries = snapshot.device_traces[0] ?? [];
  const delta = (a: string, size: number): number => (a === 'segment_alloc' || a === 'segment_map' ? size : a === 'segment_free' || a === 'segment_unmap' ? -size : 0);
  let reserved = snapshot.segments.reduce((s, seg) => s + seg.total_size, 0) - entries.reduce((s, e) => s + delta(e.action, e.size), 0);
  let peak = reserved;
  for (const e of entries) peak = Math.max(peak, (reserved += delta(e.action, e.size)));
  return peak;
}

describe('stowage viz', function () {
  this.timeout(120_000);
  const dir = scratchDir();
  const trace = writeSmallTrace(dir);

  it('writes one self-contained HTML page that loads nothing from the network', () => {
    const out = join(dir, 'small.html');
    const run = runStowage(['viz', trace, '-o', out]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    const html = readFileSync(out, 'utf8');
    expect(html).to.match(/^<!doctype html>/);
    expect(html).not.to.match(/\b(src|href)=["']?(https?:)?\/\//i);
    expect(html).to.include("default-src 'none'");
  });

  it('refuses a missing snapshot and a file of another format, exit 3, no stack trace', () => {
    expectCleanFailure(runStowage(['viz', join(dir, 'none.pickle'), '-o', join(dir, 'x.html')]), EXIT.input, /No file at .*none\.pickle/);
    expectCleanFailure(runStowage(['viz', fileURLToPath(import.meta.url), '-o', join(dir, 'x.html')]), EXIT.input, /\[UNKNOWN_FORMAT\]/);
  });

  it('refuses a --device the snapshot lacks, naming the devices it has, exit 3, writing nothing', function () {
    const pickle = examplePickle();
    if (pickle === undefined) this.skip();
    const out = join(dir, 'device1.html');
    expectCleanFailure(runStowage(['viz', pickle, '--device', '1', '-o', out]), EXIT.input, /has nothing on device 1; it has device 0: give --device 0\. \[DEVICE_MISMATCH\]/);
    expect(existsSync(out)).to.equal(false);
  });

  it('refuses an output in a directory that does not exist, exit 2, no stack trace', () => {
    expectCleanFailure(runStowage(['viz', trace, '-o', join(dir, 'no', 'such', 'dir', 'x.html')]), EXIT.usage, /-o must be a file in an existing, writable directory \(writing failed: ENOENT\)/);
  });

  describe('the page in headless Chromium', () => {
    let browser: Browser;
    before(async function () {
      if (!hasChromium()) {
        console.log(`    skipped: ${CHROMIUM_PATH} is missing (apt-get install chromium)`);
        this.skip();
      }
      browser = await launchChromium();
      mkdirSync(SCREENSHOTS, { recursive: true });
    });
    after(async () => browser?.close());

    /** Opens `page` (an HTML file) and returns the page, failing on any page error. */
    async function open(html: string) {
      const page = await browser.newPage({ viewport: { width: 1000, height: 1000 } });
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(String(e)));
      page.on('requestfailed', (r) => errors.push(`request ${r.url()}`));
      await page.goto(`file://${html}`);
      await page.waitForSelector('#segments');
      expect(errors, 'page errors').to.deep.equal([]);
      return page;
    }

    it("draws a replayed trace's snapshot: its segments, the peak of its reserved line, the state of a chosen block", async () => {
      const json = join(dir, 'peak.json');
      expect(runStowage(['snapshot', trace, '--at', '2', '-o', json]).status).to.equal(EXIT.ok);
      const snapshot = JSON.parse(readFileSync(json, 'utf8')) as MemorySnapshot;
      const html = join(dir, 'peak.html');
      expect(runStowage(['viz', json, '-o', html]).status).to.equal(EXIT.ok);
      const page = await open(html);
      expect(await page.locator('[data-kind=segment]').count()).to.equal(snapshot.segments.length);
      expect(Number(await page.getAttribute('#timeline', 'data-peak-reserved'))).to.equal(22 << 20);
      const small = snapshot.segments.find((s) => s.total_size === 2 << 20)!.blocks[0]!;
      const block = page.locator(`[data-kind=block][data-address="${small.address}"]`);
      expect(await block.getAttribute('data-state')).to.equal('allocated');
      expect(await block.getAttribute('data-requested')).to.equal('1000');
      await block.hover();
      expect(await page.textContent('#details')).to.match(/requested: 1000 B[\s\S]*stream: 0/);
      // Back to the second entry of the replay's trace (segment_alloc, alloc): the 3 MiB allocation in its segment.
      await page.fill('#moment', '2');
      await page.dispatchEvent('#moment', 'input');
      expect(await page.locator('[data-kind=segment]').count()).to.equal(1);
      expect(await page.locator('[data-kind=block][data-state=allocated]').count()).to.equal(1);
      await page.screenshot({ path: join(SCREENSHOTS, 'small-trace.png'), fullPage: true });
    });

    it("draws a real trace replayed through PyTorch's rules with PyTorch's own segment count and peak reserved bytes", async function () {
      const root = findTraceRoot();
      if (root === undefined) {
        console.log('    skipped: no shared/traces directory above the working directory (set STOWAGE_TRACES)');
        this.skip();
      }
      const real = join(root, 'pytorch', 'cs336_forward_fp32_ctx128_b.jsonl.gz'); // "must match": 29 segments
      const json = join(dir, 'real.json');
      expect(runStowage(['snapshot', real, '--at', 'end', '-o', json]).status).to.equal(EXIT.ok);
      const replay = JSON.parse(runStowage(['--json', 'replay', real]).stdout) as { peakReservedBytes: number; pytorch: { segments: number } };
      const snapshot = JSON.parse(readFileSync(json, 'utf8')) as MemorySnapshot;
      const html = join(dir, 'real.html');
      expect(runStowage(['viz', json, '-o', html]).status).to.equal(EXIT.ok);
      const page = await open(html);
      expect(await page.locator('[data-kind=segment]').count()).to.equal(snapshot.segments.length).and.to.equal(replay.pytorch.segments);
      expect(Number(await page.getAttribute('#timeline', 'data-peak-reserved'))).to.equal(replay.peakReservedBytes).and.to.equal(peakReserved(snapshot));
      const live = snapshot.segments.flatMap((seg) => seg.blocks).find((b) => b.state === 'active_allocated')!;
      expect(await page.locator(`[data-kind=block][data-address="${live.address}"]`).getAttribute('data-state')).to.equal('allocated');
      await page.screenshot({ path: join(SCREENSHOTS, 'cs336_forward_fp32_ctx128_b.png') });
    });

    it("draws PyTorch's example snapshot pickle: every segment, and the reserved peak of its trace", async function () {
      const pickle = examplePickle();
      if (pickle === undefined) this.skip();
      const html = join(dir, 'example.html');
      const run = runStowage(['viz', pickle, '-o', html]);
      expect(run.status, run.stderr).to.equal(EXIT.ok);
      const snapshot = readSnapshotPickle(readFileSync(pickle));
      const page = await open(html);
      expect(await page.locator('[data-kind=segment]').count()).to.equal(snapshot.segments.length);
      expect(Number(await page.getAttribute('#timeline', 'data-peak-reserved'))).to.equal(peakReserved(snapshot));
      const blocks = snapshot.segments.flatMap((s) => s.blocks);
      expect(await page.locator('[data-kind=block]').count()).to.equal(blocks.length);
      const pending = blocks.find((b) => b.state === 'active_pending_free') ?? blocks.find((b) => b.state === 'inactive')!;
      expect(await page.locator(`[data-kind=block][data-address="${pending.address}"]`).getAttribute('data-state')).to.equal(pending.state === 'inactive' ? 'cached' : 'pending-free');
      await page.screenshot({ path: join(SCREENSHOTS, 'pytorch-example.png') });
    });

    it('marks LMS page-outs and IPC limbo where the snapshot has them', async () => {
      // A hand-made snapshot: a storage paged out (its block freed by LMS) and one in the producer's limbo.
      const entry = (action: string, addr: number, size: number) => ({ action, addr, size, stream: 0, time_us: 0, frames: [], compile_context: 'N/A', user_metadata: '' });
      const seg = 0x10000000;
      const snapshot = {
        segments: [{ device: 0, address: seg, total_size: 2 << 20, allocated_size: 4096, active_size: 4096, requested_size: 4096, stream: 0, segment_type: 'small', segment_pool_id: [0, 0], is_expandable: false, frames: [],
          blocks: [
            { address: seg, size: 4096, requested_size: 4096, state: 'inactive', frames: [] },
            { address: seg + 4096, size: 4096, requested_size: 4096, state: 'active_allocated', frames: [] },
            { address: seg + 8192, size: (2 << 20) - 8192, requested_size: 0, state: 'inactive', frames: [] },
          ] }],
        device_traces: [[
          entry('segment_alloc', seg, 2 << 20), entry('alloc', seg, 4096), entry('alloc', seg + 4096, 4096),
          entry('page_out', seg, 4096), entry('free_requested', seg, 4096), entry('free_completed', seg, 4096), entry('ipc_limbo', seg + 4096, 4096),
        ]],
        allocator_settings: {},
        external_annotations: [],
      };
      const html = join(dir, 'marks.html');
      writeFileSync(html, buildVizPage(snapshot as unknown as MemorySnapshot));
      const page = await open(html);
      expect(await page.locator('[data-kind=marker][data-marker=page_out]').count()).to.equal(1);
      expect(await page.locator('[data-kind=marker][data-marker=ipc_limbo]').count()).to.equal(1);
      expect(await page.locator(`[data-kind=block][data-address="${seg}"]`).getAttribute('data-state')).to.equal('reclaimed');
      expect(await page.locator(`[data-kind=block][data-address="${seg + 4096}"]`).getAttribute('data-limbo')).to.equal('true');
      await page.screenshot({ path: join(SCREENSHOTS, 'lms-ipc-marks.png') });
    });
  });
});
