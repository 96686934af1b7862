// jasmine-core 5's CommonJS build, bundled into the suite's page (test/tfjsSuite/BrowserSuite.ts resolves it through
// the `jasmine` package); it ships no type declarations. browser/suiteEntry.ts says what it uses of it.
declare module 'jasmine-core/lib/jasmine-core/jasmine.js' {
  const jasmineRequire: unknown;
  export default jasmineRequire;
}
