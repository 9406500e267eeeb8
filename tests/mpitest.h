/*
 * mpitest.h — what the multi-rank C tests share, on top of testutil.h: the
 * rank and size, one reason buffer, and a verdict every rank agrees on.
 *
 *   EXPECT(cond, "why %d", x);   inside a check: keep the first reason, ok = 0
 *   report(ok, "name");          all ranks agree (MIN of ok); rank 0 prints the
 *                                PASS/FAIL line with the first failing rank's reason
 *
 * A test includes it after mpi.h, testutil.h (and zipccl.h for newComm) and
 * sets rank and nranks in main.
 */
#ifndef TESTS_MPITEST_H
#define TESTS_MPITEST_H
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

#include "testutil.h"

static int rank, nranks;
static char why[1600];

__attribute__((unused)) static int agree(int ok) {
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

__attribute__((unused)) static void report(int ok, const char* name) {
    int all = agree(ok);
    /* rank 0 prints the reason of the first rank that failed */
    int first = ok ? nranks : rank, who = 0;
    MPI_Allreduce(&first, &who, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all && who < nranks) MPI_Bcast(why, sizeof why, MPI_CHAR, who, MPI_COMM_WORLD);
    if (rank == 0) CHECK(all, name, "%s", why[0] ? why : "failed on some rank");
    else if (!all) tu_failures++;
    why[0] = 0;
}

#define EXPECT(cond, ...)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            if (ok) snprintf(why, sizeof why, __VA_ARGS__); \
            ok = 0;                                         \
        }                                                   \
    } while (0)

#ifdef ZIPCCL_H
/* A communicator over MPI_COMM_WORLD, or every rank stops (a test that cannot
 * make one has nothing to check). */
__attribute__((unused)) static zipcclComm_t newComm(void) {
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t c = NULL;
    if (zipcclCommInitMpi(&c, &w) != zipcclSuccess) {
        fprintf(stderr, "rank %d: zipcclCommInitMpi: %s\n", rank, zipcclGetLastErrorDetail());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return c;
}
#endif
#endif
