/*
 * greenckpt.c - libgreenckpt: the phase API of greenckpt.h over the runtime's socket.
 *
 * Why this shape: a C, C++ or Fortran code (or the interposition library around FTI, SCR and
 * VeloC) must be able to announce its checkpoint and restart phases without any dependency
 * beyond libc, without ever being aborted by us, and at negligible cost when no runtime
 * listens. So: the socket path is read once; with none every call only checks its arguments
 * and the thread's phase stack (a few tens of nanoseconds); with one, each call is one
 * request line and one reply line on a connection shared by the process under a mutex. A
 * runtime that cannot be reached is reported once and turns every later call into a no-op.
 * The wire format is greenckpt's (docs/design/levels-and-config.md, version 1).
 */
#define _GNU_SOURCE
#include "greenckpt.h"
#include "internal.h"
#include "json_line.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define GC_MAX_DEPTH 8        /* phases one thread may have open at once */
#define GC_MAX_PATH 4096      /* longest path announced (bytes) */
#define GC_REPLY_MAX 65536    /* the wire format's longest line */
#define GC_MSG_MAX 1024       /* one error line */
#define GC_TIMEOUT_S 120      /* a runtime that does not answer in this long is given up */

static const char *const KIND_NAMES[GC_NKINDS] = GC_KIND_NAMES;

/* ------------------------------------------------------------------ per-thread state */

struct gc_frame {
    int kind;
    int announced; /* the runtime was told of its begin, so its end must be sent */
    struct timespec start;
};

static __thread struct gc_frame tl_stack[GC_MAX_DEPTH];
static __thread int tl_depth;
static __thread char tl_error[GC_MSG_MAX];

/* ------------------------------------------------------------------ per-process state */

enum gc_link { LINK_UNSET = 0, LINK_NONE, LINK_READY, LINK_DOWN };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_link = LINK_UNSET; /* written under g_lock after the first call; read atomically */
#define LINK() __atomic_load_n(&g_link, __ATOMIC_ACQUIRE)
#define SET_LINK(v) __atomic_store_n(&g_link, (v), __ATOMIC_RELEASE)
static pid_t g_pid;                      /* the process that read the environment */
static int g_fd = -1;
static int g_node;
static char g_template[4096];   /* GREENCKPT_RUNTIME_SOCKET, maybe with "{node}" in it */
static char g_socket[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* the path in use */
static int g_linked_node = -1;  /* the node whose socket g_fd is connected to */
static int g_advice[GC_NKINDS];  /* advice of the open phase of each kind (process-wide) */
static int g_open[GC_NKINDS];    /* how many threads of this process hold each kind */
static char g_reply[GC_REPLY_MAX]; /* the last reply line */
static char g_rbuf[GC_REPLY_MAX];  /* bytes received and not yet consumed */
static size_t g_rlen;

/* Record and print one error line; return `status` so callers can `return fail(...)`. */
static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_error, sizeof tl_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "greenckpt: %s\n", tl_error);
    return status;
}

static int parse_node(const char *text, int *out) {
    char *end = NULL;
    long value;
    if (text == NULL || *text == '\0') return 0;
    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < 0 || value > 0x7fffffff) return -1;
    *out = (int)value;
    return 1;
}

/* Read the environment once per process: the socket path and the node index. */
static void init_once(void) {
    const char *path = getenv("GREENCKPT_RUNTIME_SOCKET");
    const char *node = getenv("GREENCKPT_NODE");
    g_pid = getpid();
    if (parse_node(node, &g_node) < 0) {
        fprintf(stderr,
                "greenckpt: GREENCKPT_NODE=%.40s is not a node index (an integer >= 0); "
                "using node 0\n",
                node);
        g_node = 0;
    }
    if (path == NULL || *path == '\0') {
        SET_LINK(LINK_NONE);
        return;
    }
    if (strlen(path) >= sizeof g_template) {
        fprintf(stderr, "greenckpt: GREENCKPT_RUNTIME_SOCKET is too long; phase announcements "
                        "are off\n");
        SET_LINK(LINK_DOWN);
        return;
    }
    strcpy(g_template, path);
    SET_LINK(LINK_UNSET); /* connect lazily, under the lock, at the first announcement */
}

