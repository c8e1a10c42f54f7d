/* clockshim: an LD_PRELOAD library that offsets this process's wall clock.
 *
 * CLOCK_REALTIME (and its _COARSE and TAI variants), gettimeofday, time and timespec_get are
 * moved by an offset read at run time from the file named by $FC_CLOCK_OFFSET_FILE: one signed
 * decimal integer, nanoseconds. The file is re-read at most every 10 ms of monotonic time, so a
 * writer that replaces it (atomic rename) moves the clock of every shimmed process on the node
 * within 10 ms. A missing or malformed file means offset 0. Monotonic clocks are never moved:
 * that is the point (Redis expires keys by wall clock, ZooKeeper sessions by monotonic time).
 *
 * Why not libfaketime: it recurses into malloc from clock_gettime, and redis-server's jemalloc
 * calls clock_gettime while initialising, which deadlocks. So this file calls no malloc, no
 * stdio, and reads every clock through the raw syscall (never through libc or the vDSO, whose
 * symbols we shadow). Go binaries (etcd) read the clock through the vDSO themselves and are not
 * affected by any LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define FC_RELOAD_NS 10000000LL /* 10 ms */
#define FC_NS 1000000000LL

static int64_t fc_offset_ns;      /* the offset now in force */
static int64_t fc_next_reload_ns; /* monotonic time of the next re-read; 0 = never read */
static const char *fc_path;
static int fc_path_looked_up;

static int fc_raw_gettime(clockid_t clk, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, clk, ts);
}

static int64_t fc_parse(const char *buf, long n) {
    int64_t v = 0;
    int neg = 0;
    long i = 0;
    while (i < n && (buf[i] == ' ' || buf[i] == '\t')) i++;
    if (i < n && (buf[i] == '-' || buf[i] == '+')) neg = buf[i++] == '-';
    if (i >= n || buf[i] < '0' || buf[i] > '9') return 0;
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
    return neg ? -v : v;
}

/* Racy by design: threads may re-read at the same time; each store is one aligned 64-bit word,
 * and every value any thread can see was a valid offset at some moment. */
static int64_t fc_offset(void) {
    struct timespec now;
    int64_t mono;
    if (fc_raw_gettime(CLOCK_MONOTONIC, &now) != 0) return __atomic_load_n(&fc_offset_ns, __ATOMIC_RELAXED);
    mono = (int64_t)now.tv_sec * FC_NS + now.tv_nsec;
    if (mono < __atomic_load_n(&fc_next_reload_ns, __ATOMIC_RELAXED))
        return __atomic_load_n(&fc_offset_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&fc_next_reload_ns, mono + FC_RELOAD_NS, __ATOMIC_RELAXED);
    if (!fc_path_looked_up) {
        fc_path = getenv("FC_CLOCK_OFFSET_FILE"); /* getenv does not allocate */
        fc_path_looked_up = 1;
    }
    if (fc_path == NULL) return 0;
    char buf[64];
    long n = -1;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, fc_path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = (long)syscall(SYS_read, fd, buf, sizeof buf);
        syscall(SYS_close, fd);
    }
    int64_t off = n > 0 ? fc_parse(buf, n) : 0;
    __atomic_store_n(&fc_offset_ns, off, __ATOMIC_RELAXED);
    return off;
}

static int fc_is_wall(clockid_t clk) {
    return clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE || clk == CLOCK_TAI;
}

static void fc_shift(struct timespec *ts, int64_t off) {
    int64_t ns = (int64_t)ts->tv_nsec + off % FC_NS;
    int64_t s = (int64_t)ts->tv_sec + off / FC_NS;
    if (ns >= FC_NS) { ns -= FC_NS; s += 1; }
    if (ns < 0) { ns += FC_NS; s -= 1; }
    ts->tv_sec = (time_t)s;
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int rc = fc_raw_gettime(clk, ts);
    if (rc == 0 && fc_is_wall(clk)) fc_shift(ts, fc_offset());
    return rc;
}

int __clock_gettime(clockid_t clk, struct timespec *ts) { return clock_gettime(clk, ts); }

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz; /* the kernel's timezone is obsolete; glibc always zeroes it */
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}

int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) return 0;
    return base;
}
