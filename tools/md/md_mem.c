/*
 * md_mem.c - preallocated, pre-faulted regions for the market-data core
 * (see md_mem.h).  Set-up only.
 */
#include "tools/md/md_mem.h"

#include "tools/md/md_error.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_up(size_t n, size_t align)
{
	return (n + align - 1) / align * align;
}

int tb_md_mem_alloc(tb_md_mem_t *m, size_t size)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int flags = MAP_PRIVATE | MAP_ANONYMOUS;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len, off;
	volatile uint8_t *p;
	void *a;

	memset(m, 0, sizeof(*m));
	if (size == 0 || size > SIZE_MAX / 2)
		return tb_md_error_set(TB_EINVAL, "mem: bad size %zu", size);
	len = round_up(size, HUGE_PAGE);
	a = mmap(NULL, len, prot, flags | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
	if (a == MAP_FAILED) {
		len = round_up(size, page);
		a = mmap(NULL, len, prot, flags, -1, 0);
		if (a == MAP_FAILED)
			return tb_md_error_sys(errno, "mem: mmap %zu bytes", len);
		/* A hint, before the first touch: fewer TLB misses when the
		 * kernel has huge pages to give. */
		if (len >= HUGE_PAGE)
			(void)madvise(a, len, MADV_HUGEPAGE);
	}
	(void)mlock(a, len);
	/* Written, not read: a read would only map the shared zero page. */
	p = a;
	for (off = 0; off < len; off += page)
		p[off] = 0;
	m->addr = a;
	m->size = len;
	return 0;
}

void tb_md_mem_free(tb_md_mem_t *m)
{
	if (m->addr)
		munmap(m->addr, m->size);
	memset(m, 0, sizeof(*m));
}
