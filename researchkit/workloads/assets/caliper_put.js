'use strict';
// researchkit: put KEY VALUE with a fresh key per transaction, like rk-load (no caliper-core import: it would resolve from the
// workspace). Caliper's report has no percentiles, so each finished transaction's create/final times (ms, Caliper's TxStatus)
// go to `<out>/lat-<round>-<worker>.txt` at the end of the round, one "create final ok" line each.
const fs = require('fs');
class PutWorkload {
  async initializeWorkloadModule(workerIndex, totalWorkers, roundIndex, roundArguments, sutAdapter) {
    Object.assign(this, {w: workerIndex, r: roundIndex, a: sutAdapter, i: 0, cc: roundArguments.cc,
                         v: 'a'.repeat(roundArguments.payload), out: roundArguments.out, lines: []});
  }
  async submitTransaction() {
    const k = `cal-${process.pid}-${this.r}-${this.w}-${this.i++}`;
    const res = await this.a.sendRequests({contractId: this.cc, contractFunction: 'put', contractArguments: [k, this.v], readOnly: false});
    for (const s of [].concat(res)) this.lines.push(`${s.GetTimeCreate()} ${s.GetTimeFinal()} ${s.IsCommitted() ? 1 : 0}`);
    return res;
  }
  async cleanupWorkloadModule() {
    if (this.out) fs.writeFileSync(`${this.out}/lat-${this.r}-${this.w}.txt`, this.lines.join('\n') + '\n');
  }
}
module.exports.createWorkloadModule = () => new PutWorkload();
