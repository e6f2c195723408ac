/*
 * Memory regions.  Registering publishes an entry in the fabric's MR table:
 * owner pid, address, length, iova and access flags, found from the key
 * alone (key = slot << 8 | generation byte, lkey == rkey, as on mlx NICs).
 * Requesters check lkeys and rkeys against this table before moving a byte,
 * so protection errors are reported the way a NIC reports them.
 *
 * Nothing is pinned: the memory stays where the owner put it and peers reach
 * it with process_vm_writev().  Registration does check that the whole range
 * is mapped (as pinning would), and fails with EFAULT otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define SR_MR_ACCESS_OK                                                    \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |               \
	 IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

static int range_mapped(const void *addr, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(pg - 1);
	uintptr_t end = (uintptr_t)addr + len;
	unsigned char vec[256];
	while (start < end) {
		size_t n = (end - start + (size_t)pg - 1) / (size_t)pg;
		if (n > sizeof vec)
			n = sizeof vec;
		if (mincore((void *)start, n * (size_t)pg, vec) < 0)
			return 0; /* ENOMEM: part of the range is unmapped */
		start += n * (size_t)pg;
	}
	return 1;
}

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr,
					  size_t length, uint64_t iova,
					  unsigned int access)
{
	SR_FAULT_RET("ibv_reg_mr", NULL);
	struct sr_pd *p = (struct sr_pd *)pd;
	struct sr_fabric *f = sr_ctx(pd->context)->fab;
	access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE | IBV_ACCESS_RELAXED_ORDERING;
	if (length == 0 || (access & ~(unsigned)SR_MR_ACCESS_OK)) {
		errno = EINVAL;
		return NULL;
	}
	/* Remote write or atomic access needs local write (IB spec 10.6.3.1). */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	if (!addr || !range_mapped(addr, length)) {
		errno = EFAULT;
		return NULL;
	}
	struct sr_mr *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t slot;
	if (sr_fabric_alloc_slot(f, SR_SLOT_MR, &slot) < 0) {
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	struct sr_mr_shm *s = sr_fabric_mr(f, slot);
	s->gen = s->gen % 255 + 1; /* 1..255: a key is never 0 */
	s->pd_id = p->id;
	s->pid = f->pid;
	s->access = access;
	s->addr = (uintptr_t)addr;
	s->length = length;
	s->iova = iova;
	uint32_t key = slot << 8 | s->gen;
	atomic_store_explicit(&s->key, key, memory_order_release);

	m->slot = slot;
	m->access = access;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = key;
	m->mr.lkey = key;
	m->mr.rkey = key;
	atomic_fetch_add(&p->refs, 1);
	return &m->mr;
}

SR_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr,
				    size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr,
				(unsigned)access);
}
SR_DEFAULT_V11(ibv_reg_mr);

SR_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr,
					 size_t length, uint64_t iova,
					 int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

SR_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	SR_FAULT_RET("ibv_dereg_mr", errno);
	struct sr_mr *m = (struct sr_mr *)mr;
	struct sr_fabric *f = sr_ctx(mr->context)->fab;
	sr_fabric_free_slot(f, SR_SLOT_MR, m->slot);
	atomic_fetch_sub(&((struct sr_pd *)mr->pd)->refs, 1);
	free(m);
	return 0;
}
SR_DEFAULT_V11(ibv_dereg_mr);

SR_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			   void *addr, size_t length, int access)
{
	(void)mr; (void)flags; (void)pd; (void)addr; (void)length; (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

SR_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
					   size_t length, uint64_t iova, int fd,
					   int access)
{
	(void)pd; (void)offset; (void)length; (void)iova; (void)fd; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
