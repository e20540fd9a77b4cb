'use strict';
// researchkit bench/ledger.py: Caliper's side of the rk-load cross-check. Each transaction is `put KEY VALUE` on the kv
// chaincode (rk-kv) with a fresh key and a value of `payload` bytes, as rk-load sends. Caliper's report has no percentiles, so
// every finished transaction's create/final times (ms, Caliper's own TxStatus) go to `<out>/lat-<round>-<worker>.txt` at the end
// of the round, one "create final ok" line each; Caliper waits for every pending transaction before cleanupWorkloadModule.
// No caliper-core import (it would resolve from the workspace, not from the install).
const fs = require('fs');
class PutWorkload {
  async initializeWorkloadModule(workerIndex, totalWorkers, roundIndex, roundArguments, sutAdapter) {
    Object.assign(this, {w: workerIndex, r: roundIndex, a: sutAdapter, i: 0, cc: roundArguments.cc,
                         v: 'v'.repeat(roundArguments.payload), out: roundArguments.out, lines: []});
  }
  async submitTransaction() {
    const k = `cal-${process.pid}-${this.r}-${this.w}-${this.i++}`;
    const res = await this.a.sendRequests({contractId: this.cc, contractFunction: 'put', contractArguments: [k, this.v], readOnly: false});
    for (const s of [].concat(res)) {
      this.lines.push(`${s.GetTimeCreate()} ${s.GetTimeFinal()} ${s.IsCommitted() ? 1 : 0}`);
    }
    return res;
  }
  async cleanupWorkloadModule() {
    if (this.out) fs.writeFileSync(`${this.out}/lat-${this.r}-${this.w}.txt`, this.lines.join('\n') + '\n');
  }
}
module.exports.createWorkloadModule = () => new PutWorkload();
