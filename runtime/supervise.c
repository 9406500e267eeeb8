/*
 * supervise.c — `build/supervise [options] -- CMD ARGS...`: run a training
 * job and restart it from the newest good checkpoint when it fails.
 *
 *   build/supervise --max-restarts 5 -- mpirun -n 4 build/train cfg.yaml --set ...
 *
 * CMD (typically mpirun ... build/train ...) runs in a process group of its
 * own; its output passes through unchanged, and the supervisor's own lines
 * start with "# supervise: ". The job is restarted when
 *   - it exits non-zero (a rank died, a collective timed out, ...) or is
 *     killed by a signal, except with status 2, the trainer's "bad input"
 *     (config, arguments, a refused checkpoint), which would fail again;
 *   - it prints nothing for --hang-timeout seconds (ZipCCL's "still waiting"
 *     warnings do not count as output): it is stopped, SIGTERM then SIGKILL;
 *   - it exits with status 75 (preempted: a checkpoint written) although the
 *     supervisor was not signalled; this restart is not counted unless the
 *     job made no step since the last one.
 * Before each restart every process left of the job is killed (the
 * supervisor is their child subreaper, so it finds even orphans), and the
 * newest step directory under the checkpoint root that verifies against its
 * manifest (checkpoint_open, what --resume itself checks) is appended as
 * `--resume DIR`, replacing a --resume of CMD. A newer directory that does
 * not verify (truncated, corrupted, missing files, no manifest) is named
 * with why, and the previous kept one is tried. Each restart is one line:
 * what failed, which step resumes from where, what was lost. Paths,
 * arguments and the job's own line quoted in one go through zrt_printable
 * (log.h); the job's output itself passes through as it is.
 *
 * SIGTERM / SIGINT / SIGUSR1 to the supervisor: it sends SIGUSR1 to CMD
 * (mpirun forwards it to every rank; the trainer finishes its step, writes
 * the checkpoint and exits 75), waits --preempt-timeout seconds for that,
 * and exits with the job's status without restarting. A second signal kills
 * the job at once.
 *
 * Exit status: the job's last (0, 75 after a preemption, or the failure
 * that exhausted --max-restarts or was not restarted); 128+N for a job
 * killed by signal N; 2 for a usage error of the supervisor itself.
 *
 * Left out: a change of the rank count on restart (elastic training),
 * agents on several hosts (one supervisor, on the host that runs mpirun),
 * restarting only the failed rank, back-off between restarts.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "config.h"
#include "log.h"

#define EXIT_BAD_INPUT 2  /* the trainer's status for bad config / arguments / files */
#define EXIT_PREEMPTED 75 /* the trainer's TRAIN_EXIT_PREEMPTED */

typedef struct {
    int max_restarts;       /* failures restarted before giving up */
    double hang_timeout;    /* seconds without output = hung; 0: never */
    double kill_grace;      /* SIGTERM -> SIGKILL */
    double preempt_timeout; /* SIGUSR1 -> the job must have left */
    int auto_resume;        /* the first launch resumes from the newest good checkpoint */
    char ckpt[1024];        /* the checkpoint root; "" = none */
    const char* ckpt_from;  /* where ckpt came from, for the start line */
    char** cmd;             /* CMD ARGS..., NULL-terminated */
    int ncmd;
} Opts;

static volatile sig_atomic_t g_signal, g_signals; /* the last stop signal, how many */

