
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmpname(const void *a, const void *b) { return strncmp(a, b, MPI_MAX_PROCESSOR_NAME); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 4) {
        if (rank == 0) fprintf(stderr, "usage: %s MSG_BYTES ITERATIONS WARMUP\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long msg = atol(argv[1]);
    int iters = atoi(argv[2]), warm = atoi(argv[3]);
    char *sbuf = malloc((size_t)msg * size), *rbuf = malloc((size_t)msg * size);
    double *t = calloc(iters, sizeof(double)), *tmax = calloc(iters, sizeof(double));
    if (!sbuf || !rbuf || !t || !tmax) { fprintf(stderr, "rank %d: out of memory\n", rank); MPI_Abort(MPI_COMM_WORLD, 3); }
    for (int j = 0; j < size; j++) memset(sbuf + (size_t)j * msg, (rank * 31 + j) & 0xff, msg);
    memset(rbuf, 0, (size_t)msg * size);

    for (int i = 0; i < warm + iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Alltoall(sbuf, (int)msg, MPI_CHAR, rbuf, (int)msg, MPI_CHAR, MPI_COMM_WORLD);
        double dt = MPI_Wtime() - t0;
        if (i >= warm) t[i - warm] = dt;
    }

    int bad = 0;  /* block j of rbuf came from rank j, which filled its block `rank` with (j*31 + rank) */
    for (int j = 0; j < size; j++) {
        unsigned char want = (j * 31 + rank) & 0xff;
        for (long k = 0; k < msg; k++) if ((unsigned char)rbuf[(size_t)j * msg + k] != want) { bad++; break; }
    }
    double mean = 0; for (int i = 0; i < iters; i++) mean += t[i]; mean /= iters;
    double meansum = 0; int badsum = 0;
    MPI_Reduce(t, tmax, iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&mean, &meansum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &badsum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);

    char name[MPI_MAX_PROCESSOR_NAME]; int len;
    memset(name, 0, sizeof name);
    MPI_Get_processor_name(name, &len);
    char *names = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);

    if (rank == 0) {
        double sum = 0, lo = tmax[0], hi = tmax[0];
        for (int i = 0; i < iters; i++) { sum += tmax[i]; if (tmax[i] < lo) lo = tmax[i]; if (tmax[i] > hi) hi = tmax[i]; }
        qsort(names, size, MPI_MAX_PROCESSOR_NAME, cmpname);
        int hosts = size > 0;
        for (int j = 1; j < size; j++) if (cmpname(names + (size_t)j * MPI_MAX_PROCESSOR_NAME, names + (size_t)(j - 1) * MPI_MAX_PROCESSOR_NAME)) hosts++;
        printf("RK_ALLTOALL ranks=%d hosts=%d msg_bytes=%ld iterations=%d warmup=%d avg_ms=%.6f min_ms=%.6f max_ms=%.6f osu_avg_ms=%.6f bad_blocks=%d\n",
               size, hosts, msg, iters, warm, sum / iters * 1e3, lo * 1e3, hi * 1e3, meansum / size * 1e3, badsum);
        fflush(stdout);
    }
    MPI_Finalize();
    return badsum ? 4 : 0;
}
