// test: ranks=2,3 timeout=120
/*
 * test_coll_stop.c — a stopped peer: one rank stops itself (SIGSTOP) where
 * it should enter a call, and the others must
 *   - print slow-wait warnings that name it, before the timeout;
 *   - return zipcclTimeout after ZIPCCL_TIMEOUT_S (4 s here), not later,
 *     with a detail that names it;
 *   - answer zipcclCommBroken from then on.
 * Rank 0 continues the stopped rank (SIGCONT) once its own call has given
 * up, so the job ends cleanly.  Each rank's stderr is captured in a file
 * during the call to read the warnings back.
 *
 * With --loop STRATEGY the program is instead the workload of
 * tests/test_coll_stop.sh: AllGathers of 64 KiB and AllReduces of 16 KiB in
 * a loop until a call fails, which it prints before MPI_Abort; that test
 * stops or kills a rank from outside, mid-call, and checks the job's end.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"
#include "mpitest.h"

static const double kTimeoutS = 4;



static int loop(const char* strategy) {
    zipcclCallConfig_t cfg = ZIPCCL_CALL_CONFIG_DEFAULT;
    if (zipcclStrategyParse(strategy, &cfg.strategy) != zipcclSuccess) {
        fprintf(stderr, "--loop %s: %s\n", strategy, zipcclGetLastErrorDetail());
        return 2;
    }
    zipcclComm_t c = newComm();
    const size_t n = 32768;
    uint16_t* in = malloc(n * 2);
    uint16_t* out = malloc(n * 2 * (size_t)nranks);
    gauss_fill_bf16(in, n, 5 + (uint64_t)rank, 1);
    for (long i = 0;; i++) {
        zipcclResult_t r = i % 2 ? zipcclAllReduce(in, out, n / 4, zipcclBfloat16, zipcclSum, c, &cfg, NULL)
                                 : zipcclAllGather(in, out, n, zipcclBfloat16, c, &cfg, NULL);
        if (r != zipcclSuccess) {
            fprintf(stderr, "loop: rank %d: call %ld: %s: %s\n", rank, i, zipcclGetErrorString(r),
                    zipcclGetLastErrorDetail());
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        if (i == 100 && rank == 0) {
            printf("looping\n");
            fflush(stdout);
        }
    }
}

/* stderr into a file for the duration of a call. */
static int saved = -1;
static char logPath[64];
static void captureStderr(void) {
    snprintf(logPath, sizeof logPath, "/tmp/zipccl_stop_%d_%d.log", (int)getpid(), rank);
    fflush(stderr);
    saved = dup(2);
    FILE* f = fopen(logPath, "w");
    if (f) dup2(fileno(f), 2), fclose(f);
}
static void restoreStderr(char* text, size_t cap) {
    fflush(stderr);
    if (saved >= 0) dup2(saved, 2), close(saved), saved = -1;
    text[0] = '\0';
    FILE* f = fopen(logPath, "r");
    if (f) {
        size_t got = fread(text, 1, cap - 1, f);
        text[got] = '\0';
        fclose(f);
    }
    unlink(logPath);
}

