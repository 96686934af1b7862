import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { OrtWebModule } from '@stowage/lab/onnx';
import { installOrtForTransformersJs } from '@stowage/lab/onnx';

const KEY = Symbol.for('onnxruntime');

/** A stand-in onnxruntime-web recording what InferenceSession.create was given. */
function standInOrt(created: unknown[]): OrtWebModule {
  return {
    env: { wasm: {} },
    Tensor: class {},
    InferenceSession: { create: (model: Uint8Array, options?: object) => Promise.resolve(created.push([model, options])) },
  };
}

describe('installOrtForTransformersJs', () => {
  it("puts the runtime at Symbol.for('onnxruntime'), reading a file path into bytes, its wasm files local; undo removes it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ort-for-transformers-'));
    try {
      writeFileSync(join(dir, 'model.onnx'), new Uint8Array([1, 2, 3]));
      const created: unknown[] = [];
      const ort = standInOrt(created);
      const undo = installOrtForTransformersJs(ort, dir);
      const installed = (globalThis as Record<symbol, OrtWebModule>)[KEY]!;
      await installed.InferenceSession.create(join(dir, 'model.onnx') as never, { executionProviders: [] });
      await installed.InferenceSession.create(new Uint8Array([4]));
      expect(created).to.have.length(2);
      expect([...((created[0] as [Uint8Array])[0])]).to.deep.equal([1, 2, 3]);
      expect((created[0] as [Uint8Array, object])[1]).to.deep.equal({ executionProviders: [] });
      expect([...((created[1] as [Uint8Array])[0])]).to.deep.equal([4]);
      expect(installed.env).to.equal(ort.env);
      expect(ort.env.wasm.wasmPaths).to.match(/^file:\/\/.*\/$/);
      expect(() => installOrtForTransformersJs(ort, dir)).to.throw(/already set/);
      undo();
      expect(KEY in globalThis).to.equal(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
