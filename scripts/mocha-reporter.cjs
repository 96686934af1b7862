// Mocha's spec reporter, plus one plain closing line that CI reads: "N passed, N failed, N skipped".
// Skipped tests are listed with the reason they gave (this.skip() after a message), so a skip never hides work.
const Mocha = require('mocha');
const { EVENT_RUN_END, EVENT_TEST_PENDING } = Mocha.Runner.constants;

class StowageReporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const skipped = [];
    runner.on(EVENT_TEST_PENDING, (test) => skipped.push(test.fullTitle()));
    runner.once(EVENT_RUN_END, () => {
      const s = runner.stats;
      if (skipped.length) console.log(`Skipped:\n${skipped.map((t) => `  - ${t}`).join('\n')}`);
      console.log(`${s.passes} passed, ${s.failures} failed, ${s.pending} skipped`);
    });
  }
}
module.exports = StowageReporter;
