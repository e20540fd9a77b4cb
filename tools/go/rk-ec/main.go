// rk-ec: Reed-Solomon RS(N, k) erasure coding of files (github.com/klauspost/reedsolomon), and the E-Fabric agent that runs
// inside a Fabric peer's container: it watches the peer's block files, encodes every completed one, keeps the chunk the
// fixed placement policy assigns to this peer, places the others on the other peers' agents over HTTP, deletes the file,
// and serves its chunks so that any k of them rebuild the file.
//
// Part of researchkit's ledger layer (researchkit/ledger/ec.py wraps it); built by tools/install-go-tools (a `local` line of
// tools/go-tools.txt, pinned by this directory's go.sum). A static binary (CGO_ENABLED=0): it runs in any container.
//
// Chunk file: "RKEC1\n", a 4-byte big-endian header length, the JSON header (format, name, file_size, file_sha256, n, k,
// index, shard_size, shard_crc32c, lib, simd, source, created), then shard_size bytes of shard. Data shards are the file
// split in k equal parts (the last one zero-padded; an empty file has 1-byte shards), parity shards follow.
//
// Placement policy (fixed): chunk j of every file belongs to the j-th agent of -peers (so the peer at position i keeps
// chunk i); agents after the N-th keep none.
//
// Subcommands (each prints one JSON line on stdout, errors on stderr with exit 2 for bad input, 1 for failures):
//
//	rk-ec encode -n N -k K -in FILE -outdir DIR [-name NAME] [-source S]     write DIR/NAME.cJJ.rkec for every chunk j
//	rk-ec decode -out FILE CHUNK...                                          rebuild from any k valid chunks (sha256 checked)
//	rk-ec info CHUNK...                                                      the headers
//	rk-ec bench -n N -k K -mib S -reps R [-simd LEVEL]                        in-memory encode/decode GB/s on one core
//	rk-ec agent -listen ADDR -store DIR [-ledger DIR -self I -peers A,B,.. -n N -k K -spread -delete -events FILE]
//	rk-ec rebuild -peers A,B,.. -name NAME -out FILE [-skip I]               fetch any k chunks from agents, decode
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/klauspost/cpuid/v2"
	"github.com/klauspost/reedsolomon"
)

const magic = "RKEC1\n"
const maxHeader = 1 << 16

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Header is the self-describing manifest at the start of every chunk.
type Header struct {
	Format      int    `json:"format"`
	Name        string `json:"name"`
	FileSize    int64  `json:"file_size"`
	FileSHA256  string `json:"file_sha256"`
	N           int    `json:"n"`
	K           int    `json:"k"`
	Index       int    `json:"index"`
	ShardSize   int64  `json:"shard_size"`
	ShardCRC32C uint32 `json:"shard_crc32c"`
	Lib         string `json:"lib"`
	SIMD        string `json:"simd"`
	Source      string `json:"source,omitempty"`
	Created     int64  `json:"created"`
}

type badInput struct{ field, msg string }

func (e badInput) Error() string { return fmt.Sprintf("-%s: %s", e.field, e.msg) }

func fail(err error) {
	var b badInput
	fmt.Fprintf(os.Stderr, "rk-ec: %v\n", err)
	if errors.As(err, &b) {
		os.Exit(2)
	}
	os.Exit(1)
}

func emit(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// libVersion: the reedsolomon module version compiled in.
func libVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/klauspost/reedsolomon" {
				return d.Path + " " + d.Version
			}
		}
	}
	return "github.com/klauspost/reedsolomon (unknown version)"
}

// simdLevels in the order reedsolomon prefers them on amd64 (options.go / galois_amd64.go), best first.
var simdLevels = []string{"avx512+gfni", "avx+gfni", "avx512", "avx2", "ssse3", "generic"}

func supported(level string) bool {
	c := cpuid.CPU
	switch level {
	case "avx512+gfni":
		return c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL) && c.Supports(cpuid.AVX512F, cpuid.GFNI, cpuid.AVX512DQ)
	case "avx+gfni":
		return c.Supports(cpuid.AVX, cpuid.GFNI)
	case "avx512":
		return c.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL)
	case "avx2":
		return c.Supports(cpuid.AVX2)
	case "ssse3":
		return c.Supports(cpuid.SSSE3)
	case "generic":
		return true
	}
	return false
}

// bestSIMD: the level reedsolomon uses on this CPU without restrictions.
func bestSIMD() string {
	if runtime.GOARCH != "amd64" {
		return runtime.GOARCH + "-default"
	}
	for _, l := range simdLevels {
		if supported(l) {
			return l
		}
	}
	return "generic"
}

