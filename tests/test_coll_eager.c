// test: ranks=1,3,4 timeout=120
/*
 * test_coll_eager.c — the collectives under plain MPI_Init (no
 * MPI_THREAD_MULTIPLE), as programs that do not ask for threads get them:
 * every call, async ones too, then completes at issue in the caller's
 * thread.  Checks that async calls on two communicators and on one still
 * complete (no deadlock when all ranks issue in the same order), give the
 * same bits as MPI_Allgather / a blocking raw call, and that an auto
 * communicator with real calibration (ZIPCCL_CALIBRATE unset) starts
 * quickly and agrees across ranks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"

static int rank, nranks;

static int agree(int ok) {
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static void fillBf16(uint16_t* x, size_t n, uint64_t seed) { gauss_fill_bf16(x, n, seed, 3); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm world = MPI_COMM_WORLD;
    unsetenv("ZIPCCL_CALIBRATE");
    setenv("ZIPCCL_STRATEGY", "auto", 1);
    double t0 = MPI_Wtime();
    zipcclComm_t a = NULL, b = NULL;
    int ok = zipcclCommInitMpi(&a, &world) == zipcclSuccess;
    double initS = MPI_Wtime() - t0;
    ok = ok && zipcclCommInitMpi(&b, &world) == zipcclSuccess;
    ok = agree(ok);
    if (rank == 0) CHECK(ok, "eager_comm_init_calibrated", "%s", zipcclGetLastErrorDetail());
    if (!ok) { MPI_Finalize(); return 1; }
    /* Calibration is a few ms of ping-pong and codec work; allow for a
     * heavily shared machine. */
    double worst = 0;
    MPI_Allreduce(&initS, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) CHECK(worst < 5.0, "eager_calibration_quick", "comm init took %.2f s", worst);

    const size_t n = 100001;
    uint16_t* in = malloc(n * 2);
    uint16_t* grad = malloc(n * 2 * nranks);
    uint16_t* full = malloc(n * 2 * nranks);
    uint16_t* ref = malloc(n * 2 * nranks);
    uint16_t* rs = malloc(n * 2);
    uint16_t* rsRef = malloc(n * 2);
    fillBf16(in, n, 10 + rank);
    fillBf16(grad, n * nranks, 20 + rank);
    MPI_Allgather(in, (int)n * 2, MPI_BYTE, ref, (int)n * 2, MPI_BYTE, MPI_COMM_WORLD);
    zipcclCallConfig_t raw = {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect};
    zipcclCallConfig_t comp = {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoDirect};
    ok = zipcclReduceScatter(grad, rsRef, n, zipcclBfloat16, zipcclSum, b, &raw, NULL) == zipcclSuccess;

    zipcclRequest_t r1, r2, r3;
    ok &= zipcclAllGatherAsync(in, full, n, zipcclBfloat16, a, &comp, NULL, &r1) == zipcclSuccess;
    ok &= zipcclReduceScatterAsync(grad, rs, n, zipcclBfloat16, zipcclSum, b, &comp, NULL, &r2) == zipcclSuccess;
    ok &= zipcclAllGatherAsync(in, full, n, zipcclBfloat16, a, NULL, NULL, &r3) == zipcclSuccess; /* auto */
    int done = 0;
    ok &= zipcclTest(r2, &done) == zipcclSuccess && done; /* eager: already complete */
    ok &= zipcclWait(r3) == zipcclSuccess;
    ok &= zipcclWait(r1) == zipcclSuccess;
    ok &= !memcmp(full, ref, n * 2 * nranks) && !memcmp(rs, rsRef, n * 2);
    ok = agree(ok);
    if (rank == 0) CHECK(ok, "eager_async_two_comms", "async calls without MPI_THREAD_MULTIPLE failed or differ");

    zipcclCommDestroy(a);
    zipcclCommDestroy(b);
    free(in), free(grad), free(full), free(ref), free(rs), free(rsRef);
    MPI_Finalize();
    return tu_exit();
}
