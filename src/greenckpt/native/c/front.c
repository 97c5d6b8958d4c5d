/*
 * front.c - libgreenckpt_front: the runtime's notification socket served from native code.
 *
 * Why: a phase call from a C, C++ or Fortran code must cost the application tens of
 * microseconds, not the few hundred that the Python runtime takes to read its meters, decide
 * and account. So the socket is served here, by one thread that holds no Python lock: a begin
 * the runtime has answered before for the same request line (the same phase of the same
 * process) gets that answer again at once, a begin joining a phase already open gets that
 * phase's answer, and a well-formed end of an open phase gets "ok"; every line, answered here
 * or not, is queued in arrival order for the runtime (Python), which accounts it, checks the
 * answer that was sent and corrects the cache when its decision changed. A line this front
 * cannot answer (the first begin of a phase, a ping, anything unusual) waits for the
 * runtime's answer, and so does every line after it, so that the state kept here (how many
 * phases of each kind are open) never runs ahead of the runtime's in a way that matters.
 * The Python side (greenckpt.runtime.front) drives it through ctypes; docs/design/runtime.md
 * ("The native front") says more.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "greenckpt.h"
#include "internal.h"
#include "json_line.h"

#define GCF_BUCKETS 1024
#define GCF_CACHE_MAX 4096   /* request lines remembered; the cache is emptied when full */
#define GCF_SEND_WAIT_MS 1000 /* a client that does not read its reply for this long is dropped */
#define GCF_QUEUE_MAX 65536   /* events not yet taken by the runtime before lines wait for it */
#define GCF_STR(x) #x
#define GCF_XSTR(x) GCF_STR(x)
/* The answer to a line that could not be queued for the runtime (out of memory). */
#define GCF_NO_MEMORY_REPLY                                                                  \
    "{\"v\":" GCF_XSTR(GREENCKPT_PROTOCOL_VERSION) ",\"ok\":false,\"error\":\"the runtime's " \
    "native front is out of memory: this request was not passed to the runtime\"}\n"

/* What gcf_next hands the runtime. */
enum {
    GCF_ANSWERED = 1,       /* a request answered here; the answer sent follows the line */
    GCF_PENDING = 2,        /* a request waiting for gcf_reply */
    GCF_CLOSED = 3,         /* a connection closed; its phases were released here */
    GCF_CLOSED_PENDING = 4, /* a connection closed behind waiting requests: gcf_reply(ok=0) */
    GCF_PARTIAL = 5         /* the client closed in the middle of a line (the bytes follow) */
};

enum { EV_OTHER = 0, EV_BEGIN = 1, EV_END = 2, EV_CLOSE = 3 };

struct gcf_event { /* the layout ctypes mirrors in greenckpt.runtime.front */
    uint64_t conn;
    int32_t type;
    int32_t pad;
    double t; /* CLOCK_MONOTONIC seconds when the line was complete */
    uint64_t line_len;
    uint64_t sent_len;
};

struct conn {
    struct conn *next;
    int fd; /* -1 once closed */
    uint64_t id;
    char *buf;
    size_t len;
    int dead; /* an answer could not be sent: shut down, closed by the serving thread */
    int held[GC_NKINDS]; /* phases of scope "connection" it began and did not end */
    size_t waiting;        /* its requests waiting for the runtime */
    struct item *bye;      /* its close event and the wait for the runtime's answer to it, */
    struct pend *bye_wait; /* allocated when it was accepted: a close is never lost */
};

struct item { /* one queued event */
    struct item *next;
    struct gcf_event ev;
    char *bytes; /* the line, then the answer sent */
};

struct pend { /* one request (or closed connection) waiting for the runtime */
    struct pend *next;
    uint64_t conn;
    int event, kind, scope_conn;
};

struct entry { /* the cache: a request line and the answer the runtime gave it */
    struct entry *next;
    char *line, *reply;
    size_t line_len, reply_len;
};

