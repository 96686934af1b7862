#!/usr/bin/env node
// The stowage command. The code is TypeScript compiled to dist/ (`pnpm build`); this file only loads it, so that
// pnpm can link the command before the first build.
import '../dist/main.js';
