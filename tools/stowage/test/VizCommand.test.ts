import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import type { Browser, Page } from 'playwright-core';
import { CHROMIUM_PATH, hasChromium, launchChromium } from '@stowage/lab/browser';
import type { MemorySnapshot } from '@stowage/core';
import { findTraceRoot } from '@stowage/lab/replay';
import { readSnapshotPickle } from '@stowage/snapshot-pickle';
import { buildVizPage, EXIT } from '@stowage/cli';
import { examplePickle, expectCleanFailure, realTrace, runStowage, scratchDir, writeSmallTrace } from './runStowage.js';

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

interface Box {
  readonly left: number;
  readonly right: number;
  readonly top: number;
  readonly bottom: number;
}
/** Where the segment map put each row and its label, in page pixels. */
interface MapGeometry {
  readonly barLeft: number;
  readonly barSpace: number;
  readonly scaleBytes: number;
  readonly rows: readonly (Box & { readonly address: number; readonly size: number; readonly width: number })[];
  readonly labels: readonly Box[];
}

function mapGeometry(page: Page): Promise<MapGeometry> {
  return page.evaluate(() => {
    const map = document.getElementById('segments')!;
    const box = (e: Element) => {
      const r = e.getBoundingClientRect();
      return { left: r.left, right: r.right, top: r.top, bottom: r.bottom };
    };
    return {
      barLeft: Number(map.getAttribute('data-bar-left')),
      barSpace: Number(map.getAttribute('data-bar-space')),
      scaleBytes: Number(map.getAttribute('data-scale-bytes')),
      rows: Array.from(map.querySelectorAll('[data-kind=segment]')).map((e) => ({ ...box(e), address: Number(e.getAttribute('data-address')), size: Number(e.getAttribute('data-size')), width: (e as SVGRectElement).width.baseVal.value })),
      labels: Array.from(map.querySelectorAll('[data-kind=segment-label]')).map(box),
    };
  });
}

/** Each row is as wide as its bytes (the largest segment spanning the bar space), or the 2 px minimum. */
function expectRowsScaled({ rows, barSpace, scaleBytes }: MapGeometry): void {
  expect(Math.max(...rows.map((r) => r.size))).to.be.at.most(scaleBytes);
  for (const r of rows) expect(r.width, `row of ${r.size} bytes`).to.be.closeTo(Math.max(2, (r.size / scaleBytes) * barSpace), 1e-3);
  const [small, large] = [rows.reduce((a, b) => (a.size <= b.size ? a : b)), rows.reduce((a, b) => (a.size >= b.size ? a : b))];
  if (small.width > 2) expect(large.width / small.width).to.be.closeTo(large.size / small.size, 1e-3 * (large.size / small.size));
}

/** No label overlaps any row's bar: each ends left of the bars, in its own row's band. */
function expectLabelsBesideBars({ rows, labels }: MapGeometry): void {
  expect(labels).to.have.length(rows.length);
  const barsLeft = Math.min(...rows.map((r) => r.left));
  labels.forEach((label, i) => {
    expect(label.right, `label ${i} left of the bars`).to.be.at.most(barsLeft);
    const others = [rows[i - 1], rows[i + 1]].filter((r) => r !== undefined);
    for (const r of others) expect(label.bottom <= r.top || label.top >= r.bottom || label.right <= r.left, `label ${i} clear of the next rows`).to.equal(true);
  });
}

/** Zooms the segment map in `steps` doublings (ctrl + wheel) about the middle of `target`, waiting for each redraw. */
async function zoomMapAt(page: Page, target: ReturnType<Page['locator']>, steps: number): Promise<void> {
  await page.keyboard.down('Control');
  for (let step = 1; step <= steps; step++) {
    const box = (await target.boundingBox())!;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel(0, -100);
    await page.waitForFunction((zoom) => document.getElementById('segments')!.getAttribute('data-zoom') === String(zoom), 2 ** step);
  }
  await page.keyboard.up('Control');
}

async function timelineWidth(page: Page): Promise<number> {
  return page.$eval('#timeline', (e) => (e as SVGSVGElement).width.baseVal.value);
}