// simdOptions restricts reedsolomon to `level` and below ("" or "auto": no restriction).
func simdOptions(level string) ([]reedsolomon.Option, string, error) {
	if level == "" || level == "auto" {
		return nil, bestSIMD(), nil
	}
	pos := -1
	for i, l := range simdLevels {
		if l == level {
			pos = i
		}
	}
	if pos < 0 {
		return nil, "", badInput{"simd", fmt.Sprintf("%q is not one of auto, %s", level, strings.Join(simdLevels, ", "))}
	}
	if !supported(level) {
		return nil, "", badInput{"simd", fmt.Sprintf("%s is not supported by this CPU (best: %s)", level, bestSIMD())}
	}
	allow := func(l string) bool {
		for _, x := range simdLevels[pos:] {
			if x == l {
				return true
			}
		}
		return false
	}
	opts := []reedsolomon.Option{
		// order matters: WithAVX512 also sets AVX512+GFNI, WithAVX2 also clears AVX+GFNI
		reedsolomon.WithAVX512(allow("avx512")), reedsolomon.WithGFNI(allow("avx512+gfni")), reedsolomon.WithAVX2(allow("avx2")),
		reedsolomon.WithAVXGFNI(allow("avx+gfni")), reedsolomon.WithSSSE3(allow("ssse3")), reedsolomon.WithSSE2(allow("ssse3")),
	}
	return opts, level, nil
}

func checkCode(n, k int) error {
	if k < 1 {
		return badInput{"k", fmt.Sprintf("%d: at least 1 data chunk", k)}
	}
	if k >= n {
		return badInput{"k", fmt.Sprintf("%d: must be below n=%d (at least one parity chunk)", k, n)}
	}
	if n > 256 {
		return badInput{"n", fmt.Sprintf("%d: at most 256 chunks (GF(2^8))", n)}
	}
	return nil
}

func newEncoder(n, k, threads int, simd string) (reedsolomon.Encoder, string, error) {
	opts, level, err := simdOptions(simd)
	if err != nil {
		return nil, "", err
	}
	if threads > 0 {
		opts = append(opts, reedsolomon.WithMaxGoroutines(threads))
	}
	enc, err := reedsolomon.New(k, n-k, opts...)
	return enc, level, err
}

func shardSize(size int64, k int) int64 {
	s := (size + int64(k) - 1) / int64(k)
	if s < 1 {
		s = 1
	}
	return s
}

// Encoded is a file split and encoded in memory: n shards of one buffer.
type Encoded struct {
	Shards  [][]byte
	Headers []Header
	ReadS   float64
	HashS   float64
	EncodeS float64
}

// encodeFile reads `path` into one buffer holding all n shards, hashes it and computes the parity.
func encodeFile(path, name, source string, n, k, threads int, simd string) (*Encoded, error) {
	enc, level, err := newEncoder(n, k, threads, simd)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	ss := shardSize(size, k)
	buf := make([]byte, int64(n)*ss)
	if _, err := io.ReadFull(f, buf[:size]); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if extra, _ := f.Read(make([]byte, 1)); extra > 0 {
		return nil, fmt.Errorf("%s grew while it was read (still being written?)", path)
	}
	t1 := time.Now()
	sum := sha256.Sum256(buf[:size])
	t2 := time.Now()
	shards := make([][]byte, n)
	for i := range shards {
		shards[i] = buf[int64(i)*ss : int64(i+1)*ss : int64(i+1)*ss]
	}
	if err := enc.Encode(shards); err != nil {
		return nil, err
	}
	t3 := time.Now()
	e := &Encoded{Shards: shards, ReadS: t1.Sub(t0).Seconds(), HashS: t2.Sub(t1).Seconds(), EncodeS: t3.Sub(t2).Seconds()}
	now := time.Now().Unix()
	for i := range shards {
		e.Headers = append(e.Headers, Header{Format: 1, Name: name, FileSize: size, FileSHA256: hex.EncodeToString(sum[:]), N: n, K: k,
			Index: i, ShardSize: ss, ShardCRC32C: crc32.Checksum(shards[i], castagnoli), Lib: libVersion(), SIMD: level,
			Source: source, Created: now})
	}
	return e, nil
}

