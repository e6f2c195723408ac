/*
 * md_mem.h - the market-data core's preallocated memory: one region per
 * book or feed, taken once at set-up, so that the per-message paths never
 * allocate and never take a page fault.
 *
 * A region is private, zeroed, page-aligned memory: 2 MiB hugetlb pages
 * where the administrator reserved some (vm.nr_hugepages), else 4 KiB pages
 * with transparent huge pages requested (madvise) for regions of 2 MiB and
 * more; locked in memory where the process may (mlock; a failure leaves it
 * unlocked, which costs latency, not correctness); every page written once
 * before tb_md_mem_alloc() returns.  That first touch happens on the
 * calling thread, so the pages come from its NUMA node: allocate from the
 * thread that will use the memory, after pinning it.
 *
 * Threads: set-up calls, any thread.
 */
#ifndef TB_MD_MEM_H
#define TB_MD_MEM_H

#include <stddef.h>

typedef struct tb_md_mem {
	void *addr;  /* page-aligned */
	size_t size; /* the request rounded up to the page size */
} tb_md_mem_t;

/* Maps `size` bytes as above into `m`.  Returns 0, or TB_EINVAL (size 0 or
 * absurd) / TB_ENOMEM / TB_ESYS with a message (tb_md_error_msg()). */
int tb_md_mem_alloc(tb_md_mem_t *m, size_t size);

/* Unmaps and zeroes `m`; safe on a zeroed or already freed region. */
void tb_md_mem_free(tb_md_mem_t *m);

#endif
