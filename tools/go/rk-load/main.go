// rk-load: open-loop (fixed rate) or closed-loop (N clients) write load on a Fabric gateway peer, one row per transaction.
//
// Part of researchkit's ledger layer (researchkit/workloads/fabload.py wraps it); built by tools/install-go-tools (a `local`
// line of tools/go-tools.txt, pinned by this directory's go.sum).
//
// Open loop: transaction i is due at t0 + i/rate whatever happened to earlier ones, each in its own goroutine; latency is
// measured from that intended time (no coordinated omission). With -max-inflight K > 0, a transaction due while K are in
// flight is not sent: it becomes a failed row with error "inflight-cap", so overload stays visible. Closed loop: N clients,
// each submits its next transaction when the previous one committed.
//
// The first -warmup of sending is sent like the rest but its rows carry warmup=true and the summary leaves them out; the
// measured window (-duration) follows it.
//
// Output: one JSON summary line on stdout; with -rows FILE one CSV row per transaction (warm-up and shed ones included):
// tx_id, intended_s, dispatched_s, endorsed_s, submitted_s, committed_s (seconds since the start; for a failed transaction
// the stages it did not reach carry the time it failed), block, ok, warmup, error.
package main

import (
	"crypto/x509"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hyperledger/fabric-gateway/pkg/client"
	"github.com/hyperledger/fabric-gateway/pkg/hash"
	"github.com/hyperledger/fabric-gateway/pkg/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ErrInflightCap is the error of a transaction not sent because -max-inflight were in flight when it was due.
const ErrInflightCap = "inflight-cap"

type row struct {
	TxID                                                 string
	Intended, Dispatched, Endorsed, Submitted, Committed time.Duration // since t0
	Block                                                uint64
	HasBlock, OK, Warmup, Shed                           bool
	Err                                                  string
}

func die(what string, err error) {
	fmt.Fprintf(os.Stderr, "rk-load: %s: %v\n", what, err)
	os.Exit(2)
}

// badFlag rejects a flag value before anything connects.
func badFlag(name, msg string) {
	fmt.Fprintf(os.Stderr, "rk-load: -%s: %s\n", name, msg)
	os.Exit(2)
}

type cpuTimes struct{ user, sys float64 }

func cpuNow() cpuTimes {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		die("getrusage", err)
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return cpuTimes{tv(ru.Utime), tv(ru.Stime)}
}

// finite keeps the JSON line valid (encoding/json refuses NaN and Inf).
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 6, 64) }

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "rk-load: write load on a Fabric gateway, one row per transaction; JSON summary on stdout.\n"+
			"usage: rk-load -peer IP:PORT -tlsca PEM -msp DIR -mspid ID -channel C -cc NAME (-rate R | -clients N [-count T]) [-warmup D] -duration D [-max-inflight K] [-payload B] [-timeout D] [-rows FILE]\n")
		flag.PrintDefaults()
	}
	peer := flag.String("peer", "", "gateway peer host:port")
	tlsca := flag.String("tlsca", "", "TLS CA certificate of the peer (PEM)")
	msp := flag.String("msp", "", "MSP dir of the client identity (signcerts/cert.pem, keystore/*)")
	mspid := flag.String("mspid", "", "MSP id of the client identity")
	channel := flag.String("channel", "", "channel")
	cc := flag.String("cc", "", "chaincode name (its function put KEY VALUE is called)")
	rate := flag.Float64("rate", 0, "open loop: transactions per second (0: closed loop with -clients)")
	clients := flag.Int("clients", 1, "closed loop: concurrent clients, each waiting for its commit")
	count := flag.Int64("count", 0, "closed loop: stop after this many transactions were dispatched (warm-up ones included); -duration then only bounds the run; 0 = no count")
	dur := flag.Duration("duration", 10*time.Second, "measured sending window, after the warm-up")
	warmup := flag.Duration("warmup", 0, "sending time before the measured window; its rows carry warmup=true and the summary excludes them")
	maxInflight := flag.Int("max-inflight", 0, "open loop: a transaction due while this many are in flight is recorded as failed (inflight-cap), not sent; 0 = no cap")
	payload := flag.Int("payload", 100, "value bytes per put")
	rows := flag.String("rows", "", "write one CSV row per transaction to this file")
	timeout := flag.Duration("timeout", 30*time.Second, "per transaction: limit of the endorsement and of the submission each; the commit status gets twice this")
	flag.Parse()

	// bad input fails here, before anything connects
	if flag.NArg() > 0 {
		badFlag(flag.Arg(0), "unexpected argument")
	}
	for _, f := range []struct{ name, v string }{{"peer", *peer}, {"tlsca", *tlsca}, {"msp", *msp}, {"mspid", *mspid}, {"channel", *channel}, {"cc", *cc}} {
		if f.v == "" {
			badFlag(f.name, "required")
		}
	}
	if math.IsNaN(*rate) || math.IsInf(*rate, 0) || *rate < 0 {
		badFlag("rate", fmt.Sprintf("must be >= 0 transactions per second (0: closed loop), got %v", *rate))
	}
	if *rate == 0 && *clients < 1 {
		badFlag("clients", fmt.Sprintf("must be >= 1, got %d", *clients))
	}
	if *count < 0 {
		badFlag("count", fmt.Sprintf("must be >= 0 transactions (0: no count), got %d", *count))
	}
	if *count > 0 && *rate > 0 {
		badFlag("count", "a transaction count is for the closed loop (-rate 0 -clients N)")
	}
	if *dur <= 0 {
		badFlag("duration", fmt.Sprintf("must be > 0, got %v", *dur))
	}
	if *warmup < 0 {
		badFlag("warmup", fmt.Sprintf("must be >= 0, got %v", *warmup))
	}
	if *maxInflight < 0 {
		badFlag("max-inflight", fmt.Sprintf("must be >= 0 (0 = no cap), got %d", *maxInflight))
	}
	if *rate == 0 && *maxInflight > 0 && *maxInflight < *clients {
		badFlag("max-inflight", fmt.Sprintf("closed loop: %d is below -clients %d (the clients would shed in a busy loop)", *maxInflight, *clients))
	}
	if *timeout <= 0 {
		badFlag("timeout", fmt.Sprintf("must be > 0, got %v", *timeout))
	}
	if *payload < 0 {
		badFlag("payload", fmt.Sprintf("must be >= 0 bytes, got %d", *payload))
	}
	if *rate > 0 && *rate*(warmup.Seconds()+dur.Seconds()) > 1e8 {
		badFlag("rate", "rate x (warmup + duration) exceeds 1e8 transactions")
	}

	pem, err := os.ReadFile(*tlsca)
	if err != nil {
		die("tlsca", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		die("tlsca", fmt.Errorf("no PEM certificate in %s", *tlsca))
	}
	conn, err := grpc.NewClient(*peer, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))
	if err != nil {
		die("grpc", err)
	}
	defer conn.Close()
	certPEM, err := os.ReadFile(filepath.Join(*msp, "signcerts", "cert.pem"))
	if err != nil {
		die("cert", err)
	}
	cert, err := identity.CertificateFromPEM(certPEM)
	if err != nil {
		die("cert", err)
	}
	id, err := identity.NewX509Identity(*mspid, cert)
	if err != nil {
		die("identity", err)
	}
	keys, _ := filepath.Glob(filepath.Join(*msp, "keystore", "*"))
	if len(keys) == 0 {
		die("key", fmt.Errorf("no key in %s/keystore", *msp))
	}
	keyPEM, err := os.ReadFile(keys[0])
	if err != nil {
		die("key", err)
	}
	key, err := identity.PrivateKeyFromPEM(keyPEM)
	if err != nil {
		die("key", err)
	}
	sign, err := identity.NewPrivateKeySign(key)
	if err != nil {
		die("sign", err)
	}
	gw, err := client.Connect(id, client.WithSign(sign), client.WithHash(hash.SHA256), client.WithClientConnection(conn),
		client.WithEndorseTimeout(*timeout), client.WithSubmitTimeout(*timeout), client.WithCommitStatusTimeout(2**timeout))
	if err != nil {
		die("connect", err)
	}
	defer gw.Close()
	contract := gw.GetNetwork(*channel).GetContract(*cc)
	value := make([]byte, *payload)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}

	var mu sync.Mutex
	var out []row
	record := func(r row) { mu.Lock(); out = append(out, r); mu.Unlock() }
	var inflight, maxSeen atomic.Int64
	enter := func() {
		n := inflight.Add(1)
		for m := maxSeen.Load(); n > m && !maxSeen.CompareAndSwap(m, n); m = maxSeen.Load() {
		}
	}
	var wg sync.WaitGroup
	cpu0 := cpuNow()
	t0 := time.Now()
	// one transaction: propose (its id is known before endorsement), endorse, submit to ordering, wait for the commit status
	tx := func(i int64, intended time.Duration, warm bool) {
		defer inflight.Add(-1)
		r := row{Intended: intended, Dispatched: time.Since(t0), Warmup: warm}
		fail := func(err error) {
			now := time.Since(t0)
			for _, p := range []*time.Duration{&r.Endorsed, &r.Submitted, &r.Committed} {
				if *p == 0 {
					*p = now
				}
			}
			r.Err = err.Error()
			record(r)
		}
		prop, err := contract.NewProposal("put", client.WithArguments(fmt.Sprintf("k%d", i), string(value)))
		if err != nil {
			fail(err)
			return
		}
		r.TxID = prop.TransactionID()
		txn, err := prop.Endorse()
		if err != nil {
			fail(err)
			return
		}
		r.Endorsed = time.Since(t0)
		commit, err := txn.Submit()
		if err != nil {
			fail(err)
			return
		}
		r.Submitted = time.Since(t0)
		st, err := commit.Status()
		if err != nil {
			fail(err)
			return
		}
		r.Committed, r.Block, r.HasBlock = time.Since(t0), st.BlockNumber, true
		if !st.Successful {
			r.Err = st.Code.String()
		} else {
			r.OK = true
		}
		record(r)
	}
	end := *warmup + *dur
	if *rate > 0 { // open loop: transaction i is due at t0 + i/rate
		n := int64(math.Ceil(*rate*end.Seconds() - 1e-9))
		out = make([]row, 0, min(n, 1<<20))
		for i := int64(0); i < n; i++ {
			at := time.Duration(float64(i) / *rate * float64(time.Second))
			if d := at - time.Since(t0); d > 0 {
				time.Sleep(d)
			}
			warm := at < *warmup
			if *maxInflight > 0 && inflight.Load() >= int64(*maxInflight) { // shed: recorded, never sent, never silently dropped
				now := time.Since(t0)
				record(row{Intended: at, Dispatched: now, Endorsed: now, Submitted: now, Committed: now, Warmup: warm, Shed: true, Err: ErrInflightCap})
				continue
			}
			enter()
			wg.Add(1)
			go func(i int64, at time.Duration, warm bool) { defer wg.Done(); tx(i, at, warm) }(i, at, warm)
		}
	} else { // closed loop: each client waits for its commit before the next submit
		var next atomic.Int64
		for c := 0; c < *clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					at := time.Since(t0)
					if at >= end {
						return
					}
					i := next.Add(1) - 1
					if *count > 0 && i >= *count {
						return
					}
					enter()
					tx(i, at, at < *warmup)
				}
			}()
		}
	}
	wg.Wait()
	cpu1 := cpuNow()
	cpuUser, cpuSys := cpu1.user-cpu0.user, cpu1.sys-cpu0.sys
	sort.Slice(out, func(a, b int) bool { return out[a].Intended < out[b].Intended })

	// the summary covers the measured window only (rows with warmup=false)
	var lat []float64
	sent, ok, shed, warmRows, dispatched, dispatchedAll := 0, 0, 0, 0, 0, 0
	first, lastDisp, lastCommit := time.Duration(math.MaxInt64), time.Duration(0), time.Duration(0)
	lag := 0.0
	errs := map[string]int{}
	for _, r := range out {
		if !r.Shed {
			dispatchedAll++
		}
		if r.Warmup {
			warmRows++
			continue
		}
		sent++
		if r.Intended < first {
			first = r.Intended
		}
		if r.Shed {
			shed++
		} else {
			dispatched++
			if r.Dispatched > lastDisp {
				lastDisp = r.Dispatched
			}
			if l := (r.Dispatched - r.Intended).Seconds(); l > lag {
				lag = l
			}
		}
		if r.OK {
			ok++
			lat = append(lat, (r.Committed - r.Intended).Seconds())
			if r.Committed > lastCommit {
				lastCommit = r.Committed
			}
		} else {
			errs[r.Err]++
		}
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(p*float64(len(lat)-1))]
	}
	mean := 0.0
	for _, l := range lat {
		mean += l
	}
	if len(lat) > 0 {
		mean /= float64(len(lat))
	}
	perTx := 0.0
	if dispatchedAll > 0 {
		perTx = 1000 * (cpuUser + cpuSys) / float64(dispatchedAll)
	}
	cpuAll := cpuNow()
	sum := map[string]any{
		"sent": sent, "dispatched": dispatched, "ok": ok, "failed": sent - ok, "shed": shed, "warmup_sent": warmRows,
		"send_rate":  finite(float64(dispatched) / (lastDisp - first).Seconds()),
		"throughput": finite(float64(ok) / (lastCommit - first).Seconds()),
		"lat_mean":   mean, "lat_p50": pct(0.5), "lat_p95": pct(0.95), "lat_max": pct(1),
		"max_dispatch_lag_s": lag, "max_inflight": *maxInflight, "max_inflight_seen": maxSeen.Load(),
		"client_cpu_s": cpuUser + cpuSys, "cpu_user_s": cpuUser, "cpu_sys_s": cpuSys,
		"process_cpu_s": cpuAll.user + cpuAll.sys, "cpu_ms_per_tx": perTx,
		"rate": *rate, "clients": *clients, "duration_s": dur.Seconds(), "warmup_s": warmup.Seconds(), "errors": errs,
	}
	if dispatched == 0 {
		sum["send_rate"] = 0.0
	}
	if ok == 0 {
		sum["throughput"] = 0.0
	}
	if *rows != "" {
		f, err := os.Create(*rows)
		if err != nil {
			die("rows", err)
		}
		w := csv.NewWriter(f)
		w.Write([]string{"tx_id", "intended_s", "dispatched_s", "endorsed_s", "submitted_s", "committed_s", "block", "ok", "warmup", "error"})
		for _, r := range out {
			block := ""
			if r.HasBlock {
				block = strconv.FormatUint(r.Block, 10)
			}
			w.Write([]string{r.TxID, secs(r.Intended), secs(r.Dispatched), secs(r.Endorsed), secs(r.Submitted), secs(r.Committed), block,
				strconv.FormatBool(r.OK), strconv.FormatBool(r.Warmup), r.Err})
		}
		w.Flush()
		if err := w.Error(); err != nil {
			die("rows", err)
		}
		if err := f.Close(); err != nil {
			die("rows", err)
		}
	}
	b, err := json.Marshal(sum)
	if err != nil {
		die("summary", err)
	}
	fmt.Println(string(b))
}