func headerBytes(h Header) []byte {
	js, _ := json.Marshal(h)
	var b bytes.Buffer
	b.WriteString(magic)
	binary.Write(&b, binary.BigEndian, uint32(len(js)))
	b.Write(js)
	return b.Bytes()
}

// writeChunk writes header + shard to path atomically (a temporary file renamed into place).
func writeChunk(path string, h Header, shard []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err = f.Write(headerBytes(h)); err == nil {
		_, err = f.Write(shard)
	}
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// parseChunk splits chunk bytes into header and shard, checking the length and the shard's CRC-32C.
func parseChunk(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return h, nil, errors.New("not an rk-ec chunk (bad magic)")
	}
	hl := int(binary.BigEndian.Uint32(b[len(magic):]))
	if hl > maxHeader || len(magic)+4+hl > len(b) {
		return h, nil, errors.New("truncated header")
	}
	if err := json.Unmarshal(b[len(magic)+4:len(magic)+4+hl], &h); err != nil {
		return h, nil, fmt.Errorf("bad header: %w", err)
	}
	shard := b[len(magic)+4+hl:]
	if h.Format != 1 || h.K < 1 || h.K >= h.N || h.Index < 0 || h.Index >= h.N || h.ShardSize != shardSize(h.FileSize, h.K) {
		return h, nil, fmt.Errorf("inconsistent header %+v", h)
	}
	if int64(len(shard)) != h.ShardSize {
		return h, nil, fmt.Errorf("shard has %d bytes, header says %d (truncated?)", len(shard), h.ShardSize)
	}
	if crc32.Checksum(shard, castagnoli) != h.ShardCRC32C {
		return h, nil, errors.New("shard CRC-32C mismatch (corrupted)")
	}
	return h, shard, nil
}

// Decoded is the outcome of a decode.
type Decoded struct {
	Name     string   `json:"name"`
	Size     int64    `json:"file_size"`
	SHA256   string   `json:"file_sha256"`
	Used     []int    `json:"used"`
	Rejected []string `json:"rejected"`
	DecodeS  float64  `json:"decode_s"`
	HashS    float64  `json:"hash_s"`
	Verified bool     `json:"verified"`
	Lib      string   `json:"lib"`
	SIMD     string   `json:"simd"`
}

type piece struct {
	h     Header
	shard []byte
	from  string
}

// decodePieces rebuilds the file from the first k valid pieces agreeing on (file_sha256, n, k, size); writes it to out.
func decodePieces(pieces []piece, rejected []string, out string, threads int) (*Decoded, error) {
	groups := map[string][]piece{}
	var order []string
	for _, p := range pieces {
		key := fmt.Sprintf("%s/%d/%d/%d", p.h.FileSHA256, p.h.N, p.h.K, p.h.FileSize)
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], p)
	}
	var best []piece
	for _, key := range order { // the group with the most distinct indices
		if distinct(groups[key]) > distinct(best) {
			best = groups[key]
		}
	}
	for _, key := range order {
		if len(best) > 0 && key != fmt.Sprintf("%s/%d/%d/%d", best[0].h.FileSHA256, best[0].h.N, best[0].h.K, best[0].h.FileSize) {
			for _, p := range groups[key] {
				rejected = append(rejected, fmt.Sprintf("%s: belongs to another file or code (sha256 %.12s, RS(%d,%d))", p.from, p.h.FileSHA256, p.h.N, p.h.K))
			}
		}
	}
	if len(best) == 0 {
		return nil, fmt.Errorf("no valid chunk (rejected: %s)", strings.Join(rejected, "; "))
	}
	h0 := best[0].h
	if distinct(best) < h0.K {
		return nil, fmt.Errorf("%d valid chunk(s) of %s, RS(%d,%d) needs %d (rejected: %s)", distinct(best), h0.Name, h0.N, h0.K, h0.K,
			strings.Join(rejected, "; "))
	}
	enc, level, err := newEncoder(h0.N, h0.K, threads, "")
	if err != nil {
		return nil, err
	}
	shards := make([][]byte, h0.N)
	var used []int
	for _, p := range best {
		if shards[p.h.Index] == nil && len(used) < h0.K {
			shards[p.h.Index] = p.shard
			used = append(used, p.h.Index)
		}
	}
	sort.Ints(used)
	t0 := time.Now()
	if err := enc.ReconstructData(shards); err != nil {
		return nil, err
	}
	t1 := time.Now()
	hs := sha256.New()
	left := h0.FileSize
	for i := 0; i < h0.K && left > 0; i++ {
		m := int64(len(shards[i]))
		if m > left {
			m = left
		}
		hs.Write(shards[i][:m])
		left -= m
	}
	got := hex.EncodeToString(hs.Sum(nil))
	t2 := time.Now()
	d := &Decoded{Name: h0.Name, Size: h0.FileSize, SHA256: got, Used: used, Rejected: rejected, DecodeS: t1.Sub(t0).Seconds(),
		HashS: t2.Sub(t1).Seconds(), Verified: got == h0.FileSHA256, Lib: libVersion(), SIMD: level}
	if d.Rejected == nil {
		d.Rejected = []string{}
	}
	if !d.Verified {
		return d, fmt.Errorf("decoded %s has sha256 %s, the chunks say %s", h0.Name, got, h0.FileSHA256)
	}
	if out != "" {
		tmp := out + ".tmp"
		f, err := os.Create(tmp)
		if err != nil {
			return d, err
		}
		left = h0.FileSize
		for i := 0; i < h0.K && left > 0 && err == nil; i++ {
			m := int64(len(shards[i]))
			if m > left {
				m = left
			}
			_, err = f.Write(shards[i][:m])
			left -= m
		}
		if err == nil {
			err = f.Close()
		} else {
			f.Close()
		}
		if err == nil {
			err = os.Rename(tmp, out)
		}
		if err != nil {
			os.Remove(tmp)
			return d, err
		}
	}
	return d, nil
}