/* The socket path of this process's node: the template with every "{node}" replaced by the
 * node index (each emulated node of a job on one host has its own agent and socket; on real
 * hosts the path has no placeholder and is node-local). -1 if the result is too long. */
static int resolve_socket(void) {
    const char *t = g_template;
    size_t n = 0;
    while (*t) {
        char digits[16];
        const char *piece = t;
        size_t len = 1;
        if (strncmp(t, "{node}", 6) == 0) {
            snprintf(digits, sizeof digits, "%d", g_node);
            piece = digits;
            len = strlen(digits);
            t += 6;
        } else {
            t += 1;
        }
        if (n + len >= sizeof g_socket) return -1;
        memcpy(g_socket + n, piece, len);
        n += len;
    }
    g_socket[n] = '\0';
    return 0;
}

static int check_fork(void) {
    if (getpid() != g_pid)
        return fail(GREENCKPT_EFORK,
                    "called from a forked child (pid %ld) of the process that started "
                    "announcing (pid %ld); announce phases from that process",
                    (long)getpid(), (long)g_pid);
    return GREENCKPT_OK;
}

/* Give up on the runtime for the rest of the process (under g_lock), saying so once. */
static void link_down(const char *why) {
    if (g_fd >= 0) close(g_fd);
    g_fd = -1;
    g_rlen = 0;
    if (LINK() != LINK_DOWN)
        fprintf(stderr,
                "greenckpt: the runtime at %s %s; phase announcements are off for this "
                "process (pid %ld), which goes on with its own settings\n",
                g_socket, why, (long)g_pid);
    SET_LINK(LINK_DOWN);
}

/* Connect on first use (under g_lock); 1 when connected. */
static int ensure_link(void) {
    struct sockaddr_un addr;
    struct timeval tv = {GC_TIMEOUT_S, 0};
    char why[160];
    int fd;
    if (LINK() == LINK_READY) return 1;
    if (LINK() != LINK_UNSET) return 0;
    if (resolve_socket() != 0) {
        snprintf(g_socket, sizeof g_socket, "GREENCKPT_RUNTIME_SOCKET");
        link_down("names a path longer than a socket path may be");
        return 0;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, sizeof why, "cannot be reached (socket: %s)", strerror(errno));
        link_down(why);
        return 0;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, g_socket);
    while (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (errno == EINTR) continue; /* a signal while the backlog was full: try again */
        snprintf(why, sizeof why, "cannot be reached (%s)", strerror(errno));
        close(fd);
        link_down(why);
        return 0;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    g_fd = fd;
    g_linked_node = g_node;
    SET_LINK(LINK_READY);
    return 1;
}

/* ------------------------------------------------------------------ the wire format */

struct gc_buf {
    char data[GC_MAX_PATH * 12 + 256]; /* the working folder and the path, escaped */
    size_t len;
    int overflow;
};

static void put(struct gc_buf *b, const char *text, size_t n) {
    if (b->len + n >= sizeof b->data) {
        b->overflow = 1;
        return;
    }
    memcpy(b->data + b->len, text, n);
    b->len += n;
}

static void putf(struct gc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(struct gc_buf *b, const char *fmt, ...) {
    char tmp[128];
    int n;
    va_list ap;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->overflow = 1; /* never sent: see exchange */
        return;
    }
    put(b, tmp, (size_t)n);
}

/* The characters of a JSON string: quotes, backslashes and control characters escaped; other
 * bytes as given (the runtime refuses a path that is not UTF-8, with an error reply). */
static void put_chars(struct gc_buf *b, const char *s) {
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            put(b, esc, 2);
        } else if (c < 0x20) {
            putf(b, "\\u%04x", c);
        } else {
            put(b, s, 1);
        }
    }
}

static int send_all(const char *data, size_t n) {
    while (n > 0) {
        ssize_t sent = send(g_fd, data, n, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) return -1;
        data += sent;
        n -= (size_t)sent;
    }
    return 0;
}

/* One reply line into g_reply (NUL-terminated, newline dropped); -1 on error or EOF. Reads
 * in chunks (a reply with its settings is about a kilobyte); bytes after the newline, which
 * a well-behaved runtime never sends, are kept for the next reply. */