struct gcf {
    int listen_fd, epfd, wake_fd;
    pthread_t thread;
    int running, stopping;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    size_t max_line;
    int nkinds;
    char kinds[GC_NKINDS][16];
    char *end_reply, *long_reply;
    size_t end_reply_len, long_reply_len;
    int open[GC_NKINDS];
    char *open_reply[GC_NKINDS];
    size_t open_reply_len[GC_NKINDS];
    size_t pending;
    struct pend *phead, *ptail;
    struct item *qhead, *qtail;
    struct conn *conns;
    uint64_t next_id;
    struct entry *cache[GCF_BUCKETS];
    size_t cache_n;
    int fast; /* 0: every line waits for the runtime (its decisions do not repeat) */
    uint64_t answered, waited, queued;
    size_t backlog; /* events queued and not yet taken */
    int fail_alloc_in; /* test-only (gcf_fail_alloc): the allocation for a line made to fail */
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static char *copy(const char *s, size_t n) {
    char *d = malloc(n ? n : 1);
    if (d != NULL && n) memcpy(d, s, n);
    return d;
}

struct req {
    int event, kind, scope_conn, end_ok; /* end_ok: an end whose every field is valid */
};

/* What this front needs of a request line: its event, kind and scope, and for an end whether
 * the runtime would take it (version 1, known kind, "ok" a boolean, "node"/"seconds" numbers
 * >= 0). Anything unusual leaves event EV_OTHER: the runtime answers it. */
static struct req parse(const struct gcf *f, const char *line, size_t n) {
    struct req r = {EV_OTHER, -1, 0, 0};
    const char *v;
    size_t vl;
    int k;
    if (!gcj_member(line, n, "v", &v, &vl) || !gcj_is_literal(v, vl, "1")) return r;
    if (!gcj_member(line, n, "kind", &v, &vl) || vl < 3 || v[0] != '"') return r;
    for (k = 0; k < f->nkinds; ++k)
        if (vl == strlen(f->kinds[k]) + 2 && memcmp(v + 1, f->kinds[k], vl - 2) == 0) break;
    if (k == f->nkinds) return r;
    r.kind = k;
    if (!gcj_member(line, n, "event", &v, &vl)) return r;
    if (gcj_is_literal(v, vl, "\"begin\"")) {
        r.event = EV_BEGIN;
        r.scope_conn =
            gcj_member(line, n, "scope", &v, &vl) && gcj_is_literal(v, vl, "\"connection\"");
    } else if (gcj_is_literal(v, vl, "\"end\"")) {
        r.event = EV_END;
        r.end_ok = 1;
        if (gcj_member(line, n, "ok", &v, &vl) && !gcj_is_literal(v, vl, "true") &&
            !gcj_is_literal(v, vl, "false"))
            r.end_ok = 0;
        if (gcj_member(line, n, "node", &v, &vl) && !gcj_non_negative_number(v, vl, 1))
            r.end_ok = 0;
        if (gcj_member(line, n, "seconds", &v, &vl) && !gcj_non_negative_number(v, vl, 0))
            r.end_ok = 0;
    }
    return r;
}

/* ------------------------------------------------------------------ the cache */

static size_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    size_t i;
    for (i = 0; i < n; ++i) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return (size_t)(h % GCF_BUCKETS);
}

static struct entry *cache_find(struct gcf *f, const char *line, size_t n) {
    struct entry *e;
    for (e = f->cache[hash(line, n)]; e != NULL; e = e->next)
        if (e->line_len == n && memcmp(e->line, line, n) == 0) return e;
    return NULL;
}

static void cache_clear_locked(struct gcf *f) {
    size_t b;
    for (b = 0; b < GCF_BUCKETS; ++b) {
        while (f->cache[b] != NULL) {
            struct entry *e = f->cache[b];
            f->cache[b] = e->next;
            free(e->line);
            free(e->reply);
            free(e);
        }
    }
    f->cache_n = 0;
}

/* ------------------------------------------------------------------ the queue */

/* Test-only (gcf_fail_alloc): whether this allocation for a line is made to fail. */
static int injected_failure(struct gcf *f) {
    if (f->fail_alloc_in <= 0) return 0;
    return --f->fail_alloc_in == 0;
}

/* A queued event holding `line` then `sent`, or NULL when out of memory (nothing queued). */
static struct item *new_item(struct gcf *f, uint64_t conn, int type, double t, const char *line,
                             size_t line_len, const char *sent, size_t sent_len) {
    struct item *it = injected_failure(f) ? NULL : calloc(1, sizeof *it);
    if (it == NULL) return NULL;
    it->bytes = malloc(line_len + sent_len + 1);
    if (it->bytes == NULL) {
        free(it);
        return NULL;
    }
    if (line_len) memcpy(it->bytes, line, line_len);
    if (sent_len) memcpy(it->bytes + line_len, sent, sent_len);
    it->ev.conn = conn;
    it->ev.type = type;
    it->ev.t = t;
    it->ev.line_len = line_len;
    it->ev.sent_len = sent_len;
    return it;
}

