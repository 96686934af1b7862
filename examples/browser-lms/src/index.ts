export type { BackendFigures, BrowserLmsReport, StowageFigures } from './BrowserLmsReport.js';
export { BUNDLE_PATH, buildPage, EXAMPLE_ROOT, PAGE_PATH } from './buildPage.js';
export type { PageServer } from './servePage.js';
export { servePage } from './servePage.js';
