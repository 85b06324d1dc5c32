/*
 * clockshim: an LD_PRELOAD library that moves a process's wall clock by an
 * offset read from a file, so that a test can make one redis-server's clock
 * jump while the others keep the true time. (Debian's libfaketime hangs
 * redis-server at start; this does much less and only what the tests need.)
 *
 * What it shifts: CLOCK_REALTIME and CLOCK_REALTIME_COARSE of
 * clock_gettime(), gettimeofday() and time(). Redis 7 takes the time of key
 * expiry from gettimeofday() (ustime()/mstime()); the monotonic clocks, which
 * it uses for timeouts and latency, are left alone.
 *
 * The offset: a signed integer of milliseconds, as text, in the file named by
 * $QUORUMLOCK_CLOCK_OFFSET_FILE (default /quorumlock-clock/offset, where
 * the test image has it). No
 * file, or an empty one, means 0. The file is looked at (one stat()) at most
 * once every 2 ms of monotonic time, and read again only when its inode or
 * change time changed; a file caught half written keeps the previous offset
 * and is read again at the next look. One thread looks at a time; the others
 * use the offset they find.
 *
 * Needs only libc: build with
 *   gcc -O2 -shared -fPIC -o clockshim.so clockshim.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_FILE "/quorumlock-clock/offset"
#define CHECK_EVERY_NS 2000000LL

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static _Atomic(clock_gettime_fn) real_clock_gettime;
static _Atomic int64_t offset_ns;
static _Atomic int64_t next_check_ns = 0;
static atomic_flag checking = ATOMIC_FLAG_INIT;
/* Only touched by the thread holding `checking`. */
static dev_t seen_dev;
static ino_t seen_ino;
static struct timespec seen_ctime;
static int seen_any;

static int raw_clock_gettime(clockid_t id, struct timespec *ts) {
    return (int)syscall(SYS_clock_gettime, id, ts);
}

static clock_gettime_fn real(void) {
    clock_gettime_fn f = atomic_load_explicit(&real_clock_gettime, memory_order_acquire);
    if (f == NULL) {
        f = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
        if (f == NULL) {
            f = raw_clock_gettime;
        }
        atomic_store_explicit(&real_clock_gettime, f, memory_order_release);
    }
    return f;
}

/* The path, looked up once and copied: getenv() is not safe against a
 * setenv() in another thread, and redis-server overwrites its original
 * environment block with the process title (setproctitle). */
static char offset_path[512];
static _Atomic int offset_path_set;

static const char *offset_file(void) {
    if (!atomic_load_explicit(&offset_path_set, memory_order_acquire)) {
        const char *path = getenv("QUORUMLOCK_CLOCK_OFFSET_FILE");
        if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof offset_path) {
            path = DEFAULT_FILE;
        }
        /* Every thread that gets here writes the same bytes. */
        memcpy(offset_path, path, strlen(path) + 1);
        atomic_store_explicit(&offset_path_set, 1, memory_order_release);
    }
    return offset_path;
}

/* Resolve both at load time, before the process starts threads. */
__attribute__((constructor)) static void clockshim_init(void) {
    (void)real();
    (void)offset_file();
}

/* Parses "[+-]digits" (surrounding white space allowed) into *out. */
static int parse_ms(const char *s, long n, int64_t *out) {
    long i = 0;
    int neg = 0, digits = 0;
    int64_t v = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (v > (INT64_MAX / 1000000 - 9) / 10) return -1; /* would overflow as ns */
        v = v * 10 + (s[i++] - '0');
        digits++;
    }
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    if (digits == 0 || i != n) return -1;
    *out = (neg ? -v : v) * 1000000;
    return 0;
}

static void reload(void) {
    struct stat st;
    if (stat(offset_file(), &st) != 0) {
        atomic_store(&offset_ns, 0);
        seen_any = 0;
        return;
    }
    if (seen_any && st.st_dev == seen_dev && st.st_ino == seen_ino &&
        st.st_ctim.tv_sec == seen_ctime.tv_sec && st.st_ctim.tv_nsec == seen_ctime.tv_nsec) {
        return;
    }
    int fd = open(offset_file(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    int64_t v = 0;
    if (n == 0) {
        v = 0;  /* an empty file: no offset */
    } else if (n < 0 || n == (ssize_t)sizeof buf || parse_ms(buf, (long)n, &v) != 0) {
        return; /* unreadable or half written: look again next time */
    }
    atomic_store(&offset_ns, v);
    seen_dev = st.st_dev;
    seen_ino = st.st_ino;
    seen_ctime = st.st_ctim;
    seen_any = 1;
}

static int64_t current_offset(void) {
    struct timespec now;
    if (real()(CLOCK_MONOTONIC, &now) == 0) {
        int64_t t = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
        if (t >= atomic_load_explicit(&next_check_ns, memory_order_relaxed) &&
            !atomic_flag_test_and_set_explicit(&checking, memory_order_acquire)) {
            reload();
            atomic_store_explicit(&next_check_ns, t + CHECK_EVERY_NS, memory_order_relaxed);
            atomic_flag_clear_explicit(&checking, memory_order_release);
        }
    }
    return atomic_load_explicit(&offset_ns, memory_order_relaxed);
}

static void shift(struct timespec *ts, int64_t off) {
    int64_t ns = (int64_t)ts->tv_nsec + off % 1000000000LL;
    int64_t sec = (int64_t)ts->tv_sec + off / 1000000000LL;
    if (ns < 0) {
        ns += 1000000000LL;
        sec -= 1;
    } else if (ns >= 1000000000LL) {
        ns -= 1000000000LL;
        sec += 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    int rc = real()(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        int64_t off = current_offset();
        if (off != 0) shift(ts, off);
    }
    return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz; /* obsolete; glibc fills nothing either */
    struct timespec ts;
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