static void free_item(struct item *it) {
    if (it != NULL) free(it->bytes);
    free(it);
}

static void push_item(struct gcf *f, struct item *it) {
    if (f->qtail) f->qtail->next = it;
    else f->qhead = it;
    f->qtail = it;
    f->queued += 1;
    f->backlog += 1;
    pthread_cond_broadcast(&f->ready);
}

/* A request waiting for the runtime, or NULL when out of memory. */
static struct pend *new_pend(struct gcf *f, uint64_t conn, int event, int kind, int scope_conn) {
    struct pend *p = injected_failure(f) ? NULL : calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->conn = conn;
    p->event = event;
    p->kind = kind;
    p->scope_conn = scope_conn;
    return p;
}

static void push_pend(struct gcf *f, struct pend *p) {
    if (f->ptail) f->ptail->next = p;
    else f->phead = p;
    f->ptail = p;
    f->pending += 1;
    f->waited += 1;
}

/* ------------------------------------------------------------------ connections */

static struct conn *find_conn(struct gcf *f, uint64_t id) {
    struct conn *c;
    for (c = f->conns; c != NULL; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

static void forget_conn(struct gcf *f, struct conn *gone) {
    struct conn **p;
    for (p = &f->conns; *p != NULL; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            free(gone->buf);
            free_item(gone->bye);
            free(gone->bye_wait);
            free(gone);
            return;
        }
}

static void close_fd(struct gcf *f, struct conn *c) {
    if (c->fd < 0) return;
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
}

/* Send a whole answer; a client that stops reading is dropped rather than let it stall
 * every other connection (shut down here: only the serving thread closes descriptors, so
 * none is closed under its recv). */
static void send_to(struct conn *c, const char *data, size_t n) {
    while (n > 0 && !c->dead && c->fd >= 0) {
        ssize_t sent = send(c->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0) {
            data += sent;
            n -= (size_t)sent;
        } else if (sent < 0 && errno == EINTR) {
            continue;
        } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {c->fd, POLLOUT, 0};
            if (poll(&pfd, 1, GCF_SEND_WAIT_MS) <= 0) c->dead = 1;
        } else {
            c->dead = 1;
        }
        if (c->dead) shutdown(c->fd, SHUT_RDWR);
    }
}

/* Read and drop what the client has already sent: closing a socket with unread input
 * resets the connection, and the client would lose the answer just sent. */
static void discard_input(struct conn *c) {
    char scratch[4096];
    while (c->fd >= 0 && recv(c->fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0) {
    }
}

static void release_held(struct gcf *f, struct conn *c) {
    int k;
    for (k = 0; k < f->nkinds; ++k) {
        f->open[k] -= c->held[k];
        if (f->open[k] <= 0) {
            f->open[k] = 0;
            free(f->open_reply[k]);
            f->open_reply[k] = NULL;
        }
        c->held[k] = 0;
    }
}

/* A connection ended (EOF, error, a line too long, or the front stopping). Its phases of
 * scope "connection" are released as the runtime will release them (when it reads the
 * event), unless requests still wait: then the runtime's answer to the close does it. */
static void conn_closed(struct gcf *f, struct conn *c, double t) {
    struct item *bye = c->bye;
    struct pend *bye_wait = c->bye_wait;
    c->bye = NULL;
    c->bye_wait = NULL;
    if (bye == NULL) { /* its close was queued before (the front stopping behind it) */
        close_fd(f, c);
        forget_conn(f, c);
        return;
    }
    bye->ev.conn = c->id;
    bye->ev.t = t;
    if (f->pending > 0 && !f->stopping) {
        /* the answers still owed to it may be read after a half-close: keep the descriptor
         * (no longer read) until the runtime has answered the close too */
        if (c->fd >= 0) epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        bye_wait->conn = c->id;
        bye_wait->event = EV_CLOSE;
        bye_wait->kind = -1;
        push_pend(f, bye_wait);
        bye->ev.type = GCF_CLOSED_PENDING;
        push_item(f, bye);
        return;
    }
    free(bye_wait);
    close_fd(f, c);
    if (!f->stopping) release_held(f, c);
    bye->ev.type = GCF_CLOSED;
    push_item(f, bye);
    forget_conn(f, c);
}

/* A line that could not be queued for the runtime (out of memory): the client is answered at
 * once with an error, never left waiting out its timeout for an answer that cannot come. A
 * client with earlier requests still waiting (one that does not wait for each answer before
 * its next line; greenckpt's clients all do) would get this answer before theirs: its
 * connection is shut down instead, which it sees at once too. */
static void refuse(struct conn *c) {
    if (c->waiting == 0) {
        send_to(c, GCF_NO_MEMORY_REPLY, sizeof GCF_NO_MEMORY_REPLY - 1);
        return;
    }
    c->dead = 1;
    shutdown(c->fd, SHUT_RDWR);
}

/* One complete request line from c (under the lock). */
static void request(struct gcf *f, struct conn *c, const char *line, size_t n, double t) {
    struct req r = parse(f, line, n);
    struct item *it;
    struct pend *p;
    /* a runtime this far behind makes clients wait for it: the queue stays bounded */
    if (!f->fast || f->backlog >= GCF_QUEUE_MAX) goto wait;
    if (f->pending == 0 && r.event == EV_BEGIN) {
        const char *reply = NULL;
        size_t len = 0;
        int k = r.kind;
        if (f->open[k] > 0) {
            reply = f->open_reply[k];
            len = f->open_reply_len[k];
        } else {
            struct entry *e = cache_find(f, line, n);
            if (e != NULL) {
                reply = e->reply;
                len = e->reply_len;
            }
        }
        if (reply != NULL) {
            /* the event first: an answer sent is an answer the runtime will account */
            it = new_item(f, c->id, GCF_ANSWERED, t, line, n, reply, len);
            if (it == NULL) goto refuse;
            if (f->open[k] == 0) {
                f->open_reply[k] = copy(reply, len);
                f->open_reply_len[k] = len;
                if (f->open_reply[k] == NULL) { /* out of memory: let Python answer */
                    free_item(it);
                    goto wait;
                }
                reply = f->open_reply[k];
            }
            f->open[k] += 1;
            if (r.scope_conn) c->held[k] += 1;
            f->answered += 1;
            send_to(c, reply, len);
            push_item(f, it);
            return;
        }
    } else if (f->pending == 0 && r.event == EV_END && r.end_ok && f->open[r.kind] > 0) {
        int k = r.kind;
        it = new_item(f, c->id, GCF_ANSWERED, t, line, n, f->end_reply, f->end_reply_len);
        if (it == NULL) goto refuse;
        f->open[k] -= 1;
        if (f->open[k] == 0) {
            free(f->open_reply[k]);
            f->open_reply[k] = NULL;
        }
        if (c->held[k] > 0) c->held[k] -= 1;
        f->answered += 1;
        send_to(c, f->end_reply, f->end_reply_len);
        push_item(f, it);
        return;
    }
wait:
    p = new_pend(f, c->id, r.event, r.kind, r.scope_conn);
    it = p != NULL ? new_item(f, c->id, GCF_PENDING, t, line, n, NULL, 0) : NULL;
    if (it == NULL) {
        free(p);
        goto refuse;
    }
    c->waiting += 1;
    push_pend(f, p);
    push_item(f, it);
    return;
refuse:
    refuse(c);
}

/* Read what c has sent and handle each complete line (the buffer holds at most one line of
 * max_line bytes plus one: longer is refused, as the Python server refuses it). */
static void readable(struct gcf *f, struct conn *c) {
    size_t cap = f->max_line + 1;
    for (;;) {
        ssize_t got;
        char *nl;
        if (c->len < cap) {
            got = recv(c->fd, c->buf + c->len, cap - c->len, 0);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            pthread_mutex_lock(&f->lock);
            if (got <= 0) {
                if (c->len > 0) { /* out of memory: only the report's line on it is lost */
                    struct item *it = new_item(f, c->id, GCF_PARTIAL, now_s(), c->buf, c->len,
                                               NULL, 0);
                    if (it != NULL) push_item(f, it);
                }
                conn_closed(f, c, now_s());
                pthread_mutex_unlock(&f->lock);
                return;
            }
            pthread_mutex_unlock(&f->lock);
            c->len += (size_t)got;
        }
        pthread_mutex_lock(&f->lock);
        while ((nl = memchr(c->buf, '\n', c->len)) != NULL) {
            size_t n = (size_t)(nl - c->buf) + 1;
            if (n > f->max_line) break;
            request(f, c, c->buf, n, now_s());
            c->len -= n;
            memmove(c->buf, c->buf + n, c->len);
            if (c->dead) { /* dropped while answering */
                conn_closed(f, c, now_s());
                pthread_mutex_unlock(&f->lock);
                return;
            }
        }
        if (c->len >= cap || (nl != NULL)) { /* a line longer than the wire format allows */
            send_to(c, f->long_reply, f->long_reply_len);
            discard_input(c);
            conn_closed(f, c, now_s());
            pthread_mutex_unlock(&f->lock);
            return;
        }
        pthread_mutex_unlock(&f->lock);
    }
}

static void accept_all(struct gcf *f) {
    for (;;) {
        struct epoll_event ev;
        struct conn *c;
        int fd = accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            return; /* EAGAIN, or out of descriptors: the client's connect waits in the backlog */
        }
        c = calloc(1, sizeof *c);
        if (c != NULL) {
            c->buf = malloc(f->max_line + 1);
            c->bye = calloc(1, sizeof *c->bye);
            c->bye_wait = calloc(1, sizeof *c->bye_wait);
        }
        if (c == NULL || c->buf == NULL || c->bye == NULL || c->bye_wait == NULL) {
            if (c != NULL) { /* out of memory: the client sees its connection closed */
                free(c->buf);
                free(c->bye);
                free(c->bye_wait);
            }
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        pthread_mutex_lock(&f->lock);
        c->id = ++f->next_id;
        c->next = f->conns;
        f->conns = c;
        pthread_mutex_unlock(&f->lock);
        ev.events = EPOLLIN;
        ev.data.ptr = c;
        if (epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            pthread_mutex_lock(&f->lock);
            conn_closed(f, c, now_s());
            pthread_mutex_unlock(&f->lock);
        }
    }
}

static void *serve(void *arg) {
    struct gcf *f = arg;
    struct epoll_event evs[64];
    static char listen_tag, wake_tag;
    struct epoll_event ev;
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_tag;
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &ev);
    ev.data.ptr = &wake_tag;
    epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->wake_fd, &ev);
    for (;;) {
        int i, n = epoll_wait(f->epfd, evs, 64, -1);
        if (n < 0 && errno != EINTR) break;
        for (i = 0; i < n; ++i) {
            if (evs[i].data.ptr == &wake_tag) goto stop;
            if (evs[i].data.ptr == &listen_tag) accept_all(f);
            else readable(f, evs[i].data.ptr);
        }
    }
stop:
    pthread_mutex_lock(&f->lock);
    f->stopping = 1;
    while (f->conns != NULL) {
        struct conn *c = f->conns;
        if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
        conn_closed(f, c, now_s()); /* forgets c: the list shrinks */
    }
    f->running = 0;
    pthread_cond_broadcast(&f->ready);
    pthread_mutex_unlock(&f->lock);
    return NULL;
}

