/*
 * greenckpt_mpi.h - collective phase announcements for MPI codes (header only).
 *
 * Why: the runtime decides a node's settings from the bytes the *node* moves, and a node's
 * ranks should be told once. With these helpers every rank calls the same function at the same
 * point (they are collective over the communicator given to greenckpt_mpi_init); the node's
 * lowest rank announces with the sum of its ranks' bytes, and rank 0's advice is given to
 * every rank so that all nodes write in the same waves - the rules of greenckpt's Python
 * library. Header only, so libgreenckpt itself needs no MPI; all state is in the caller's
 * greenckpt_mpi value.
 *
 *     greenckpt_mpi g;
 *     greenckpt_mpi_init(&g, MPI_COMM_WORLD, 0);       // 0: nodes are hosts
 *     greenckpt_mpi_begin(&g, GREENCKPT_CHECKPOINT, 1, dir, my_bytes, &io);
 *     ... write, at most io ranks of a node at once ...
 *     greenckpt_mpi_end(&g, GREENCKPT_CHECKPOINT, ok);
 *     greenckpt_mpi_free(&g);
 */
#ifndef GREENCKPT_MPI_H
#define GREENCKPT_MPI_H

#include <mpi.h>
#include <stdio.h>

#include "greenckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct greenckpt_mpi {
    MPI_Comm comm;      /* a duplicate of the job's communicator */
    MPI_Comm node_comm; /* the ranks of this node */
    int node;           /* this node's index in the job (0 .. nodes-1) */
    int leader;         /* 1 on the node's lowest rank, which announces */
    int begun[5];       /* per kind: the leader's begin opened a phase (so its end is due) */
} greenckpt_mpi;

/* Collective. ranks_per_node > 0 emulates nodes of that many consecutive ranks (tests, one
 * host); 0 groups the ranks that share memory (a host). Sets the node index sent with every
 * announcement (greenckpt_set_node). Returns GREENCKPT_OK or GREENCKPT_EINVAL. */
static inline int greenckpt_mpi_init(greenckpt_mpi *g, MPI_Comm comm, int ranks_per_node) {
    int rank, first = 0, is_first;
    if (g == NULL || ranks_per_node < 0) return GREENCKPT_EINVAL;
    for (rank = 0; rank < 5; ++rank) g->begun[rank] = 0;
    MPI_Comm_dup(comm, &g->comm);
    MPI_Comm_rank(g->comm, &rank);
    if (ranks_per_node > 0)
        MPI_Comm_split(g->comm, rank / ranks_per_node, rank, &g->node_comm);
    else
        MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &g->node_comm);
    {
        int node_rank;
        MPI_Comm_rank(g->node_comm, &node_rank);
        g->leader = node_rank == 0;
    }
    /* A node's index: how many node leaders have a lower rank (leaders number the nodes in
     * the order of their lowest ranks, as the Python library's topology does). */
    is_first = g->leader;
    MPI_Exscan(&is_first, &first, 1, MPI_INT, MPI_SUM, g->comm);
    if (rank == 0) first = 0; /* MPI_Exscan leaves rank 0's result undefined */
    g->node = first;
    MPI_Bcast(&g->node, 1, MPI_INT, 0, g->node_comm);
    return greenckpt_set_node(g->node);
}

/* Collective. A phase of `kind` starts: node leaders announce with their node's bytes (the
 * sum of every rank's `bytes`); every rank gets rank 0's advice in *io_processes (0: none)
 * and its node leader's status. */
static inline int greenckpt_mpi_begin(greenckpt_mpi *g, int kind, int level, const char *path,
                                      int64_t bytes, int *io_processes) {
    long long mine[2], node[2] = {0, 0};
    int out[2] = {GREENCKPT_OK, 0}; /* status, advice */
    mine[0] = bytes > 0 ? (long long)bytes : 0;
    mine[1] = bytes < 0; /* any negative size makes the node's begin invalid */
    MPI_Reduce(mine, node, 2, MPI_LONG_LONG, MPI_SUM, 0, g->node_comm);
    if (g->leader && node[1] > 0) {
        const char *name = greenckpt_kind_name(kind);
        fprintf(stderr,
                "greenckpt: greenckpt_mpi_begin(%s): %lld rank(s) of node %d gave a negative "
                "size; give each rank's bytes (>= 0)\n",
                name ? name : "?", node[1], g->node);
        out[0] = GREENCKPT_EINVAL;
    } else if (g->leader) {
        out[0] = greenckpt_begin(kind, level, path, (int64_t)node[0], &out[1]);
        /* a begin that opened the phase in this thread (even one the runtime refused) */
        if (kind >= 0 && kind < 5) g->begun[kind] = out[0] >= 0 || out[0] == GREENCKPT_ERUNTIME;
    }
    MPI_Bcast(&out[1], 1, MPI_INT, 0, g->comm);    /* rank 0's advice, for every rank */
    MPI_Bcast(&out[0], 1, MPI_INT, 0, g->node_comm); /* the node leader's status */
    if (io_processes != NULL) *io_processes = out[1];
    return out[0];
}

/* Collective. The phase of `kind` is over; it failed on the node if `ok` is 0 on any of its
 * ranks. Returns the node leader's status (GREENCKPT_ESTATE, silently, when its begin was
 * refused: that begin already said why). */
static inline int greenckpt_mpi_end(greenckpt_mpi *g, int kind, int ok) {
    int mine = ok != 0, all = 1, status = GREENCKPT_OK;
    MPI_Reduce(&mine, &all, 1, MPI_INT, MPI_LAND, 0, g->node_comm);
    if (g->leader && kind >= 0 && kind < 5 && !g->begun[kind])
        status = GREENCKPT_ESTATE;
    else if (g->leader) {
        status = greenckpt_end(kind, all);
        if (kind >= 0 && kind < 5) g->begun[kind] = 0;
    }
    MPI_Bcast(&status, 1, MPI_INT, 0, g->node_comm);
    return status;
}

/* Collective. Frees the communicators made by greenckpt_mpi_init. */
static inline void greenckpt_mpi_free(greenckpt_mpi *g) {
    MPI_Comm_free(&g->node_comm);
    MPI_Comm_free(&g->comm);
}

#ifdef __cplusplus
}
#endif

#endif /* GREENCKPT_MPI_H */
