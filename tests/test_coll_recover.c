// test: ranks=2,3,5 asan_ranks=3 timeout=150
/*
 * test_coll_recover.c — after a call fails, a fresh communicator over the
 * same MPI communicator works (issue 38 item 3; NCCL's abort-and-recreate).
 *
 * Two failures, each followed by zipcclCommDestroy on every rank and a new
 * zipcclCommInitMpi over MPI_COMM_WORLD, whose compressed and raw AllReduces
 * must return the exact sum (values exact in fp32, so any order gives the
 * same bits):
 *   skip: rank 0 skips an AllReduce the others enter; they time out (the
 *         skipping rank saw no error and destroys a healthy communicator);
 *   late: rank 0 enters the AllReduce after the others have timed out; it
 *         times out too.
 * Before the fix the fresh communicator's MPI_Comm_dup hung (the destroyed
 * communicators' context ids were reused while a peer still had traffic on
 * them: transport_mpi.c, mpiDestroy). Every wait here is bounded by
 * ZIPCCL_TIMEOUT_S and the test's own timeout.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "zipccl.h"

enum { N = 1 << 15 };
static float a[N], b[N];

static int rank, nranks;

/* a fresh communicator's compressed and raw AllReduce: every element
 * nranks * a[i], bit for bit */
static void fresh_comm_works(const char* name) {
    zipcclComm_t c;
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclResult_t r = zipcclCommInitMpi(&c, &w);
    char what[96];
    snprintf(what, sizeof what, "%s/fresh_comm_init", name);
    if (!CHECK(r == zipcclSuccess, what, "%d: %s", r, zipcclGetLastErrorDetail())) return;
    const zipcclStrategy_t st[2] = {zipcclStrategyCompressed, zipcclStrategyRaw};
    for (int s = 0; s < 2; s++) {
        const zipcclCallConfig_t cfg = {st[s], zipcclCodecFast, zipcclAlgoDefault};
        memset(b, 0xA5, sizeof b);
        r = zipcclAllReduce(a, b, N, zipcclFloat32, zipcclSum, c, &cfg, NULL);
        int exact = r == zipcclSuccess;
        for (int i = 0; exact && i < N; i++) exact = b[i] == (float)nranks * a[i];
        int all = 0;
        MPI_Allreduce(&exact, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        snprintf(what, sizeof what, "%s/fresh_comm_allreduce_%s", name, zipcclStrategyName(st[s]));
        if (rank == 0) CHECK(all, what, "result %d on rank 0 (%s), exact on every rank: %d", r,
                             r ? zipcclGetLastErrorDetail() : "ok", all);
    }
    r = zipcclCommDestroy(c);
    snprintf(what, sizeof what, "%s/fresh_comm_destroy", name);
    if (rank == 0) CHECK(r == zipcclSuccess, what, "%d", r);
}

/* rank 0 skips the call (late = 0) or enters it after the others gave up */
static void failure_then_fresh(const char* name, int late) {
    zipcclComm_t c;
    MPI_Comm w = MPI_COMM_WORLD;
    if (zipcclCommInitMpi(&c, &w) != zipcclSuccess) {
        CHECK(0, name, "init: %s", zipcclGetLastErrorDetail());
        return;
    }
    const zipcclCallConfig_t cfg = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDefault};
    zipcclResult_t r = zipcclSuccess;
    if (rank != 0 || late) {
        if (rank == 0) sleep(4); /* the others time out after 2 s */
        r = zipcclAllReduce(a, b, N, zipcclFloat32, zipcclSum, c, &cfg, NULL);
    }
    /* no synchronisation here: the skipping rank goes on at once, while the
     * others are still inside the failing call (what hung before) */
    zipcclCommDestroy(c);
    fresh_comm_works(name);
    /* every rank that entered the call saw it fail (within the timeout) */
    int failed_ok = (rank == 0 && !late) ? r == zipcclSuccess : r != zipcclSuccess, all = 0;
    MPI_Allreduce(&failed_ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    char what[96];
    snprintf(what, sizeof what, "%s/the_call_fails_on_every_rank_in_it", name);
    if (rank == 0) CHECK(all, what, "rank 0 got %d", r);
}

int main(int argc, char** argv) {
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 0; i < N; i++) a[i] = (float)(i % 7) * 0.25f - 0.5f;
    if (nranks < 2) {
        if (rank == 0) printf("SKIP recover: a failed call needs two ranks (running %d)\n", nranks);
    } else {
        setenv("ZIPCCL_TIMEOUT_S", "2", 1);
        fresh_comm_works("before");
        failure_then_fresh("skip", 0);
        failure_then_fresh("late", 1);
        failure_then_fresh("skip_again", 0); /* a second failure on the same MPI communicator */
    }
    MPI_Finalize();
    return rank == 0 ? tu_exit() : 0;
}