/* ------------------------------------------------------------------ the API (ctypes) */

/* Start the serving thread with the signals sent from outside blocked in it (SIGTERM,
 * SIGINT, ...): the kernel hands a process's signal to any thread that does not block it,
 * and the runtime's handlers (forward to the command, restore the node) run only when the
 * main thread wakes, so this thread must never be the one picked. A new thread inherits
 * the creating thread's mask: widen it for the pthread_create, then put it back (a signal
 * arriving meanwhile stays pending for the main thread). Faults (SIGSEGV, ...) stay open. */
static int start_quiet(pthread_t *thread, struct gcf *f) {
    static const int quiet[] = {SIGHUP,  SIGINT,  SIGQUIT,  SIGTERM, SIGUSR1, SIGUSR2,
                                SIGALRM, SIGCHLD, SIGWINCH, SIGXCPU, SIGCONT, SIGTSTP};
    sigset_t block, previous;
    size_t i;
    int rc;
    sigemptyset(&block);
    for (i = 0; i < sizeof quiet / sizeof quiet[0]; ++i) sigaddset(&block, quiet[i]);
    if (pthread_sigmask(SIG_BLOCK, &block, &previous) != 0) return -1;
    rc = pthread_create(thread, NULL, serve, f);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    return rc;
}

/* Start serving the listening socket `listen_fd` (which stays the caller's). `kinds`: the
 * wire format's phase kinds, comma-separated; `end_reply`: the answer to an accepted end;
 * `long_reply`: the answer to a line over `max_line` bytes; `fast`: answer what can be
 * answered here (0: every line waits for the runtime). NULL (errno set) on failure. */