static void on_signal(int sig) {
    g_signal = sig;
    g_signals++;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* "# supervise: ..." on stdout, in order with the job's output. */
static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("# supervise: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/supervise [--max-restarts N] [--hang-timeout SEC] [--ckpt DIR]\n"
            "                       [--auto-resume] [--kill-grace SEC] [--preempt-timeout SEC]\n"
            "                       -- CMD ARGS...\n"
            "  runs CMD (e.g. mpirun -n 4 build/train cfg.yaml ...) and restarts it with\n"
            "  --resume <newest good checkpoint> when it fails or hangs (docs/RUNTIME.md,\n"
            "  \"Supervised runs\")\n"
            "  --max-restarts N       restarts after failures before giving up (default 3)\n"
            "  --hang-timeout SEC     no output for SEC seconds = hung: stop and restart it\n"
            "                         (default 600; 0: never)\n"
            "  --ckpt DIR             the checkpoint root (default: CMD's --set\n"
            "                         checkpoint.dir=..., else its YAML config's)\n"
            "  --auto-resume          the first launch too resumes from the newest good\n"
            "                         checkpoint under the root, if there is one\n"
            "  --kill-grace SEC       SIGTERM to SIGKILL when stopping a job (default 10)\n"
            "  --preempt-timeout SEC  after SIGTERM to the supervisor, how long the job has to\n"
            "                         write its checkpoint and leave (default 300)\n");
}

static double parse_seconds(const char* opt, const char* v) {
    char* end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= 0) || x > 1e7) {
        fprintf(stderr, "supervise: error: %s expects seconds >= 0, got '%s'\n", opt,
                PRINTABLE(v));
        exit(2);
    }
    return x;
}

/* The checkpoint root of CMD: its last `--set checkpoint.dir=X`, else the
 * checkpoint.dir of its first *.yaml / *.yml argument, read with the
 * trainer's own config reader. */
static void ckpt_from_cmd(Opts* o) {
    const char* set = NULL;
    const char* yaml = NULL;
    for (int i = 0; i < o->ncmd; i++) {
        const char* a = o->cmd[i];
        if (!strcmp(a, "--set") && i + 1 < o->ncmd &&
            !strncmp(o->cmd[i + 1], "checkpoint.dir=", 15))
            set = o->cmd[i + 1] + 15;
        const size_t n = strlen(a);
        if (!yaml && a[0] != '-' && ((n > 5 && !strcmp(a + n - 5, ".yaml")) ||
                                     (n > 4 && !strcmp(a + n - 4, ".yml"))))
            yaml = a;
    }
    if (set) {
        snprintf(o->ckpt, sizeof o->ckpt, "%s", set);
        o->ckpt_from = "CMD's --set checkpoint.dir";
        return;
    }
    if (!yaml) return;
    static TrainConfig cfg;
    char err[1024];
    config_defaults(&cfg);
    if (config_load(&cfg, yaml, err, sizeof err)) return; /* the trainer will say why */
    snprintf(o->ckpt, sizeof o->ckpt, "%s", cfg.ckpt.dir);
    o->ckpt_from = yaml;
}

static void parse_args(int argc, char** argv, Opts* o) {
    memset(o, 0, sizeof *o);
    o->max_restarts = 3;
    o->hang_timeout = 600;
    o->kill_grace = 10;
    o->preempt_timeout = 300;
    int i = 1;
    for (; i < argc; i++) {
        const char* s = argv[i];
        const int has = i + 1 < argc;
        if (!strcmp(s, "--")) {
            i++;
            break;
        } else if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(s, "--max-restarts") && has) {
            char* end;
            long v = strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end || v < 0 || v > 1000000) {
                fprintf(stderr, "supervise: error: --max-restarts expects 0..1000000, got '%s'\n",
                        PRINTABLE(argv[i]));
                exit(2);
            }
            o->max_restarts = (int)v;
        } else if (!strcmp(s, "--hang-timeout") && has) {
            o->hang_timeout = parse_seconds(s, argv[++i]);
        } else if (!strcmp(s, "--kill-grace") && has) {
            o->kill_grace = parse_seconds(s, argv[++i]);
        } else if (!strcmp(s, "--preempt-timeout") && has) {
            o->preempt_timeout = parse_seconds(s, argv[++i]);
        } else if (!strcmp(s, "--ckpt") && has) {
            snprintf(o->ckpt, sizeof o->ckpt, "%s", argv[++i]);
            o->ckpt_from = "--ckpt";
        } else if (!strcmp(s, "--auto-resume")) {
            o->auto_resume = 1;
        } else if (s[0] == '-') {
            usage(stderr);
            fprintf(stderr, "supervise: error: unknown or incomplete option '%s'\n", PRINTABLE(s));
            exit(2);
        } else {
            break; /* CMD starts here */
        }
    }
    if (i >= argc) {
        usage(stderr);
        fprintf(stderr, "supervise: error: no command given (build/supervise [options] -- CMD)\n");
        exit(2);
    }
    o->cmd = argv + i;
    o->ncmd = argc - i;
    if (!o->ckpt[0]) ckpt_from_cmd(o);
}