func distinct(ps []piece) int {
	seen := map[int]bool{}
	for _, p := range ps {
		seen[p.h.Index] = true
	}
	return len(seen)
}

// ---- subcommands -------------------------------------------------------------------------------------------------

func cmdEncode(args []string) error {
	fs := flag.NewFlagSet("encode", flag.ExitOnError)
	n := fs.Int("n", 20, "chunks in all (k data + n-k parity)")
	k := fs.Int("k", 14, "data chunks (any k rebuild the file)")
	in := fs.String("in", "", "file to encode")
	outdir := fs.String("outdir", "", "directory for the chunks NAME.cJJ.rkec")
	name := fs.String("name", "", "name recorded in the header and used for the chunk files (default: the file's base name)")
	source := fs.String("source", "", "who encoded it (recorded in the header)")
	threads := fs.Int("threads", 0, "goroutines for the encode (0: reedsolomon's default)")
	simd := fs.String("simd", "auto", "highest SIMD level to use: auto, "+strings.Join(simdLevels, ", "))
	fs.Parse(args)
	if err := checkCode(*n, *k); err != nil {
		return err
	}
	if *in == "" {
		return badInput{"in", "the file to encode is required"}
	}
	if *outdir == "" {
		return badInput{"outdir", "the output directory is required"}
	}
	if *name == "" {
		*name = filepath.Base(*in)
	}
	e, err := encodeFile(*in, *name, *source, *n, *k, *threads, *simd)
	if err != nil {
		return err
	}
	t := time.Now()
	var paths []string
	for i, s := range e.Shards {
		p := filepath.Join(*outdir, fmt.Sprintf("%s.c%02d.rkec", *name, i))
		if err := writeChunk(p, e.Headers[i], s); err != nil {
			return err
		}
		paths = append(paths, p)
	}
	h := e.Headers[0]
	emit(map[string]any{"name": h.Name, "file_size": h.FileSize, "file_sha256": h.FileSHA256, "n": h.N, "k": h.K, "shard_size": h.ShardSize,
		"chunks": paths, "read_s": e.ReadS, "hash_s": e.HashS, "encode_s": e.EncodeS, "write_s": time.Since(t).Seconds(),
		"lib": h.Lib, "simd": h.SIMD})
	return nil
}