static int recv_line(void) {
    for (;;) {
        char *nl = memchr(g_rbuf, '\n', g_rlen);
        ssize_t got;
        if (nl != NULL) {
            size_t n = (size_t)(nl - g_rbuf);
            memcpy(g_reply, g_rbuf, n);
            g_reply[n] = '\0';
            g_rlen -= n + 1;
            memmove(g_rbuf, nl + 1, g_rlen);
            return 0;
        }
        if (g_rlen == sizeof g_rbuf) return -1; /* longer than the wire format allows */
        got = recv(g_fd, g_rbuf + g_rlen, sizeof g_rbuf - g_rlen, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        g_rlen += (size_t)got;
    }
}

/* The top-level member `key` of the reply line: its value's first byte and length, or NULL. */
static const char *member(const char *key, size_t *len) {
    const char *value;
    return gcj_member(g_reply, strlen(g_reply), key, &value, len) ? value : NULL;
}

/* The reply's "error" text, unescaped enough for one line on stderr. */
static void reply_error(char *out, size_t size) {
    size_t len, n = 0;
    const char *p = member("error", &len), *end;
    if (p == NULL || *p != '"') {
        snprintf(out, size, "no reason given");
        return;
    }
    for (end = p + len - 1, ++p; p < end && n + 1 < size; ++p) { /* end: the closing quote */
        if (*p == '\\' && p + 1 < end) ++p;
        out[n++] = *p;
    }
    out[n] = '\0';
}

/* Send one request line and read its reply (under g_lock). Returns GREENCKPT_OK,
 * GREENCKPT_NO_RUNTIME (nothing listens) or GREENCKPT_ERUNTIME (refused or broken). */
static int exchange(const struct gc_buf *request, const char *what) {
    const char *ok;
    size_t ok_len;
    char why[400];
    if (!ensure_link()) return GREENCKPT_NO_RUNTIME;
    if (request->overflow) /* cannot happen with the limits checked, but never send half */
        return fail(GREENCKPT_EINVAL, "the %s request does not fit its buffer", what);
    errno = 0;
    if (send_all(request->data, request->len) != 0 || recv_line() != 0) {
        snprintf(why, sizeof why, "broke the connection during a %s (%s)", what,
                 errno ? strerror(errno) : "closed by the runtime");
        link_down(why); /* prints the one line */
        snprintf(tl_error, sizeof tl_error, "the runtime at %s %s", g_socket, why);
        return GREENCKPT_ERUNTIME;
    }
    ok = member("ok", &ok_len);
    if (ok != NULL && gcj_is_literal(ok, ok_len, "true")) return GREENCKPT_OK;
    reply_error(why, sizeof why);
    return fail(GREENCKPT_ERUNTIME, "the runtime refused %s: %s", what, why);
}

/* The reply's io_processes: the advice, or 0 for null/absent/malformed. */
static int reply_io_processes(void) {
    size_t len;
    const char *p = member("io_processes", &len);
    long value;
    if (p == NULL || !gcj_non_negative_number(p, len, 1)) return 0;
    value = strtol(p, NULL, 10);
    return value >= 1 && value <= 0x7fffffff ? (int)value : 0;
}

/* ------------------------------------------------------------------ the API */

const char *greenckpt_kind_name(int kind) {
    return kind >= 0 && kind < GC_NKINDS ? KIND_NAMES[kind] : NULL;
}

const char *greenckpt_strerror(int status) {
    switch (status) {
    case GREENCKPT_OK: return "ok";
    case GREENCKPT_NO_RUNTIME: return "no runtime listening (nothing sent)";
    case GREENCKPT_EINVAL: return "invalid argument";
    case GREENCKPT_ESTATE: return "phase begun or ended out of order";
    case GREENCKPT_EFORK: return "called from a forked child";
    case GREENCKPT_ERUNTIME: return "the runtime refused the request or could not be reached";
    default: return "unknown status";
    }
}

const char *greenckpt_last_error(void) { return tl_error; }

static int started(void) {
    pthread_once(&g_once, init_once);
    return check_fork();
}

int greenckpt_attached(void) {
    int attached;
    if (started() != GREENCKPT_OK) return 0;
    if (LINK() == LINK_NONE || LINK() == LINK_DOWN) return 0;
    pthread_mutex_lock(&g_lock);
    attached = ensure_link();
    pthread_mutex_unlock(&g_lock);
    return attached;
}

int greenckpt_set_node(int node) {
    int status = started();
    if (status != GREENCKPT_OK) return status;
    if (node < 0)
        return fail(GREENCKPT_EINVAL, "greenckpt_set_node(%d): a node index is >= 0", node);
    pthread_mutex_lock(&g_lock);
    if (node != g_node && strstr(g_template, "{node}") != NULL) {
        int k, open = 0;
        for (k = 0; k < GC_NKINDS; ++k) open += g_open[k];
        if (open > 0) {
            pthread_mutex_unlock(&g_lock);
            return fail(GREENCKPT_ESTATE,
                        "greenckpt_set_node(%d): %d phase(s) of this process are open on node "
                        "%d's runtime; end them first",
                        node, open, g_node);
        }
    }
    g_node = node;
    if (LINK() == LINK_READY && g_linked_node != node && strstr(g_template, "{node}") != NULL) {
        close(g_fd); /* that node's agent is not ours: connect to this node's at next use */
        g_fd = -1;
        g_rlen = 0;
        SET_LINK(LINK_UNSET);
    }
    pthread_mutex_unlock(&g_lock);
    return GREENCKPT_OK;
}

static int check_begin(int kind, int level, const char *path, int64_t bytes) {
    int io = kind <= GREENCKPT_FLUSH;
    int i;
    if (greenckpt_kind_name(kind) == NULL)
        return fail(GREENCKPT_EINVAL,
                    "greenckpt_begin: unknown kind %d; use GREENCKPT_CHECKPOINT, _RESTART, "
                    "_FLUSH, _REWORK or _COMPUTE",
                    kind);
    /* checked here, not left to the runtime: a level the runtime would refuse must be refused
     * the same way when no runtime listens, or a program tested without one breaks under it */
    if (level < 0 || level > GREENCKPT_MAX_LEVEL)
        return fail(GREENCKPT_EINVAL,
                    "greenckpt_begin(%s): level %d; a level is 1 to %d (GREENCKPT_MAX_LEVEL), or "
                    "GREENCKPT_NO_LEVEL",
                    KIND_NAMES[kind], level, GREENCKPT_MAX_LEVEL);
    if (bytes < (io ? 1 : 0) && !(io && bytes == GREENCKPT_UNKNOWN_BYTES))
        return fail(GREENCKPT_EINVAL,
                    "greenckpt_begin(%s): %lld bytes; give the bytes this process moves "
                    "(>= %d, or GREENCKPT_UNKNOWN_BYTES)",
                    KIND_NAMES[kind], (long long)bytes, io);
    if (io && (path == NULL || *path == '\0'))
        return fail(GREENCKPT_EINVAL,
                    "greenckpt_begin(%s): no path; give the checkpoint file or directory, "
                    "from which the runtime finds the storage device",
                    KIND_NAMES[kind]);
    if (path != NULL && strlen(path) > GC_MAX_PATH)
        return fail(GREENCKPT_EINVAL, "greenckpt_begin(%s): path longer than %d bytes",
                    KIND_NAMES[kind], GC_MAX_PATH);
    if (tl_depth == GC_MAX_DEPTH)
        return fail(GREENCKPT_ESTATE,
                    "greenckpt_begin(%s): %d phases already open in this thread; end one first",
                    KIND_NAMES[kind], GC_MAX_DEPTH);
    for (i = 0; i < tl_depth; ++i)
        if (tl_stack[i].kind == kind)
            return fail(GREENCKPT_ESTATE,
                        "greenckpt_begin(%s): a %s phase is already open in this thread; end "
                        "it first",
                        KIND_NAMES[kind], KIND_NAMES[kind]);
    return GREENCKPT_OK;
}

static void begin_request(struct gc_buf *b, int kind, int level, const char *path,
                          int64_t bytes) {
    b->len = 0;
    b->overflow = 0;
    putf(b, "{\"v\":%d,\"event\":\"begin\",\"kind\":\"%s\",\"level\":", GREENCKPT_PROTOCOL_VERSION,
         KIND_NAMES[kind]);
    if (level == GREENCKPT_NO_LEVEL)
        put(b, "null", 4);
    else
        putf(b, "%d", level);
    put(b, ",\"path\":\"", 9);
    if (path != NULL && *path != '\0' && *path != '/') { /* the runtime's cwd is not ours */
        char cwd[GC_MAX_PATH];
        if (getcwd(cwd, sizeof cwd) != NULL) {
            put_chars(b, cwd);
            put(b, "/", 1);
        }
    }
    put_chars(b, path ? path : "");
    /* scope "connection": the phase ends (failed) if this process's connection closes first,
     * e.g. when the rank is killed in the middle of a checkpoint */
    if (bytes == GREENCKPT_UNKNOWN_BYTES && kind <= GREENCKPT_FLUSH)
        putf(b, "\",\"size\":null"); /* the wire format's "unknown" */
    else
        putf(b, "\",\"size\":%lld", (long long)bytes);
    putf(b, ",\"node\":%d,\"pid\":%ld,\"scope\":\"connection\"}\n", g_node, (long)g_pid);
}

int greenckpt_begin(int kind, int level, const char *path, int64_t bytes, int *io_processes) {
    static struct gc_buf request; /* used under g_lock only */
    struct gc_frame *frame;
    int status = started();
    int advice = 0;
    if (io_processes != NULL) *io_processes = 0;
    if (status != GREENCKPT_OK) return status;
    status = check_begin(kind, level, path, bytes);
    if (status != GREENCKPT_OK) return status;
    frame = &tl_stack[tl_depth];
    frame->kind = kind;
    frame->announced = 0;
    clock_gettime(CLOCK_MONOTONIC, &frame->start);
    status = GREENCKPT_NO_RUNTIME;
    if (LINK() != LINK_NONE && LINK() != LINK_DOWN) {
        pthread_mutex_lock(&g_lock);
        begin_request(&request, kind, level, path, bytes);
        status = exchange(&request, KIND_NAMES[kind]);
        if (status == GREENCKPT_OK) {
            advice = kind <= GREENCKPT_FLUSH ? reply_io_processes() : 0;
            if (g_open[kind]++ == 0) g_advice[kind] = advice;
            frame->announced = 1;
        }
        pthread_mutex_unlock(&g_lock);
    }
    tl_depth += 1; /* begun here even when the runtime was not told, so the end matches */
    if (io_processes != NULL) *io_processes = advice;
    return status;
}

static double seconds_since(const struct timespec *start) {
    struct timespec now;
    double s;
    clock_gettime(CLOCK_MONOTONIC, &now);
    s = (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
    return s > 0 ? s : 0.0;
}

int greenckpt_end(int kind, int ok) {
    static struct gc_buf request; /* used under g_lock only */
    struct gc_frame frame;
    int status = started();
    if (status != GREENCKPT_OK) return status;
    if (greenckpt_kind_name(kind) == NULL)
        return fail(GREENCKPT_EINVAL, "greenckpt_end: unknown kind %d", kind);
    if (tl_depth == 0)
        return fail(GREENCKPT_ESTATE,
                    "greenckpt_end(%s): no phase is open in this thread; call greenckpt_begin "
                    "first",
                    KIND_NAMES[kind]);
    frame = tl_stack[tl_depth - 1];
    if (frame.kind != kind)
        return fail(GREENCKPT_ESTATE,
                    "greenckpt_end(%s): the innermost phase open in this thread is a %s; end "
                    "it first (phases nest)",
                    KIND_NAMES[kind], KIND_NAMES[frame.kind]);
    tl_depth -= 1;
    if (!frame.announced) return GREENCKPT_NO_RUNTIME;
    pthread_mutex_lock(&g_lock);
    if (--g_open[kind] == 0) g_advice[kind] = 0;
    request.len = 0;
    request.overflow = 0;
    putf(&request,
         "{\"v\":%d,\"event\":\"end\",\"kind\":\"%s\",\"node\":%d,\"ok\":%s,\"seconds\":%.9f}\n",
         GREENCKPT_PROTOCOL_VERSION, KIND_NAMES[kind], g_node, ok ? "true" : "false",
         seconds_since(&frame.start));
    status = LINK() == LINK_READY ? exchange(&request, KIND_NAMES[kind]) : GREENCKPT_NO_RUNTIME;
    pthread_mutex_unlock(&g_lock);
    return status;
}

int greenckpt_io_processes(int kind) {
    int advice;
    pthread_once(&g_once, init_once);
    if (greenckpt_kind_name(kind) == NULL || getpid() != g_pid) return 0; /* no lock in a child */
    pthread_mutex_lock(&g_lock);
    advice = g_advice[kind];
    pthread_mutex_unlock(&g_lock);
    return advice;
}
