/*
 * greenckpt.h - the phase API of greenckpt's energy-aware runtime, for C, C++ and Fortran
 * (through the module in greenckpt_mod.f90).
 *
 * Why: the runtime (`greenckpt run`) can set the CPU frequency and I/O parallelism for exactly
 * the span of a checkpoint or restart only if it is told when that span starts and ends. This
 * API tells it, over the runtime's notification socket (GREENCKPT_RUNTIME_SOCKET, wire format in
 * docs/design/levels-and-config.md). Without a runtime every call is a cheap no-op, so a program
 * built with it behaves exactly as before when it runs without greenckpt.
 *
 * Rules (docs/native.md has the whole contract):
 *  - every call returns a status (GREENCKPT_OK, GREENCKPT_NO_RUNTIME, or a negative error);
 *    an error also prints one line on stderr and never aborts the program;
 *  - phases nest per thread: an end must name the innermost phase this thread began, and one
 *    thread cannot have two phases of the same kind open;
 *  - thread-safe; a forked child gets GREENCKPT_EFORK (the parent's connection is not its own);
 *  - every rank may call it: the runtime merges a node's overlapping phases of one kind into
 *    one and adds their bytes. greenckpt_mpi.h has collective helpers in which only node
 *    leaders speak, with their node's bytes, as greenckpt's Python library does.
 *
 * Build: mpicc $(greenckpt config --cflags --libs) app.c    (or pkg-config greenckpt)
 */
#ifndef GREENCKPT_H
#define GREENCKPT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GREENCKPT_API_VERSION 1      /* this header's version of the API */
#define GREENCKPT_PROTOCOL_VERSION 1 /* the wire format it speaks */

/* Kinds of phase (the runtime's vocabulary). The runtime chooses settings for the I/O kinds
 * (checkpoint, restart, flush); it only accounts rework and compute. */
#define GREENCKPT_CHECKPOINT 0
#define GREENCKPT_RESTART 1
#define GREENCKPT_FLUSH 2
#define GREENCKPT_REWORK 3
#define GREENCKPT_COMPUTE 4

/* No checkpoint level (levels are 1..4 built in: node-local, partner copy, erasure code,
 * global file system; a restart's level is that of the checkpoint it reads back). */
#define GREENCKPT_NO_LEVEL 0
/* The highest level a begin may name: the built-in levels are what a runtime knows (a level
 * registered with greenckpt.ckpt.register_level exists only in the Python process that
 * registered it). greenckpt_begin refuses any other level itself, with or without a runtime. */
#define GREENCKPT_MAX_LEVEL 4

/* `bytes` of an I/O phase that the process cannot know when it begins (a library that learns
 * its files only afterwards, or reads back data it has not found yet): the runtime plans the
 * phase as 1 byte and its report says "unknown" instead of presenting a made-up number. */
#define GREENCKPT_UNKNOWN_BYTES (-1)

/* Statuses. */
#define GREENCKPT_OK 0         /* the runtime was told (and answered) */
#define GREENCKPT_NO_RUNTIME 1 /* accepted, nothing sent: no runtime listens (not an error) */
#define GREENCKPT_EINVAL (-1)  /* bad argument: unknown kind, NULL path, negative size ... */
#define GREENCKPT_ESTATE (-2)  /* end without begin, wrong nesting, a kind begun twice */
#define GREENCKPT_EFORK (-3)   /* called from a forked child of the process that started */
#define GREENCKPT_ERUNTIME (-4) /* the runtime refused the request or the connection broke */

/* A phase of `kind` starts in this thread. `level`: the checkpoint level or
 * GREENCKPT_NO_LEVEL; `path`: the checkpoint file or directory (the runtime finds the storage
 * device from it; required for checkpoint, restart and flush, may be NULL otherwise);
 * `bytes`: what this process writes or reads in the phase, before compression (>= 1 for the
 * I/O kinds, or GREENCKPT_UNKNOWN_BYTES; >= 0 otherwise). `io_processes` (may be NULL) receives the number of processes
 * of this node the runtime advises to write or read at once, or 0 for no advice. */
int greenckpt_begin(int kind, int level, const char *path, int64_t bytes, int *io_processes);

/* The innermost phase this thread began, of `kind`, is over; `ok` is 0 when it failed. */
int greenckpt_end(int kind, int ok);

/* The advice received when the open phase of `kind` began in this process (any thread):
 * the number of processes that should write or read at once, or 0 (none open, no advice). */
int greenckpt_io_processes(int kind);

/* 1 when a runtime listens (the first call connects), 0 when every call is a no-op. */
int greenckpt_attached(void);

/* This process's node index in the job (>= 0; default: GREENCKPT_NODE from the environment,
 * else 0), sent with every announcement so the runtime accounts per node. When
 * GREENCKPT_RUNTIME_SOCKET contains "{node}" (emulated nodes on one host, each with its own
 * agent), the index also picks the socket: call this before the first phase. */
int greenckpt_set_node(int node);

/* A constant text for a status; and this thread's last error message ("" if none). */
const char *greenckpt_strerror(int status);
const char *greenckpt_last_error(void);

/* The wire name of a kind ("checkpoint", ...), or NULL for an unknown kind. */
const char *greenckpt_kind_name(int kind);

#ifdef __cplusplus
}
#endif

#endif /* GREENCKPT_H */
