/*
 * testutil.h — the suite's tiny check vocabulary.
 *
 * Every check prints one line, "PASS name" or "FAIL name: why", which
 * scripts/run_tests.sh counts. Tests return tu_exit() from main so a failed
 * check also shows in the exit code. Multi-rank tests should agree on a
 * verdict across ranks first and let rank 0 report (see tests/test_coll*.c).
 */
#ifndef TESTUTIL_H
#define TESTUTIL_H
#include <stdarg.h>
#include <stdio.h>

static int tu_failures;
static int tu_quiet_pass; /* set to 1 to print only failures (huge loops) */
static int tu_passes;

__attribute__((format(printf, 3, 4), unused)) static int tu_check(int ok, const char* name,
                                                                  const char* why_fmt, ...) {
    if (ok) {
        tu_passes++;
        if (!tu_quiet_pass) printf("PASS %s\n", name);
    } else {
        va_list ap;
        va_start(ap, why_fmt);
        printf("FAIL %s: ", name);
        vprintf(why_fmt, ap);
        printf("\n");
        va_end(ap);
        tu_failures++;
    }
    fflush(stdout);
    return ok;
}

/* CHECK(cond, name, fmt, ...) — report cond under a test name. */
#define CHECK(cond, ...) tu_check(!!(cond), __VA_ARGS__)

__attribute__((unused)) static int tu_exit(void) { return tu_failures ? 1 : 0; }
#endif