/* The last rank stops where it should enter the fourth call. */
static void stopCase(const char* name, const zipcclCallConfig_t* cfg, const pid_t* pids) {
    zipcclComm_t c = newComm();
    int ok = 1;
    const int victim = nranks - 1;
    const size_t n = 4096;
    uint16_t* in = malloc(n * 2);
    uint16_t* out = malloc(n * 2 * (size_t)nranks);
    gauss_fill_bf16(in, n, 9 + (uint64_t)rank, 1);
    for (int i = 0; i < 3; i++)
        EXPECT(zipcclAllGather(in, out, n, zipcclBfloat16, c, cfg, NULL) == zipcclSuccess, "warm call: %s",
               zipcclGetLastErrorDetail());
    MPI_Barrier(MPI_COMM_WORLD);
    char victimName[32], log[8192];
    snprintf(victimName, sizeof victimName, "rank %d", victim);
    if (rank == victim) {
        raise(SIGSTOP); /* rank 0 continues us once its call has given up */
    } else {
        captureStderr();
        double t0 = MPI_Wtime();
        zipcclResult_t r = zipcclAllGather(in, out, n, zipcclBfloat16, c, cfg, NULL);
        double t = MPI_Wtime() - t0;
        char detail[512];
        snprintf(detail, sizeof detail, "%s", zipcclGetLastErrorDetail());
        zipcclResult_t again = zipcclAllGather(in, out, n, zipcclBfloat16, c, cfg, NULL);
        restoreStderr(log, sizeof log);
        if (rank == 0) kill(pids[victim], SIGCONT);
        EXPECT(r == zipcclTimeout && t > kTimeoutS - 0.5 && t < kTimeoutS + 3,
               "rank %d: %s after %.1f s with a %.0f s timeout (%s)", rank, zipcclGetErrorString(r), t, kTimeoutS,
               detail);
        EXPECT(strstr(detail, victimName), "rank %d: the timeout does not name %s: %s", rank, victimName, detail);
        EXPECT(again == zipcclCommBroken, "rank %d: the next call gave %s", rank, zipcclGetErrorString(again));
        /* The warning comes at half the timeout here (10 s by default) and
         * names the stopped rank twice: as the one whose call descriptor is
         * missing, and as the one that does not answer a liveness query
         * (what names it in waits where MPI does not say, e.g. inside its
         * own collectives; tests/test_coll_stop.sh stops ranks there). */
        const char* warn = strstr(log, "still waiting");
        char line[1024] = "";
        if (warn) {
            const char* start = warn;
            while (start > log && start[-1] != '\n') start--;
            const char* end = strchr(warn, '\n');
            snprintf(line, sizeof line, "%.*s", end ? (int)(end - start) : (int)strlen(start), start);
        }
        char missing[64], silent[64];
        snprintf(missing, sizeof missing, "for %s to enter the call", victimName);
        snprintf(silent, sizeof silent, "%s does not answer", victimName);
        EXPECT(warn && strstr(line, missing) && strstr(line, silent),
               "rank %d: no warning naming %s before the timeout; stderr: %.600s", rank, victimName, log);
        if (rank == 0 && getenv("ZIPCCL_TEST_VERBOSE")) printf("# %s: %s\n# %s\n", name, line, detail);
    }
    report(ok, name);
    MPI_Barrier(MPI_COMM_WORLD);
    zipcclCommDestroy(c);
    free(in), free(out);
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    if (argc == 3 && !strcmp(argv[1], "--loop")) return loop(argv[2]);
    char timeout[16];
    snprintf(timeout, sizeof timeout, "%.0f", kTimeoutS);
    setenv("ZIPCCL_TIMEOUT_S", timeout, 1);
    /* Rank 0 continues the stopped rank by its pid: all on one host. */
    pid_t me = getpid(), pids[nranks];
    char host[64] = "", host0[64] = "";
    gethostname(host, sizeof host - 1);
    if (rank == 0) memcpy(host0, host, sizeof host0);
    MPI_Bcast(host0, sizeof host0, MPI_CHAR, 0, MPI_COMM_WORLD);
    int same = !strcmp(host, host0), allSame = 0;
    MPI_Allreduce(&same, &allSame, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allgather(&me, sizeof me, MPI_BYTE, pids, sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    if (nranks < 2 || !allSame) {
        /* not a PASS: nothing was checked (run_tests.sh lists the skip) */
        if (rank == 0)
            printf("SKIP stopped_rank_named: need two ranks on one host (%d rank%s, %s)\n", nranks,
                   nranks > 1 ? "s" : "", allSame ? "one host" : "several hosts");
    } else {
        const zipcclCallConfig_t raw = {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDefault};
        stopCase("stopped_rank_named", &raw, pids);
    }
    MPI_Finalize();
    return tu_exit();
}