/* ---- the job's process tree ---- */

/* Every live (not zombie) process below this one, into out (at most max);
 * returns how many. Ranks start process groups of their own under mpirun,
 * so a group is not enough; the parent links in /proc are, since the
 * supervisor is a child subreaper and inherits whatever the job orphans. */
static int list_tree(pid_t* out, int max) {
    int cap = 4096, n = 0;
    pid_t* pid = malloc((size_t)cap * sizeof *pid);
    pid_t* ppid = malloc((size_t)cap * sizeof *ppid);
    char* live = malloc((size_t)cap);
    DIR* d = opendir("/proc");
    if (!pid || !ppid || !live || !d) {
        free(pid);
        free(ppid);
        free(live);
        if (d) closedir(d);
        return 0;
    }
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE* f = fopen(path, "r");
        if (!f) continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = '\0';
        const char* rp = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
        char state;
        int pp;
        if (!rp || sscanf(rp + 1, " %c %d", &state, &pp) != 2) continue;
        if (n == cap) {
            cap *= 2;
            pid_t* a = realloc(pid, (size_t)cap * sizeof *pid);
            if (a) pid = a;
            pid_t* b = realloc(ppid, (size_t)cap * sizeof *ppid);
            if (b) ppid = b;
            char* c = realloc(live, (size_t)cap);
            if (c) live = c;
            if (!a || !b || !c) break;
        }
        pid[n] = (pid_t)atoi(e->d_name);
        ppid[n] = (pid_t)pp;
        live[n] = state != 'Z' && state != 'X';
        n++;
    }
    closedir(d);
    /* descendants of self: grow the set until nothing joins */
    char* in = calloc((size_t)n + 1, 1);
    const pid_t self = getpid();
    int changed = 1, count = 0;
    while (in && changed) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            if (in[i]) continue;
            int parent_in = ppid[i] == self;
            for (int j = 0; !parent_in && j < n; j++) parent_in = in[j] && pid[j] == ppid[i];
            if (parent_in) in[i] = changed = 1;
        }
    }
    for (int i = 0; in && i < n; i++)
        if (in[i] && live[i] && count < max) out[count++] = pid[i];
    free(in);
    free(pid);
    free(ppid);
    free(live);
    return count;
}

static void signal_tree(int sig) {
    pid_t p[4096];
    const int n = list_tree(p, 4096);
    for (int i = 0; i < n; i++) {
        kill(p[i], sig);
        if (sig == SIGTERM) kill(p[i], SIGCONT); /* a stopped process acts on it only then */
    }
}

/* ---- one attempt ---- */

typedef struct {
    char buf[65536];
    size_t len;
    int fd, out; /* read end; 1 or 2 */
} Stream;

typedef struct {
    pid_t pid;
    int status, exited;
    Stream so, se;
    double last_output;
    int last_step;         /* the highest "step N/M" line of this attempt, -1: none */
    int detail_rank;       /* what the job said about its failure: 3 a rank's */
    char detail[400];      /* death (mpirun), 2 FATAL, 1 "error:" */
} Job;

/* The first 200 bytes of the job's line s as the detail, printable. */
static void set_detail(Job* j, const char* s) {
    zrt_printable_n(s, strnlen(s, 200), j->detail, sizeof j->detail - 3);
    const size_t k = strlen(j->detail);
    if (strlen(s) > 200 && (k < 3 || strcmp(j->detail + k - 3, "...")))
        strcat(j->detail, "...");
}