func readPieces(paths []string) ([]piece, []string) {
	var ps []piece
	var rejected []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			rejected = append(rejected, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		h, s, err := parseChunk(b)
		if err != nil {
			rejected = append(rejected, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		ps = append(ps, piece{h, s, p})
	}
	return ps, rejected
}

func cmdDecode(args []string) error {
	fs := flag.NewFlagSet("decode", flag.ExitOnError)
	out := fs.String("out", "", "where to write the rebuilt file")
	threads := fs.Int("threads", 0, "goroutines for the decode (0: reedsolomon's default)")
	fs.Parse(args)
	if *out == "" {
		return badInput{"out", "the output file is required"}
	}
	if fs.NArg() == 0 {
		return badInput{"chunks", "give the chunk files to decode from"}
	}
	t := time.Now()
	ps, rejected := readPieces(fs.Args())
	readS := time.Since(t).Seconds()
	d, err := decodePieces(ps, rejected, *out, *threads)
	if err != nil {
		return err
	}
	emit(map[string]any{"decode": d, "read_s": readS, "out": *out})
	return nil
}

func cmdInfo(args []string) error {
	for _, p := range args {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h, _, err := parseChunk(b)
		if err != nil {
			emit(map[string]any{"path": p, "error": err.Error()})
			continue
		}
		emit(map[string]any{"path": p, "header": h})
	}
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cmdBench: encode and decode (n-k data shards lost) of an in-memory buffer on one goroutine; GB/s of file bytes.
func cmdBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	n := fs.Int("n", 20, "chunks")
	k := fs.Int("k", 14, "data chunks")
	mib := fs.Int("mib", 64, "file size in MiB")
	reps := fs.Int("reps", 7, "repetitions (the median is reported)")
	simd := fs.String("simd", "auto", "highest SIMD level to use: auto, "+strings.Join(simdLevels, ", "))
	threads := fs.Int("threads", 1, "goroutines (1: one core)")
	fs.Parse(args)
	if err := checkCode(*n, *k); err != nil {
		return err
	}
	if *mib < 1 || *reps < 1 {
		return badInput{"mib", "size and reps must be >= 1"}
	}
	runtime.GOMAXPROCS(*threads)
	enc, level, err := newEncoder(*n, *k, *threads, *simd)
	if err != nil {
		return err
	}
	size := int64(*mib) << 20
	ss := shardSize(size, *k)
	buf := make([]byte, int64(*n)*ss)
	rand.New(rand.NewSource(1)).Read(buf[:size])
	shards := make([][]byte, *n)
	for i := range shards {
		shards[i] = buf[int64(i)*ss : int64(i+1)*ss : int64(i+1)*ss]
	}
	if err := enc.Encode(shards); err != nil { // warm-up
		return err
	}
	orig := make([][]byte, *k)
	for i := 0; i < *k; i++ {
		orig[i] = append([]byte(nil), shards[i]...)
	}
	lost := *n - *k
	if lost > *k {
		lost = *k
	}
	var encS, decS []float64
	work := make([][]byte, *n)
	spare := make([][]byte, lost)
	for i := range spare {
		spare[i] = make([]byte, ss)
	}
	copy(work, shards) // warm-up decode (touches the spare buffers' pages once)
	for i := 0; i < lost; i++ {
		work[i] = spare[i][:0]
	}
	if err := enc.ReconstructData(work); err != nil {
		return err
	}
	for r := 0; r < *reps; r++ {
		t := time.Now()
		if err := enc.Encode(shards); err != nil {
			return err
		}
		encS = append(encS, time.Since(t).Seconds())
		copy(work, shards)
		for i := 0; i < lost; i++ { // lose the first n-k data shards (the costliest case), reuse buffers
			work[i] = spare[i][:0]
		}
		t = time.Now()
		if err := enc.ReconstructData(work); err != nil {
			return err
		}
		decS = append(decS, time.Since(t).Seconds())
		for i := 0; i < lost; i++ {
			if !bytes.Equal(work[i], orig[i]) {
				return fmt.Errorf("decode of shard %d differs", i)
			}
		}
	}
	gb := float64(int64(*k)*ss) / 1e9
	rate := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = gb / x
		}
		return out
	}
	emit(map[string]any{"lib": libVersion(), "simd": level, "simd_best": bestSIMD(), "n": *n, "k": *k, "mib": *mib, "reps": *reps,
		"threads": *threads, "lost": lost, "encode_gbps": median(rate(encS)), "decode_gbps": median(rate(decS)),
		"encode_gbps_all": rate(encS), "decode_gbps_all": rate(decS), "go": runtime.Version(), "cpu": cpuid.CPU.BrandName})
	return nil
}

// ---- the agent ---------------------------------------------------------------------------------------------------

var blockfileRE = regexp.MustCompile(`^blockfile_(\d{6})$`)
var chunkRE = regexp.MustCompile(`^([A-Za-z0-9_.-]+)\.c(\d{2,3})\.rkec$`)
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

type agent struct {
	store, ledger, self, events, simd string
	peers                             []string
	selfIdx, n, k, threads            int
	spread, del                       bool
	client                            *http.Client
	mu                                sync.Mutex
	done                              map[string]bool
}

func (a *agent) chunkPath(name string, idx int) string {
	return filepath.Join(a.store, fmt.Sprintf("%s.c%02d.rkec", name, idx))
}

