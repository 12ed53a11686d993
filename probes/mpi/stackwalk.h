/*
 * The program's call stack at an MPI call, walked outward from the PMPI
 * wrapper's own frame: the frames of the MPI library below the wrapper (and
 * the signal frame below them, when the walk runs in the tick handler) are
 * never walked, because the profile cuts them off anyway. Two unwinders:
 *
 *   wrapper's frame record ──► frame pointers: saved %rbp chain, a few loads
 *   (the probe keeps frame    per frame, each return address checked against
 *    pointers)                 the loaded modules' code
 *                         └──► libunwind: unw_backtrace entered through a
 *                              frame whose unwind info says "my caller is the
 *                              wrapper's caller", so its fast trace (a cache
 *                              of each return address's frame layout) covers
 *                              the program's frames only
 *
 * Limits: at most STACKWALK_MAX return addresses; the frame-pointer walk
 * stops at the first frame without a record and at a return address outside
 * the code mapped when stackwalk_init ran (a module dlopen'ed later); the
 * entry into libunwind from the wrapper's frame is x86-64 code, elsewhere
 * libunwind walks from where it is called and the frames before the call
 * site are cut off (stackwalk_after_site).
 *
 * Used by the probe's tick handler (sonde_mpi_probe.c) and by the walk
 * microbenchmark (tests/mpi/walkcost.c). The walks are async-signal-safe: no
 * allocation, no locks of ours; probes/mpi/README.md ("Call stacks") says
 * what libunwind itself may do on a cache miss.
 */
#ifndef SONDE_STACKWALK_H
#define SONDE_STACKWALK_H

#include <stdint.h>

/* Taken inside a wrapper (compiled with frame pointers, never inlined): the
 * return address into the program (the MPI call's site) and the wrapper's
 * frame record {caller's frame pointer, that return address}. */
#define STACKWALK_CALL_SITE() ((uint64_t)(uintptr_t)__builtin_return_address(0))
#define STACKWALK_FRAME() ((uintptr_t)__builtin_frame_address(0))

#define STACKWALK_MAX 128 /* return addresses a walk gives at most */

/* Notes the code segments of every module loaded now (the frame-pointer walk
 * accepts a return address only inside one) and gives libunwind per-thread
 * caches. Once, before the first walk (MPI_Init: its components are loaded). */
void stackwalk_init(void);

/* libunwind makes a thread's trace cache (an mmap) at its first walk: this
 * makes it now, outside the signal handler. Once per sampled thread. */
void stackwalk_thread_start(void);

/* Frame pointers: the return addresses of the frames above the wrapper's
 * caller (the one after the call site first), at most `max`, following saved
 * frame pointers that stay inside [stack_lo, stack_hi) and rise (max <=
 * STACKWALK_MAX, also below). Stops at the
 * first frame without a valid record; *truncated when `max` cut it. */
int stackwalk_fp(uintptr_t frame, uintptr_t stack_lo, uintptr_t stack_hi, uint64_t *out, int max,
                 int *truncated);

/* libunwind, from the wrapper's frame: the same return addresses, whether or
 * not the program keeps frame pointers (it reads .eh_frame). -1 when the walk
 * did not get past the call site (no unwind info there). */
int stackwalk_libunwind(uintptr_t frame, uint64_t site, uint64_t *out, int max, int *truncated);

/* The part of a raw backtrace `buf[0..n)` (taken with room for `cap`) after
 * the call site: what the profile keeps. -1 when `site` is not in it. */
int stackwalk_after_site(uint64_t site, void *const *buf, int n, int cap, uint64_t *out, int max,
                         int *truncated);

#endif