static void note_line(Job* j, const char* line) {
    int n, m;
    if (sscanf(line, "step %d/%d", &n, &m) == 2 && n > j->last_step) j->last_step = n;
    if (!strstr(line, "still waiting")) j->last_output = now_s();
    const char* p;
    if ((p = strstr(line, "noticed that process rank ")) && j->detail_rank < 3) {
        int r;
        const char* how = strstr(line, " exited ");
        if (sscanf(p + 26, "%d", &r) == 1 && how) {
            snprintf(j->detail, sizeof j->detail, "rank %d%s", r, PRINTABLE(how));
            size_t k = strlen(j->detail);
            while (k && (j->detail[k - 1] == '.' || isspace((unsigned char)j->detail[k - 1])))
                j->detail[--k] = '\0';
            j->detail_rank = 3;
        }
    } else if ((p = strstr(line, "FATAL")) && j->detail_rank < 2) {
        set_detail(j, p);
        j->detail_rank = 2;
    } else if ((p = strstr(line, "error:")) && j->detail_rank < 1) {
        set_detail(j, line);
        j->detail_rank = 1;
    }
}

static void write_all(int fd, const char* p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* our own output is gone: keep supervising */
        p += w;
        n -= (size_t)w;
    }
}

/* Pass complete lines through, noting each; a line longer than the buffer
 * goes through in pieces. Returns 0 at end of file. */
static int pump(Job* j, Stream* s) {
    if (s->fd < 0) return 0;
    ssize_t r = read(s->fd, s->buf + s->len, sizeof s->buf - 1 - s->len);
    if (r < 0) return errno == EAGAIN || errno == EINTR;
    if (r == 0) {
        if (s->len) {
            s->buf[s->len] = '\0';
            note_line(j, s->buf);
            write_all(s->out, s->buf, s->len);
            s->len = 0;
        }
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    s->len += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] != '\n') continue;
        s->buf[i] = '\0';
        note_line(j, s->buf + start);
        s->buf[i] = '\n';
        write_all(s->out, s->buf + start, i + 1 - start);
        start = i + 1;
    }
    memmove(s->buf, s->buf + start, s->len - start);
    s->len -= start;
    if (s->len == sizeof s->buf - 1) { /* no newline in 64 KiB */
        write_all(s->out, s->buf, s->len);
        s->len = 0;
    }
    return 1;
}

static int launch(Job* j, char** argv) {
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
        fprintf(stderr, "supervise: error: pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "supervise: error: fork: %s\n", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* a terminal's ^C reaches the supervisor only */
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* the supervisor killed: mpirun ends the job */
        if (getppid() != parent) _exit(1);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGUSR1, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execvp(argv[0], argv);
        fprintf(stderr, "supervise: error: cannot run %s: %s\n", PRINTABLE(argv[0]),
                strerror(errno));
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    memset(j, 0, sizeof *j);
    j->pid = pid;
    j->so.fd = po[0];
    j->so.out = 1;
    j->se.fd = pe[0];
    j->se.out = 2;
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    j->last_output = now_s();
    j->last_step = -1;
    return 0;
}

static void reap(Job* j) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0)
        if (p == j->pid) {
            j->status = st;
            j->exited = 1;
        }
}

/* Poll the job's output for up to `seconds`, until `until` holds. */
static void pump_for(Job* j, double seconds, int (*until)(Job*)) {
    const double end = now_s() + seconds;
    while (!until(j) && now_s() < end) {
        struct pollfd pf[2] = {{j->so.fd, POLLIN, 0}, {j->se.fd, POLLIN, 0}};
        if (poll(pf, 2, 50) > 0)
            for (int k = 0; k < 2; k++)
                if (pf[k].revents) pump(j, k ? &j->se : &j->so);
        reap(j);
    }
}

static int tree_empty(Job* j) {
    pid_t p[1];
    (void)j;
    return list_tree(p, 1) == 0;
}
static int pipes_closed(Job* j) { return j->so.fd < 0 && j->se.fd < 0; }