struct gcf *gcf_start(int listen_fd, size_t max_line, const char *kinds, const char *end_reply,
                      const char *long_reply, int fast) {
    struct gcf *f = calloc(1, sizeof *f);
    pthread_condattr_t attr;
    const char *p = kinds;
    if (f == NULL) return NULL;
    while (*p && f->nkinds < GC_NKINDS) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof f->kinds[0]) break;
        memcpy(f->kinds[f->nkinds++], p, n);
        p += n + (p[n] == ',');
    }
    f->listen_fd = listen_fd;
    f->fast = fast;
    /* accept4 is called until EAGAIN: the listening socket must not block (Python never
     * accepts on it while this front serves it) */
    if (fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK) != 0) {
        free(f);
        return NULL;
    }
    f->max_line = max_line;
    f->end_reply_len = strlen(end_reply);
    f->end_reply = copy(end_reply, f->end_reply_len);
    f->long_reply_len = strlen(long_reply);
    f->long_reply = copy(long_reply, f->long_reply_len);
    f->epfd = epoll_create1(EPOLL_CLOEXEC);
    f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&f->lock, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->ready, &attr);
    pthread_condattr_destroy(&attr);
    f->running = 1;
    if (f->end_reply == NULL || f->long_reply == NULL || f->epfd < 0 || f->wake_fd < 0 ||
        start_quiet(&f->thread, f) != 0) {
        int saved = errno;
        if (f->epfd >= 0) close(f->epfd);
        if (f->wake_fd >= 0) close(f->wake_fd);
        free(f->end_reply);
        free(f->long_reply);
        free(f);
        errno = saved ? saved : ENOMEM;
        return NULL;
    }
    return f;
}

