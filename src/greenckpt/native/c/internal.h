/*
 * internal.h - constants libgreenckpt, libgreenckpt_front and libgreenckpt_intercept share
 * (internal: not installed for users, whose header is include/greenckpt.h).
 *
 * Why one header: the number of phase kinds was spelled in each library, and a kind added to
 * one and not the others would have broken only at run time. tests/native/
 * test_shared_definitions.py checks that each constant here is defined nowhere else and that
 * the kinds are Python's (greenckpt.phases.WIRE_KINDS).
 */
#ifndef GREENCKPT_INTERNAL_H
#define GREENCKPT_INTERNAL_H

/* The wire format's phase kinds: their number and names, in the order of the public
 * GREENCKPT_CHECKPOINT (0) .. GREENCKPT_COMPUTE (4) and of greenckpt.phases.WIRE_KINDS. */
#define GC_NKINDS 5
#define GC_KIND_NAMES {"checkpoint", "restart", "flush", "rework", "compute"}

#endif /* GREENCKPT_INTERNAL_H */