/* Stop what is left of the job: SIGTERM (with SIGCONT), SIGKILL after the
 * grace period; then wait until nothing is left and the pipes are drained. */
static void stop_tree(Job* j, double grace) {
    if (!tree_empty(j)) {
        signal_tree(SIGTERM);
        pump_for(j, grace, tree_empty);
    }
    for (int tries = 0; !tree_empty(j) && tries < 20; tries++) {
        signal_tree(SIGKILL);
        pump_for(j, 0.5, tree_empty);
    }
    if (!tree_empty(j)) say("warning: processes of the job survive SIGKILL (uninterruptible I/O?)");
    pump_for(j, 2.0, pipes_closed); /* a grandchild of another session may still hold them */
    for (Stream* s = &j->so; s; s = s == &j->so ? &j->se : NULL)
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
        }
}

typedef enum { END_EXIT, END_HANG } EndKind;

/* Run one attempt to its end. Returns how it ended; *stopped_by says which
 * signal to the supervisor stopped it (0: none). */
static EndKind supervise_attempt(const Opts* o, Job* j, int* stopped_by) {
    double usr1_at = -1, term_at = -1;
    EndKind end = END_EXIT;
    int forwarded = 0;
    while (!j->exited) {
        struct pollfd pf[2] = {{j->so.fd, POLLIN, 0}, {j->se.fd, POLLIN, 0}};
        int r = poll(pf, 2, 100);
        if (r > 0)
            for (int k = 0; k < 2; k++)
                if (pf[k].revents) pump(j, k ? &j->se : &j->so);
        reap(j);
        if (j->exited) break;
        const double t = now_s();
        if (g_signals && !forwarded) {
            forwarded = g_signals;
            *stopped_by = g_signal;
            say("%s: asking the job to finish its step, write a checkpoint and stop (SIGUSR1 to "
                "%s, which forwards it to the ranks); %.0f s allowed",
                strsignal(g_signal), o->cmd[0], o->preempt_timeout);
            kill(j->pid, SIGUSR1);
            usr1_at = t;
        } else if (forwarded && g_signals > forwarded && term_at < 0) {
            say("%s again: stopping the job now", strsignal(g_signal));
            signal_tree(SIGTERM);
            term_at = t;
        } else if (usr1_at >= 0 && t - usr1_at > o->preempt_timeout && term_at < 0) {
            say("the job did not stop within %.0f s of SIGUSR1: stopping it", o->preempt_timeout);
            signal_tree(SIGTERM);
            term_at = t;
        } else if (!forwarded && o->hang_timeout > 0 && t - j->last_output > o->hang_timeout &&
                   term_at < 0) {
            say("no output from the job for %.0f s: it hangs; stopping it", t - j->last_output);
            signal_tree(SIGTERM);
            term_at = t;
            end = END_HANG;
        }
        if (term_at >= 0 && t - term_at > o->kill_grace) {
            signal_tree(SIGKILL);
            term_at = t; /* again after another grace period, if anything is left */
        }
    }
    stop_tree(j, o->kill_grace);
    return end;
}

/* ---- checkpoints ---- */

/* The newest step directory under root that checkpoint_open accepts, into
 * dir; every newer one it refuses is said with why. *newest: the highest
 * step of any step directory (good or not), -1 if none. Returns its step,
 * or -1 if none is good. */
