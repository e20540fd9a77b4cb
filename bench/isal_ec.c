// Raw ISA-L RS(n, k) encode and decode on one core, as the reference for bench/erasure.py (compiled there with the system
// clang against Debian's libisal-dev). Cauchy matrix (ISA-L's gf_gen_cauchy1_matrix); decode = invert the k surviving rows,
// recover the n-k lost data shards (the first ones: the costliest case). GB/s counts file bytes (k * shard).
// usage: isal_ec N K MIB REPS LEVEL     (LEVEL: auto | avx512 | avx2 | avx | sse | base)
// prints one JSON line: encode/decode GB/s median and every repetition, the level used.
#include <isa-l/erasure_code.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void ec_encode_data_avx512(int len, int k, int rows, unsigned char *gftbls, unsigned char **data, unsigned char **coding);
typedef void (*encode_fn)(int, int, int, unsigned char *, unsigned char **, unsigned char **);

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *xs, int n) {
	double *s = malloc(n * sizeof(double));
	memcpy(s, xs, n * sizeof(double));
	qsort(s, n, sizeof(double), cmp);
	double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

// the variant ec_encode_data's multibinary dispatch picks on this CPU (ISA-L 2.30: avx512 needs F+BW+VL, then avx2, avx, sse)
static const char *auto_level(void) {
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) return "avx512";
	if (__builtin_cpu_supports("avx2")) return "avx2";
	if (__builtin_cpu_supports("avx")) return "avx";
	if (__builtin_cpu_supports("sse4.1")) return "sse";
	return "base";
}

static void print_list(const char *key, double *xs, int n) {
	printf("\"%s\":[", key);
	for (int i = 0; i < n; i++) printf("%s%.4f", i ? "," : "", xs[i]);
	printf("]");
}

int main(int argc, char **argv) {
	if (argc != 6) {
		fprintf(stderr, "usage: isal_ec N K MIB REPS LEVEL\n");
		return 2;
	}
	int n = atoi(argv[1]), k = atoi(argv[2]), mib = atoi(argv[3]), reps = atoi(argv[4]);
	const char *level = argv[5];
	if (k < 1 || k >= n || n > 255 || mib < 1 || reps < 1) {
		fprintf(stderr, "isal_ec: bad N=%d K=%d MIB=%d REPS=%d\n", n, k, mib, reps);
		return 2;
	}
	encode_fn fn = NULL;
	const char *used = level;
	if (!strcmp(level, "auto")) { fn = ec_encode_data; used = auto_level(); }
	else if (!strcmp(level, "avx512")) fn = ec_encode_data_avx512;
	else if (!strcmp(level, "avx2")) fn = ec_encode_data_avx2;
	else if (!strcmp(level, "avx")) fn = ec_encode_data_avx;
	else if (!strcmp(level, "sse")) fn = ec_encode_data_sse;
	else if (!strcmp(level, "base")) fn = ec_encode_data_base;
	else { fprintf(stderr, "isal_ec: LEVEL %s is not auto, avx512, avx2, avx, sse or base\n", level); return 2; }

	long size = (long)mib << 20;
	int len = (int)((size + k - 1) / k);
	len = (len + 63) & ~63;  // 64-byte multiple, as ISA-L's own perf tests
	int m = n - k, lost = m < k ? m : k;
	unsigned char **shards = malloc(n * sizeof(*shards)), **orig = malloc(k * sizeof(*orig));
	for (int i = 0; i < n; i++) {
		if (posix_memalign((void **)&shards[i], 64, len)) return 1;
		for (int j = 0; j < len; j++) shards[i][j] = (unsigned char)rand();
	}
	unsigned char *a = malloc(n * k), *tbls = malloc(32 * k * m), *dtbls = malloc(32 * k * lost);
	gf_gen_cauchy1_matrix(a, n, k);
	ec_init_tables(k, m, &a[k * k], tbls);
	fn(len, k, m, tbls, shards, &shards[k]);  // warm-up
	for (int i = 0; i < k; i++) { orig[i] = malloc(len); memcpy(orig[i], shards[i], len); }

	// decode matrix: rows of the survivors (data shards lost..k-1, then the first `lost` parity rows), inverted
	unsigned char *b = malloc(k * k), *bw = malloc(k * k), *inv = malloc(k * k), *dm = malloc(k * lost);
	unsigned char **src = malloc(k * sizeof(*src)), **out = malloc(lost * sizeof(*out));
	for (int r = 0; r < k; r++) {
		int row = r < k - lost ? lost + r : k + (r - (k - lost));
		memcpy(&b[k * r], &a[k * row], k);
		src[r] = shards[row];
	}
	for (int i = 0; i < lost; i++) { if (posix_memalign((void **)&out[i], 64, len)) return 1; }
	double *enc = malloc(reps * sizeof(double)), *dec = malloc(reps * sizeof(double));
	double gb = (double)k * len / 1e9;
	for (int r = 0; r < reps; r++) {
		double t = now();
		fn(len, k, m, tbls, shards, &shards[k]);
		enc[r] = gb / (now() - t);
		t = now();  // a decode includes building its tables, as a real rebuild does
		memcpy(bw, b, k * k);  // gf_invert_matrix destroys its input
		if (gf_invert_matrix(bw, inv, k) < 0) { fprintf(stderr, "isal_ec: singular matrix\n"); return 1; }
		for (int i = 0; i < lost; i++) memcpy(&dm[k * i], &inv[k * i], k);
		ec_init_tables(k, lost, dm, dtbls);
		fn(len, k, lost, dtbls, src, out);
		dec[r] = gb / (now() - t);
		for (int i = 0; i < lost; i++)
			if (memcmp(out[i], orig[i], len)) { fprintf(stderr, "isal_ec: decoded shard %d differs\n", i); return 1; }
	}
	printf("{\"lib\":\"isa-l (libisal2, Debian)\",\"simd\":\"%s\",\"simd_requested\":\"%s\",\"n\":%d,\"k\":%d,\"mib\":%d,\"reps\":%d,"
	       "\"lost\":%d,\"matrix\":\"cauchy1\",\"encode_gbps\":%.4f,\"decode_gbps\":%.4f,",
	       used, level, n, k, mib, reps, lost, median(enc, reps), median(dec, reps));
	print_list("encode_gbps_all", enc, reps);
	printf(",");
	print_list("decode_gbps_all", dec, reps);
	printf("}\n");
	return 0;
}
