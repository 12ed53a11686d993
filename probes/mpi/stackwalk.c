/*
 * Stack walks from a PMPI wrapper's frame (stackwalk.h says what and why).
 * Called from the tick handler: nothing here allocates or locks; the module
 * map is written once by stackwalk_init, before any walk, and only read after.
 */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include "stackwalk.h"

#include <elf.h>
#include <libunwind.h>
#include <link.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* Code segments of the loaded modules, sorted: a frame-pointer walk accepts a
 * return address only inside one, so a register that was never a frame
 * pointer ends the walk instead of yielding garbage frames. Open MPI alone
 * loads some fifty components, so the lookup is a binary search. */

#define MAX_TEXT 1024
static struct text {
    uintptr_t lo, hi;
} text[MAX_TEXT];
static int ntext;

static int add_text(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size, (void)arg;
    for (int i = 0; i < info->dlpi_phnum && ntext < MAX_TEXT; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            text[ntext].lo = info->dlpi_addr + ph->p_vaddr;
            text[ntext].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
            ntext++;
        }
    }
    return 0;
}

static int by_start(const void *a, const void *b) {
    uintptr_t x = ((const struct text *)a)->lo, y = ((const struct text *)b)->lo;
    return x < y ? -1 : x > y;
}

/* Whether pc is in a code segment; *last is the segment of the frame before
 * (most of a stack's frames are in the program's own code), -1 at first. */
static int in_text(uintptr_t pc, int *last) {
    if (*last >= 0 && pc >= text[*last].lo && pc < text[*last].hi) return 1;
    int lo = 0, hi = ntext; /* the segment holding pc, if any, is in [lo, hi) */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (pc < text[mid].lo) {
            hi = mid;
        } else if (pc >= text[mid].hi) {
            lo = mid + 1;
        } else {
            *last = mid;
            return 1;
        }
    }
    return 0;
}

void stackwalk_init(void) {
    ntext = 0;
    dl_iterate_phdr(add_text, NULL);
    qsort(text, (size_t)ntext, sizeof text[0], by_start);
    /* Per-thread caches: libunwind's walks on different threads share no lock. */
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

void stackwalk_thread_start(void) {
    void *buf[2];
    unw_backtrace(buf, 2);
}

/* ------------------------------------------------------------------------ */
/* Frame pointers. Each frame record is {saved frame pointer, return address}. */

int stackwalk_fp(uintptr_t frame, uintptr_t stack_lo, uintptr_t stack_hi, uint64_t *out, int max,
                 int *truncated) {
    int n = 0, segment = -1;
    uintptr_t fp = frame, prev = 0;
    *truncated = 0;
    if (fp < stack_lo || fp + 16 > stack_hi) return 0;
    fp = ((const uintptr_t *)fp)[0]; /* the program's frame that called MPI */
    while (fp > prev && !(fp & 7) && fp >= stack_lo && fp + 16 <= stack_hi) {
        uintptr_t ret = ((const uintptr_t *)fp)[1];
        if (!in_text(ret, &segment)) break;
        if (n == max) {
            *truncated = 1;
            break;
        }
        out[n++] = ret;
        prev = fp;
        fp = ((const uintptr_t *)fp)[0];
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* libunwind. */

int stackwalk_after_site(uint64_t site, void *const *buf, int n, int cap, uint64_t *out, int max,
                         int *truncated) {
    *truncated = 0;
    for (int i = 0; i < n; i++) {
        if ((uint64_t)(uintptr_t)buf[i] != site) continue;
        int k = 0;
        for (int j = i + 1; j < n && k < max; j++) out[k++] = (uint64_t)(uintptr_t)buf[j];
        *truncated = n == cap || n - (i + 1) > max;
        return k;
    }
    return -1;
}

#if defined(__x86_64__)
/*
 * backtrace_from(frame, buf, size) is unw_backtrace(buf, size) called from a
 * frame whose unwind info (CFI) reads: CFA = %rbp + 16, return address at
 * CFA - 8, caller's %rbp at CFA - 16, with %rbp set to the wrapper's frame
 * record. To libunwind, its caller is therefore the wrapper's caller, at the
 * call site, with the stack and frame pointers the program had when it called
 * MPI; the walk goes from unw_backtrace straight into the program, past the
 * MPI library's frames and the signal frame. Those change from tick to tick
 * (the interrupted instruction in a progress loop), so each new one cost
 * libunwind a cache miss and a parse of .eh_frame; the program's return
 * addresses repeat and stay cached. The function itself saves and restores
 * %rbp normally; the CFI matters only to an unwinder that starts inside
 * unw_backtrace. The backtrace holds this function's return address, then
 * the call site, then the program's frames.
 */
int backtrace_from(uintptr_t frame, void **buf, int size);
__asm__("  .pushsection .text\n"
        "  .globl backtrace_from\n"
        "  .hidden backtrace_from\n"
        "  .type backtrace_from, @function\n"
        "backtrace_from:\n"
        "  .cfi_startproc\n"
        "  pushq %rbp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbp, -16\n"
        "  movq %rdi, %rbp\n"
        "  .cfi_def_cfa %rbp, 16\n"
        "  movq %rsi, %rdi\n"
        "  movl %edx, %esi\n"
        "  call unw_backtrace@PLT\n"
        "  popq %rbp\n"
        "  .cfi_def_cfa %rsp, 8\n"
        "  .cfi_restore %rbp\n"
        "  ret\n"
        "  .cfi_endproc\n"
        "  .size backtrace_from, .-backtrace_from\n"
        "  .popsection\n");
#define BEFORE_SITE 1 /* backtrace_from's own return address */
#else
/* Elsewhere the walk starts where it is called: in the tick handler, through
 * the signal frame and the MPI library, whose frames are then cut off. */
static int backtrace_from(uintptr_t frame, void **buf, int size) {
    (void)frame;
    return unw_backtrace(buf, size);
}
#define BEFORE_SITE 64
#endif

int stackwalk_libunwind(uintptr_t frame, uint64_t site, uint64_t *out, int max, int *truncated) {
    void *buf[BEFORE_SITE + 1 + STACKWALK_MAX + 1];
    int cap = BEFORE_SITE + 1 + max + 1; /* one more than needed tells whether max cut it */
    if (cap > (int)(sizeof buf / sizeof buf[0])) cap = (int)(sizeof buf / sizeof buf[0]);
    return stackwalk_after_site(site, buf, backtrace_from(frame, buf, cap), cap, out, max, truncated);
}