static int pick_checkpoint(const char* root, char* dir, size_t dirlen, int* newest) {
    *newest = -1;
    char* names[CHECKPOINT_MAX_STEPS];
    const int n = checkpoint_list_steps(root, names, CHECKPOINT_MAX_STEPS);
    int found = -1;
    static CheckpointInfo ck;
    for (int i = n - 1; i >= 0; i--) { /* newest first */
        const int s = atoi(names[i] + 5);
        if (s > *newest) *newest = s;
        if (found >= 0) continue;
        char path[1200], err[2048];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        if (checkpoint_open(path, &ck, err, sizeof err) == 0) {
            snprintf(dir, dirlen, "%s", path);
            found = ck.st.step;
        } else {
            const char* why = strncmp(err, "--resume: ", 10) ? err : err + 10;
            say("checkpoint %s is not usable (%s): falling back to the previous one",
                PRINTABLE(path), why);
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    return found;
}

/* CMD with its --resume replaced by `--resume dir` (dir NULL: CMD as is). */
static char** command_for(const Opts* o, const char* dir) {
    char** a = calloc((size_t)o->ncmd + 3, sizeof *a);
    if (!a) return NULL;
    int n = 0;
    for (int i = 0; i < o->ncmd; i++) {
        if (dir && !strcmp(o->cmd[i], "--resume") && i + 1 < o->ncmd) {
            i++;
            continue;
        }
        a[n++] = o->cmd[i];
    }
    if (dir) {
        a[n++] = "--resume";
        a[n++] = (char*)dir;
    }
    a[n] = NULL;
    return a;
}

/* The --resume CMD was given, or NULL. */
static const char* cmd_resume(const Opts* o) {
    const char* r = NULL;
    for (int i = 0; i + 1 < o->ncmd; i++)
        if (!strcmp(o->cmd[i], "--resume")) r = o->cmd[i + 1];
    return r;
}

/* What ended the attempt, in words. */
static void describe(const Job* j, EndKind end, double hang, char* out, size_t n) {
    char how[128];
    if (end == END_HANG)
        snprintf(how, sizeof how, "hang: no output for %g s", hang);
    else if (WIFEXITED(j->status))
        snprintf(how, sizeof how, "exit code %d", WEXITSTATUS(j->status));
    else if (WIFSIGNALED(j->status))
        snprintf(how, sizeof how, "killed by signal %d (%s)", WTERMSIG(j->status),
                 strsignal(WTERMSIG(j->status)));
    else
        snprintf(how, sizeof how, "status %#x", j->status);
    if (j->detail[0] && end != END_HANG)
        snprintf(out, n, "%s (%s)", how, j->detail);
    else
        snprintf(out, n, "%s", how);
}

static int exit_code(const Job* j) {
    if (WIFEXITED(j->status)) return WEXITSTATUS(j->status);
    if (WIFSIGNALED(j->status)) return 128 + WTERMSIG(j->status);
    return 1;
}

int main(int argc, char** argv) {
    Opts o;
    parse_args(argc, argv, &o);
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        say("warning: cannot become a child subreaper (%s): processes the job orphans are not "
            "found", strerror(errno));

    const char* own_resume = cmd_resume(&o);
    char hang[64] = "off";
    if (o.hang_timeout > 0) snprintf(hang, sizeof hang, "%g s", o.hang_timeout);
    if (o.ckpt[0])
        say("checkpoints under %s (from %s); at most %d restart%s, hang timeout %s",
            PRINTABLE(o.ckpt), PRINTABLE(o.ckpt_from), o.max_restarts,
            o.max_restarts == 1 ? "" : "s", hang);
    else
        say("no checkpoint root (--ckpt, or checkpoint.dir in CMD's config): a restart begins at "
            "%s; at most %d restart%s, hang timeout %s",
            own_resume ? "CMD's --resume" : "step 0", o.max_restarts,
            o.max_restarts == 1 ? "" : "s", hang);

    char resume_dir[1200] = "";
    int start_step = 0; /* the step the current attempt resumed from */
    if (o.auto_resume && o.ckpt[0]) {
        int newest;
        start_step = pick_checkpoint(o.ckpt, resume_dir, sizeof resume_dir, &newest);
        if (start_step >= 0)
            say("--auto-resume: resuming step %d from %s", start_step, PRINTABLE(resume_dir));
        else {
            say("--auto-resume: no usable checkpoint under %s: starting as CMD says",
                PRINTABLE(o.ckpt));
            start_step = 0;
            resume_dir[0] = '\0';
        }
    }
    int restarts = 0, last_code = 0;
    for (;;) {
        if (g_signals) { /* signalled between two attempts: do not start another */
            say("stopped by %s before the %s", strsignal(g_signal), last_code ? "restart" : "start");
            return last_code ? last_code : 128 + g_signal;
        }
        char** cmd = command_for(&o, resume_dir[0] ? resume_dir : NULL);
        Job job;
        if (!cmd || launch(&job, cmd)) return 1;
        int stopped_by = 0;
        const EndKind end = supervise_attempt(&o, &job, &stopped_by);
        free(cmd);
        const int code = end == END_HANG ? (exit_code(&job) ? exit_code(&job) : 1) : exit_code(&job);
        last_code = code;
        char what[700];
        describe(&job, end, o.hang_timeout, what, sizeof what);
        if (end == END_EXIT && code == 0) {
            say("the job finished (exit 0) after %d restart%s", restarts, restarts == 1 ? "" : "s");
            return 0;
        }
        if (stopped_by || g_signals) {
            if (code == EXIT_PREEMPTED)
                say("stopped by %s: the job wrote its checkpoint and exited (code %d); continue "
                    "with --auto-resume, or --resume %s",
                    strsignal(g_signal), code, o.ckpt[0] ? PRINTABLE(o.ckpt) : "DIR");
            else
                say("stopped by %s: the job ended with %s, not the preempted code %d: no "
                    "checkpoint of the stop was confirmed",
                    strsignal(g_signal), what, EXIT_PREEMPTED);
            return code;
        }
        if (end == END_EXIT && code == EXIT_BAD_INPUT) {
            say("the job exited with code %d, the trainer's status for bad input (config, "
                "arguments, a refused checkpoint): not restarting, it would fail again", code);
            return code;
        }
        /* The step the next attempt resumes, and what was done after it. */
        int newest = -1, step = -1;
        char next[1200] = "";
        if (o.ckpt[0]) step = pick_checkpoint(o.ckpt, next, sizeof next, &newest);
        int done = job.last_step > start_step ? job.last_step : start_step;
        if (newest > done) done = newest;
        const int counted = !(end == END_EXIT && code == EXIT_PREEMPTED && step > start_step);
        if (counted && restarts == o.max_restarts) {
            fprintf(stderr,
                    "supervise: error: giving up after %d restart%s (--max-restarts %d): the job "
                    "failed again, %s; it had done %d step%s\n",
                    restarts, restarts == 1 ? "" : "s", o.max_restarts, what, done,
                    done == 1 ? "" : "s");
            return code;
        }
        restarts += counted;
        char from[1400];
        if (step >= 0) {
            snprintf(from, sizeof from, "resuming step %d from %s", step, PRINTABLE(next));
            snprintf(resume_dir, sizeof resume_dir, "%s", next);
        } else if (own_resume) {
            snprintf(from, sizeof from, "no usable checkpoint%s%s: resuming from CMD's --resume %s",
                     o.ckpt[0] ? " under " : "", PRINTABLE(o.ckpt), PRINTABLE(own_resume));
            resume_dir[0] = '\0';
            static CheckpointInfo ck;
            char err[2048];
            step = checkpoint_open(own_resume, &ck, err, sizeof err) ? 0 : ck.st.step;
        } else {
            snprintf(from, sizeof from, "no usable checkpoint%s%s: restarting from step 0",
                     o.ckpt[0] ? " under " : "", PRINTABLE(o.ckpt));
            resume_dir[0] = '\0';
            step = 0;
        }
        const int lost = done > step ? done - step : 0;
        char lostw[96];
        if (lost == 1)
            snprintf(lostw, sizeof lostw, "lost 1 step (step %d was done)", done);
        else if (lost)
            snprintf(lostw, sizeof lostw, "lost %d steps (steps %d..%d were done)", lost, step + 1,
                     done);
        else
            snprintf(lostw, sizeof lostw, "lost 0 steps");
        if (counted)
            say("restart %d/%d: %s; %s, %s", restarts, o.max_restarts, what, from, lostw);
        else
            say("restart (not counted: the job was preempted by a signal the supervisor did not "
                "get, and wrote step %d): %s; %s, %s",
                step, what, from, lostw);
        start_step = step;
    }
}