/* The next event, waiting up to timeout_ms: 1 (ev and buf filled: the line, then the answer
 * sent), 0 (nothing yet), -1 (stopped and drained), -2 (buf smaller than the event). */
int gcf_next(struct gcf *f, struct gcf_event *ev, char *buf, size_t cap, int timeout_ms) {
    struct timespec until;
    struct item *it;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->lock);
    while (f->qhead == NULL && f->running)
        if (pthread_cond_timedwait(&f->ready, &f->lock, &until) == ETIMEDOUT) break;
    it = f->qhead;
    if (it == NULL) {
        int stopped = !f->running;
        pthread_mutex_unlock(&f->lock);
        return stopped ? -1 : 0;
    }
    if (it->ev.line_len + it->ev.sent_len > cap) {
        pthread_mutex_unlock(&f->lock);
        return -2;
    }
    f->qhead = it->next;
    if (f->qhead == NULL) f->qtail = NULL;
    f->backlog -= 1;
    pthread_mutex_unlock(&f->lock);
    *ev = it->ev;
    if (it->ev.line_len + it->ev.sent_len) /* a close has no bytes (and no buffer) */
        memcpy(buf, it->bytes, it->ev.line_len + it->ev.sent_len);
    free(it->bytes);
    free(it);
    return 1;
}

/* The runtime's answer to the oldest waiting request (or closed connection), which must be
 * `conn`'s. `ok`: the request was accepted. `open`: the runtime's count of open phases per
 * kind after it, which this front adopts (the runtime is the truth; all later lines wait).
 * 0, or -1 when `conn` is not the oldest waiting one (the caller's bug: nothing done). */
