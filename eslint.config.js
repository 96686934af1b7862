// Lint rules that encode Stowage's composition rules (STYLE.md §5, DESIGN.md "Packages").
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const noGlobalContainer = {
  paths: [
    {
      name: 'tsyringe',
      importNames: ['container', 'singleton', 'registry', 'scoped'],
      message: 'Library code never touches the global container: register into the runtime container you are given.',
    },
  ],
  patterns: [{ group: ['@stowage/*/src/*', '@stowage/*/dist/*', '../../*/src/*'], message: 'Import other packages through their exports map only.' }],
};

// Nothing under packages/ imports tools/ (DESIGN.md, "Layers"): the lab's instruments are for tests and benches.
const noTools = {
  group: ['@stowage/lab', '@stowage/lab/*', '@stowage/cli', '@stowage/cli/*', '@stowage/snapshot-pickle', '@stowage/snapshot-pickle/*', '**/tools/**'],
  message: "A library package's src never imports tools/ (the lab, the CLI, snapshot-pickle): only its tests and benches may.",
};
const packageSrc = { ...noGlobalContainer, patterns: [...noGlobalContainer.patterns, noTools] };

export default tseslint.config(
  { ignores: ['**/dist/**', '**/dist-test/**', '**/dist-bench/**', '**/dist-browser/**', '**/node_modules/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  { files: ['**/*.cjs'], languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', module: 'writable', console: 'readonly' } }, rules: { '@typescript-eslint/no-require-imports': 'off' } },
  {
    files: ['packages/*/src/**/*.ts', 'examples/*/src/**/*.ts', 'tools/*/src/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', noGlobalContainer] },
  },
  {
    files: ['packages/*/src/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', packageSrc] },
  },
  {
    files: ['packages/core/src/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { ...packageSrc, patterns: [...packageSrc.patterns, { group: ['@stowage/*'], message: 'core imports no plugin package.' }] },
      ],
    },
  },
  {
    // The one place that may name the global container: as the empty parent of each runtime's child container.
    files: ['packages/core/src/createRuntime.ts'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-unused-expressions': ['error', { allowShortCircuit: true }],
    },
  },
);