func (a *agent) serve(ln net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/chunks", func(w http.ResponseWriter, r *http.Request) {
		ents, _ := os.ReadDir(a.store)
		var out []map[string]any
		for _, e := range ents {
			if m := chunkRE.FindStringSubmatch(e.Name()); m != nil {
				i, _ := strconv.Atoi(m[2])
				info, _ := e.Info()
				out = append(out, map[string]any{"name": m[1], "index": i, "bytes": info.Size()})
			}
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/chunk/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/chunk/"), "/")
		if len(parts) != 2 || !nameRE.MatchString(parts[0]) {
			http.Error(w, "want /chunk/NAME/INDEX", http.StatusBadRequest)
			return
		}
		idx, err := strconv.Atoi(parts[1])
		if err != nil || idx < 0 || idx > 255 {
			http.Error(w, "bad index", http.StatusBadRequest)
			return
		}
		p := a.chunkPath(parts[0], idx)
		switch r.Method {
		case http.MethodGet:
			http.ServeFile(w, r, p)
		case http.MethodPut:
			b, err := io.ReadAll(io.LimitReader(r.Body, 1<<31))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h, _, err := parseChunk(b)
			if err != nil || h.Name != parts[0] || h.Index != idx {
				http.Error(w, fmt.Sprintf("rejected chunk: %v (header %s/%d)", err, h.Name, h.Index), http.StatusBadRequest)
				return
			}
			tmp := p + ".tmp"
			if err := os.WriteFile(tmp, b, 0o644); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if err := os.Rename(tmp, p); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
		default:
			http.Error(w, "GET or PUT", http.StatusMethodNotAllowed)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fail(err)
	}
}

type cpuTimes struct {
	user, sys float64
	maxrssKB  int64
}

func cpuNow() cpuTimes {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return cpuTimes{tv(ru.Utime), tv(ru.Stime), ru.Maxrss}
}

func (a *agent) logEvent(ev map[string]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, _ := json.Marshal(ev)
	f, err := os.OpenFile(a.events, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rk-ec agent: events: %v\n", err)
		return
	}
	f.Write(append(b, '\n'))
	f.Close()
}

// put sends header + shard (no copy of the shard) to the agent at addr, retrying a few times.
func (a *agent) put(addr, name string, idx int, head, shard []byte) error {
	var last error
	for try := 0; try < 5; try++ {
		body := io.MultiReader(bytes.NewReader(head), bytes.NewReader(shard))
		req, _ := http.NewRequest(http.MethodPut, fmt.Sprintf("http://%s/chunk/%s/%d", addr, name, idx), body)
		req.ContentLength = int64(len(head) + len(shard))
		resp, err := a.client.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				return nil
			}
			err = fmt.Errorf("%s: %s %s", addr, resp.Status, strings.TrimSpace(string(msg)))
		}
		last = err
		time.Sleep(time.Duration(200*(try+1)) * time.Millisecond)
	}
	return last
}