int gcf_reply(struct gcf *f, uint64_t conn, const char *data, size_t n, int ok,
              const int32_t *open) {
    struct pend *p;
    struct conn *c;
    int k;
    pthread_mutex_lock(&f->lock);
    p = f->phead;
    if (p == NULL || p->conn != conn) {
        pthread_mutex_unlock(&f->lock);
        return -1;
    }
    f->phead = p->next;
    if (f->phead == NULL) f->ptail = NULL;
    f->pending -= 1;
    c = find_conn(f, conn);
    if (c != NULL && p->event != EV_CLOSE && c->waiting > 0) c->waiting -= 1;
    if (c != NULL && ok && p->kind >= 0) {
        if (p->event == EV_BEGIN && p->scope_conn) c->held[p->kind] += 1;
        if (p->event == EV_END && c->held[p->kind] > 0) c->held[p->kind] -= 1;
    }
    for (k = 0; k < f->nkinds; ++k) {
        int was = f->open[k];
        f->open[k] = open[k] > 0 ? open[k] : 0;
        if (f->open[k] == 0 || (was == 0 && !(p->event == EV_BEGIN && p->kind == k && ok))) {
            free(f->open_reply[k]); /* no answer known for a phase opened elsewhere */
            f->open_reply[k] = NULL;
        }
    }
    if (ok && p->event == EV_BEGIN && p->kind >= 0 && f->open[p->kind] > 0 &&
        f->open_reply[p->kind] == NULL) {
        f->open_reply[p->kind] = copy(data, n);
        f->open_reply_len[p->kind] = n;
    }
    if (c != NULL) {
        if (p->event == EV_CLOSE) {
            if (c->fd >= 0) close(c->fd); /* no longer polled: the serving thread is done */
            c->fd = -1;
            forget_conn(f, c); /* its phases: the runtime ended them, `open` says so */
        } else if (n > 0) {
            send_to(c, data, n);
        }
    }
    pthread_mutex_unlock(&f->lock);
    free(p);
    return 0;
}

/* Answer `line` with `reply` from now on, while no phase of its kind is open. */
int gcf_cache_put(struct gcf *f, const char *line, size_t n, const char *reply, size_t rn) {
    struct entry *e;
    pthread_mutex_lock(&f->lock);
    e = cache_find(f, line, n);
    if (e == NULL) {
        if (f->cache_n >= GCF_CACHE_MAX) cache_clear_locked(f);
        e = calloc(1, sizeof *e);
        if (e == NULL || (e->line = copy(line, n)) == NULL) {
            free(e);
            pthread_mutex_unlock(&f->lock);
            return -1;
        }
        e->line_len = n;
        e->next = f->cache[hash(line, n)];
        f->cache[hash(line, n)] = e;
        f->cache_n += 1;
    } else {
        free(e->reply);
    }
    e->reply = copy(reply, rn);
    e->reply_len = e->reply ? rn : 0;
    pthread_mutex_unlock(&f->lock);
    return e->reply ? 0 : -1;
}

/* Test-only: the `nth` allocation for a line from now (1: the next; each line needs its
 * queued event, and its wait for the runtime when it waits) fails as when memory is exhausted
 * (tests/runtime/test_front_no_memory.py); 0: none. */
void gcf_fail_alloc(struct gcf *f, int nth) {
    pthread_mutex_lock(&f->lock);
    f->fail_alloc_in = nth;
    pthread_mutex_unlock(&f->lock);
}

/* Forget every cached answer (the runtime's decisions changed). */
void gcf_cache_clear(struct gcf *f) {
    pthread_mutex_lock(&f->lock);
    cache_clear_locked(f);
    pthread_mutex_unlock(&f->lock);
}

/* Requests answered here, requests that waited for the runtime, and events queued, so far. */
void gcf_counts(struct gcf *f, uint64_t *answered, uint64_t *waited, uint64_t *queued) {
    pthread_mutex_lock(&f->lock);
    *answered = f->answered;
    *waited = f->waited;
    *queued = f->queued;
    pthread_mutex_unlock(&f->lock);
}

/* Stop accepting and reading; every connection is closed (events for them still queue).
 * Returns when the serving thread has ended. */
void gcf_stop(struct gcf *f) {
    uint64_t one = 1;
    if (write(f->wake_fd, &one, sizeof one) < 0) { /* the eventfd cannot be full: ignore */
    }
    pthread_join(f->thread, NULL);
}

/* Free everything (after gcf_stop, once the queue is drained or abandoned). */
void gcf_free(struct gcf *f) {
    int k;
    while (f->qhead != NULL) {
        struct item *it = f->qhead;
        f->qhead = it->next;
        free(it->bytes);
        free(it);
    }
    while (f->phead != NULL) {
        struct pend *p = f->phead;
        f->phead = p->next;
        free(p);
    }
    cache_clear_locked(f);
    for (k = 0; k < GC_NKINDS; ++k) free(f->open_reply[k]);
    close(f->epfd);
    close(f->wake_fd);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->ready);
    free(f->end_reply);
    free(f->long_reply);
    free(f);
}