/** The tick labels of one of the timeline's axes (`bytes`, `entries`, `time`), in order. */
function tickLabels(page: Page, axis: string): Promise<string[]> {
  return page.$$eval(`#timeline [data-axis=${axis}] [data-kind=tick]`, (ticks) => ticks.map((t) => (t.tagName === 'text' ? t.textContent : t.querySelector('text')?.textContent) ?? ''));
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

  it('refuses an output in a directory that does not exist before reading the input, exit 2, no stack trace', () => {
    const out = join(dir, 'no', 'such', 'dir', 'x.html');
    expectCleanFailure(runStowage(['viz', trace, '-o', out]), EXIT.usage, /-o must be a file in an existing, writable directory \(no directory .*dir\)/);
    // Checked first: a missing input is not even looked for.
    expectCleanFailure(runStowage(['viz', join(dir, 'none.jsonl'), '-o', out]), EXIT.usage, /-o must be a file in an existing, writable directory/);
  });

  it("gives the page of a trace it replays no time axis (its entries carry the replay's clock), and a snapshot's one", () => {
    const replayed = join(dir, 'replayed.html');
    expect(runStowage(['viz', trace, '-o', replayed]).status).to.equal(EXIT.ok);
    expect(readFileSync(replayed, 'utf8')).to.include('"timeUs":null');
    const json = join(dir, 'timed.json');
    const entry = (action: string, addr: number, size: number, time_us: number) => ({ action, addr, size, stream: 0, time_us, frames: [], compile_context: 'N/A', user_metadata: '' });
    const seg = 0x20000000;
    writeFileSync(json, JSON.stringify({
      segments: [{ device: 0, address: seg, total_size: 2 << 20, allocated_size: 4096, active_size: 4096, requested_size: 4096, stream: 0, segment_type: 'small', segment_pool_id: [0, 0], is_expandable: false, frames: [],
        blocks: [{ address: seg, size: 4096, requested_size: 4096, state: 'active_allocated', frames: [] }, { address: seg + 4096, size: (2 << 20) - 4096, requested_size: 0, state: 'inactive', frames: [] }] }],
      device_traces: [[entry('segment_alloc', seg, 2 << 20, 1000), entry('alloc', seg, 4096, 1500)]],
      allocator_settings: {},
      external_annotations: [],
    }));
    const timed = join(dir, 'timed.html');
    const run = runStowage(['viz', json, '-o', timed]);
    expect(run.status, run.stderr).to.equal(EXIT.ok);
    expect(readFileSync(timed, 'utf8')).to.include('"timeUs":[0,500]');
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
    async function open(html: string, viewport = { width: 1000, height: 1000 }) {
      const page = await browser.newPage({ viewport });
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
      // 1,024 bytes of a 2 MiB row drawn 2/22 of the width are a twentieth of a pixel: zoom in on it (ctrl + wheel).
      await zoomMapAt(page, block, 8);
      expect((await block.boundingBox())!.width).to.be.above(5);
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
      // PyTorch's entries carry the program's times: the page has a time axis.
      expect((await tickLabels(page, 'time')).length).to.be.above(2);
      await page.screenshot({ path: join(SCREENSHOTS, 'pytorch-example.png') });
    });

    it("draws the opt125m trace at the window's width: rows in proportion to their segments' bytes, labels beside them, axes in bytes and entries", async function () {
      const real = realTrace('opt125m_zeroth_order_fedlearn_fromstart');
      if (real === undefined) this.skip();
      const html = join(dir, 'opt125m.html');
      expect(runStowage(['viz', real, '-o', html]).status).to.equal(EXIT.ok);
      const page = await open(html, { width: 1400, height: 900 });
      const geometry = await mapGeometry(page);
      expect(geometry.rows).to.have.length(61);
      expectRowsScaled(geometry);
      expectLabelsBesideBars(geometry);
      // The page spans the window, less the body's 16 px margins.
      expect(await timelineWidth(page)).to.equal(await page.evaluate(() => document.getElementById('root')!.clientWidth)).and.to.be.at.least(1400 - 32 - 20);
      const bytesTicks = await tickLabels(page, 'bytes');
      expect(bytesTicks.length).to.be.at.least(3);
      for (const t of bytesTicks) expect(t).to.match(/^\d+(\.\d+)? (B|KiB|MiB|GiB)$/);
      const entryTicks = await tickLabels(page, 'entries');
      expect(entryTicks.length).to.be.at.least(5);
      expect(entryTicks[0]).to.equal('0');
      expect(entryTicks.map(Number)).to.deep.equal([...entryTicks.map(Number)].sort((a, b) => a - b));
      expect(Number(entryTicks.at(-1))).to.be.at.most(23105);
      await page.screenshot({ path: join(SCREENSHOTS, 'opt125m_zeroth_order_fedlearn_fromstart.png') });
      // A narrower window: the page draws again at the new width, rows still in proportion.
      await page.setViewportSize({ width: 900, height: 900 });
      await page.waitForFunction(() => (document.getElementById('timeline') as unknown as SVGSVGElement).width.baseVal.value === document.getElementById('root')!.clientWidth);
      expect(await timelineWidth(page)).to.be.below(900);
      expectRowsScaled(await mapGeometry(page));
    });

    it('keeps the slider and the details box in view with the 1,029 segments of the 2.7B full step, and no label under a bar', async function () {
      const real = realTrace('cs336_2p7b_ctx256_fullstep_fp32');
      if (real === undefined) this.skip();
      const html = join(dir, '2p7b.html');
      expect(runStowage(['viz', real, '-o', html]).status).to.equal(EXIT.ok);
      const page = await open(html, { width: 1400, height: 900 });
      const geometry = await mapGeometry(page);
      expect(geometry.rows).to.have.length(1029);
      expectRowsScaled(geometry);
      expectLabelsBesideBars(geometry);
      await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
      expect(await page.evaluate(() => window.scrollY)).to.be.above(10_000);
      const inView = (selector: string) =>
        page.$eval(selector, (e) => {
          const r = e.getBoundingClientRect();
          return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight;
        });
      expect(await inView('#moment'), 'slider in view').to.equal(true);
      expect(await inView('#details'), 'details in view').to.equal(true);
      const last = geometry.rows.at(-1)!;
      await page.locator(`[data-kind=block][data-address="${last.address}"]`).first().hover();
      expect(await page.textContent('#details')).to.include(`block 0x${last.address.toString(16)}`);
      await page.screenshot({ path: join(SCREENSHOTS, 'cs336_2p7b_ctx256_fullstep_fp32-scrolled.png') });
    });

    it("draws the demo's recording with its LMS marks in lanes of their own (aggregated, hoverable, in the legend in their own colours) and a time axis", async () => {
      const recording = join(dir, 'demo.json');
      const demo = runStowage(['demo', '--skip-composition', '--record', recording], { timeoutMs: 110_000 });
      expect(demo.status, demo.stderr).to.equal(EXIT.ok);
      const entries = (JSON.parse(readFileSync(recording, 'utf8')) as MemorySnapshot).device_traces[0]!;
      const html = join(dir, 'demo.html');
      expect(runStowage(['viz', recording, '-o', html]).status).to.equal(EXIT.ok);
      const page = await open(html, { width: 1400, height: 900 });
      const plot = (await page.locator('#timeline [data-kind=plot]').boundingBox())!;
      const reclaimedColor = await page.getAttribute('#legend [data-legend=reclaimed]', 'data-color');
      for (const kind of ['page_out', 'page_in']) {
        const count = entries.filter((e) => (e.action as string) === kind).length;
        expect(count, kind).to.be.greaterThan(0);
        const lane = (await page.locator(`#timeline [data-kind=lane][data-marker=${kind}]`).boundingBox())!;
        expect(lane.y, `${kind} lane under the plot`).to.be.at.least(plot.y + plot.height);
        const marks = await page.$$eval(`#timeline [data-kind=marker][data-marker=${kind}]`, (nodes) =>
          nodes.map((n) => ({ box: n.getBoundingClientRect().toJSON() as DOMRect, count: Number(n.getAttribute('data-count')), fill: n.getAttribute('fill') })),
        );
        expect(marks.reduce((s, m) => s + m.count, 0), `${kind} entries, all marked`).to.equal(count);
        expect(marks.length, `${kind} runs merged`).to.be.below(count / 4);
        for (const { box } of marks) {
          expect(box.width, 'hoverable').to.be.at.least(3);
          expect(box.top).to.be.at.least(lane.y - 0.01);
          expect(box.bottom).to.be.at.most(lane.y + lane.height + 0.01);
        }
        const color = await page.getAttribute(`#legend [data-legend=${kind}]`, 'data-color');
        expect(color, `${kind} in the legend`).to.equal(marks[0]!.fill);
        expect(color).not.to.equal(reclaimedColor);
        const first = page.locator(`#timeline [data-kind=marker][data-marker=${kind}]`).first();
        await first.hover();
        expect(await page.textContent('#details')).to.match(new RegExp(`^${kind} (×\\d+, entries \\d+–\\d+|at entry \\d+)`));
      }
      // A click on a mark moves the slider to just after its run.
      const mark = page.locator('#timeline [data-kind=marker][data-marker=page_out]').nth(3);
      const lastEntry = Number(await mark.getAttribute('data-last-entry'));
      await mark.click();
      expect(await page.inputValue('#moment')).to.equal(String(lastEntry + 1));
      expect(await page.getAttribute('#segments', 'data-moment')).to.equal(String(lastEntry + 1));
      await page.locator('#moment').focus();
      await page.keyboard.press('End');
      expect(await page.getAttribute('#segments', 'data-moment')).to.equal(String(entries.length));
      expectLabelsBesideBars(await mapGeometry(page));
      // A recording's entries carry the program's times: a time axis under the entries axis, from 0 up.
      const entryTicks = await tickLabels(page, 'entries');
      const timeTicks = await tickLabels(page, 'time');
      expect(timeTicks).to.have.length(entryTicks.length).and.to.have.length.above(4);
      expect(timeTicks[0]).to.match(/^0 (µs|ms|s)$/);
      for (const t of timeTicks) expect(t).to.match(/^\d+(\.\d+)? (µs|ms|s)$/);
      await page.screenshot({ path: join(SCREENSHOTS, 'demo-record.png') });
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
      // Told that the times are not the program's (a replay's clock), the page keeps the entries axis only.
      writeFileSync(html, buildVizPage(snapshot as unknown as MemorySnapshot, { timed: false }));
      const untimed = await open(html);
      expect(await untimed.locator('#timeline [data-axis=entries] [data-kind=tick]').count()).to.be.above(0);
      expect(await untimed.locator('#timeline [data-axis=time]').count()).to.equal(0);
    });
  });
});