// process encodes one completed block file, keeps this peer's chunk, places the others, deletes the file.
func (a *agent) process(file string) {
	name := filepath.Base(filepath.Dir(file)) + "." + filepath.Base(file) // <channel>.blockfile_NNNNNN
	ev := map[string]any{"event": "encoded", "file": file, "name": name, "peer": a.self, "self_index": a.selfIdx, "n": a.n, "k": a.k,
		"spread": a.spread, "t_start": float64(time.Now().UnixNano()) / 1e9}
	c0, t0 := cpuNow(), time.Now()
	e, err := encodeFile(file, name, a.self, a.n, a.k, a.threads, a.simd)
	if err != nil {
		ev["event"], ev["error"] = "error", err.Error()
		a.logEvent(ev)
		return
	}
	h := e.Headers[0]
	ev["file_size"], ev["file_sha256"], ev["shard_size"], ev["lib"], ev["simd"] = h.FileSize, h.FileSHA256, h.ShardSize, h.Lib, h.SIMD
	ev["read_s"], ev["hash_s"], ev["encode_s"] = e.ReadS, e.HashS, e.EncodeS
	tw := time.Now()
	kept := int64(0)
	if a.selfIdx >= 0 && a.selfIdx < a.n {
		p := a.chunkPath(name, a.selfIdx)
		if err := writeChunk(p, e.Headers[a.selfIdx], e.Shards[a.selfIdx]); err != nil {
			ev["event"], ev["error"] = "error", err.Error()
			a.logEvent(ev)
			return
		}
		st, _ := os.Stat(p)
		kept = st.Size()
	}
	ev["write_s"], ev["bytes_kept"] = time.Since(tw).Seconds(), kept
	ts := time.Now()
	placed := map[string]string{}
	var sent int64
	var errs []string
	if a.spread {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for j := 0; j < a.n; j++ {
			if j == a.selfIdx {
				continue
			}
			head := headerBytes(e.Headers[j])
			wg.Add(1)
			go func(j int, head []byte) {
				defer wg.Done()
				err := a.put(a.peers[j], name, j, head, e.Shards[j])
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("chunk %d to %s: %v", j, a.peers[j], err))
					return
				}
				placed[strconv.Itoa(j)] = a.peers[j]
				sent += int64(len(head) + len(e.Shards[j]))
			}(j, head)
		}
		wg.Wait()
	}
	ev["send_s"], ev["bytes_sent"], ev["placed"] = time.Since(ts).Seconds(), sent, placed
	deleted := false
	if a.del {
		if len(errs) > 0 {
			errs = append(errs, "file kept: not every chunk was placed")
		} else if err := os.Remove(file); err != nil {
			errs = append(errs, "delete: "+err.Error())
		} else {
			deleted = true
		}
	}
	c1 := cpuNow()
	ev["deleted"], ev["total_s"] = deleted, time.Since(t0).Seconds()
	ev["cpu_user_s"], ev["cpu_sys_s"], ev["maxrss_kb"] = c1.user-c0.user, c1.sys-c0.sys, c1.maxrssKB
	ev["t_end"] = float64(time.Now().UnixNano()) / 1e9
	if len(errs) > 0 {
		ev["event"], ev["error"] = "error", strings.Join(errs, "; ")
	}
	a.logEvent(ev)
}

// completed: block files with a higher-numbered sibling (Fabric has moved on to the next file), in order.
func completed(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var nums []int
	for _, e := range ents {
		if m := blockfileRE.FindStringSubmatch(e.Name()); m != nil {
			i, _ := strconv.Atoi(m[1])
			nums = append(nums, i)
		}
	}
	sort.Ints(nums)
	var out []string
	for _, i := range nums {
		if i < nums[len(nums)-1] {
			out = append(out, filepath.Join(dir, fmt.Sprintf("blockfile_%06d", i)))
		}
	}
	return out
}

func (a *agent) watch(poll time.Duration) {
	for {
		for _, f := range completed(a.ledger) {
			if !a.done[f] {
				a.done[f] = true
				a.process(f)
			}
		}
		time.Sleep(poll)
	}
}

func cmdAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	listen := fs.String("listen", ":7180", "address of the chunk server")
	store := fs.String("store", "", "directory of the chunks this peer keeps")
	ledger := fs.String("ledger", "", "the peer's channel directory with blockfile_NNNNNN (empty: only serve chunks)")
	self := fs.String("self", "", "this peer's name (recorded in headers and events)")
	selfIdx := fs.Int("index", -1, "this peer's position in -peers (the chunk it keeps)")
	peers := fs.String("peers", "", "comma-separated host:port of the agents in placement order (chunk j -> the j-th)")
	n := fs.Int("n", 20, "chunks per file")
	k := fs.Int("k", 14, "data chunks")
	spread := fs.Bool("spread", false, "send the other peers' chunks to them (else: keep own chunk, drop the rest)")
	del := fs.Bool("delete", true, "delete the block file once its chunks are stored")
	events := fs.String("events", "", "JSON-lines file of per-file events (default STORE/../events.jsonl)")
	poll := fs.Duration("poll", 200*time.Millisecond, "how often to look for completed block files")
	threads := fs.Int("threads", 0, "goroutines per encode (0: reedsolomon's default)")
	simd := fs.String("simd", "auto", "highest SIMD level")
	fs.Parse(args)
	if *store == "" {
		return badInput{"store", "the chunk directory is required"}
	}
	a := &agent{store: *store, ledger: *ledger, self: *self, selfIdx: *selfIdx, n: *n, k: *k, spread: *spread, del: *del,
		events: *events, threads: *threads, simd: *simd, done: map[string]bool{},
		client: &http.Client{Timeout: 60 * time.Second}}
	if a.events == "" {
		a.events = filepath.Join(filepath.Dir(*store), "events.jsonl")
	}
	if *peers != "" {
		a.peers = strings.Split(*peers, ",")
	}
	if *ledger != "" {
		if err := checkCode(*n, *k); err != nil {
			return err
		}
		if len(a.peers) < *n && *spread {
			return badInput{"peers", fmt.Sprintf("%d agent address(es) for n=%d chunks", len(a.peers), *n)}
		}
		if *selfIdx >= *n || *selfIdx < -1 {
			return badInput{"index", fmt.Sprintf("%d: a position below n=%d, or -1 (keeps no chunk)", *selfIdx, *n)}
		}
		if _, _, err := simdOptions(*simd); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(*store, 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	a.logEvent(map[string]any{"event": "start", "peer": a.self, "self_index": a.selfIdx, "n": a.n, "k": a.k, "spread": a.spread,
		"delete": a.del, "ledger": a.ledger, "listen": ln.Addr().String(), "lib": libVersion(), "simd": bestSIMD(), "pid": os.Getpid(),
		"gomaxprocs": runtime.GOMAXPROCS(0), "t": float64(time.Now().UnixNano()) / 1e9})
	if *ledger != "" {
		go a.watch(*poll)
	}
	a.serve(ln)
	return nil
}

// cmdRebuild fetches chunks of NAME from the agents (in a shuffled order, skipping -skip) until k valid ones are in hand.
func cmdRebuild(args []string) error {
	fs := flag.NewFlagSet("rebuild", flag.ExitOnError)
	peers := fs.String("peers", "", "comma-separated host:port of the agents in placement order")
	name := fs.String("name", "", "file name as stored (<channel>.blockfile_NNNNNN)")
	out := fs.String("out", "", "where to write the rebuilt file (empty: verify only)")
	skip := fs.Int("skip", -1, "placement position not to ask (the rebuilding peer itself)")
	seed := fs.Int64("seed", 0, "order in which agents are asked (0: placement order)")
	threads := fs.Int("threads", 0, "goroutines for the decode")
	fs.Parse(args)
	if *peers == "" {
		return badInput{"peers", "the agents' addresses are required"}
	}
	if !nameRE.MatchString(*name) {
		return badInput{"name", fmt.Sprintf("%q is not a stored file name", *name)}
	}
	addrs := strings.Split(*peers, ",")
	order := make([]int, len(addrs))
	for i := range order {
		order[i] = i
	}
	if *seed != 0 {
		rand.New(rand.NewSource(*seed)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	client := &http.Client{Timeout: 60 * time.Second}
	t0 := time.Now()
	var ps []piece
	var rejected []string
	asked := []int{}
	var fetched int64
	need := -1
	for _, j := range order {
		if j == *skip {
			continue
		}
		if need >= 0 && distinct(ps) >= need {
			break
		}
		asked = append(asked, j)
		url := fmt.Sprintf("http://%s/chunk/%s/%d", addrs[j], *name, j)
		resp, err := client.Get(url)
		if err != nil {
			rejected = append(rejected, fmt.Sprintf("%s: %v", url, err))
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			rejected = append(rejected, fmt.Sprintf("%s: %s", url, resp.Status))
			continue
		}
		fetched += int64(len(b))
		h, s, err := parseChunk(b)
		if err != nil {
			rejected = append(rejected, fmt.Sprintf("%s: %v", url, err))
			continue
		}
		ps = append(ps, piece{h, s, url})
		if need < 0 {
			need = h.K
		}
	}
	fetchS := time.Since(t0).Seconds()
	d, err := decodePieces(ps, rejected, *out, *threads)
	if err != nil {
		return err
	}
	emit(map[string]any{"decode": d, "asked": asked, "bytes_fetched": fetched, "fetch_s": fetchS, "total_s": time.Since(t0).Seconds(),
		"out": *out})
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rk-ec encode|decode|info|bench|agent|rebuild|version [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "encode":
		err = cmdEncode(os.Args[2:])
	case "decode":
		err = cmdDecode(os.Args[2:])
	case "info":
		err = cmdInfo(os.Args[2:])
	case "bench":
		err = cmdBench(os.Args[2:])
	case "agent":
		err = cmdAgent(os.Args[2:])
	case "rebuild":
		err = cmdRebuild(os.Args[2:])
	case "version":
		emit(map[string]any{"lib": libVersion(), "simd": bestSIMD(), "go": runtime.Version(), "cpu": cpuid.CPU.BrandName})
	default:
		err = badInput{"command", fmt.Sprintf("%q is not one of encode, decode, info, bench, agent, rebuild, version", os.Args[1])}
	}
	if err != nil {
		fail(err)
	}
}
