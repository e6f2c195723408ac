/*
 * Memory regions, memory windows, keys, and the pinned-memory budget.
 *
 * Registering publishes an entry in the fabric's key table: owner pid,
 * address, length, iova and access flags, found from the key alone (key =
 * slot << 8 | key byte, lkey == rkey, as on mlx NICs).  Requesters check
 * lkeys and rkeys against this table (sr_mr_translate) before moving a
 * byte, so protection errors are reported the way a NIC reports them.
 *
 * Memory windows share the table.  A type 1 window belongs to a PD and is
 * bound by ibv_bind_mw, which posts a bind on a QP and gives the window a
 * new rkey (the key byte incremented); any QP of the PD can then reach the
 * bound range through it.  A type 2 window is bound by an IBV_WR_BIND_MW
 * work request with an rkey the consumer chose (ibv_inc_rkey) and is
 * reachable only through the QP that bound it, until IBV_WR_LOCAL_INV
 * invalidates it; binding it again while bound is an error.  A bind needs
 * an MR registered with IBV_ACCESS_MW_BIND, a range inside it, and local
 * write on the MR for remote write through the window; a window's key is
 * never a valid lkey.  A window whose MR is deregistered reaches nothing;
 * ibv_dereg_mr refuses (EBUSY) while a window is bound to the MR.
 *
 * Pinned memory.  ib_umem_get charges every page it pins to the process
 * (mm->pinned_vm) and fails with ENOMEM past RLIMIT_MEMLOCK unless the
 * process has CAP_IPC_LOCK.  softrdma pins nothing but keeps the same
 * account: each MR is charged the pages it spans (twice if registered
 * twice, as the kernel does), each CQ and QP the pages of the ring the
 * mlx5 provider would allocate for it (cq.c, qp.c).  SOFTRDMA_NO_IPC_LOCK=1
 * makes the check ignore CAP_IPC_LOCK (for tests that run as root).
 *
 * Nothing is pinned for real: peers reach the memory with
 * process_vm_writev().  Registration does check that the whole range is
 * mapped (as pinning would), and fails with EFAULT otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define SR_MR_ACCESS_OK                                                    \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |               \
	 IBV_ACCESS_MW_BIND | IBV_ACCESS_HUGETLB |                         \
	 IBV_ACCESS_RELAXED_ORDERING)

/* ---- the pinned-memory account ---- */

static pthread_mutex_t ml_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ml_pages;

int sr_has_cap(int cap)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return 0;
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

int sr_memlock_charge(uint64_t pages)
{
	struct rlimit rl;
	int ret = 0;
	pthread_mutex_lock(&ml_lock);
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    ml_pages + pages > rl.rlim_cur / SR_PAGE &&
	    (sr_no_ipc_lock || !sr_has_cap(CAP_IPC_LOCK)))
		ret = ENOMEM;
	else
		ml_pages += pages;
	pthread_mutex_unlock(&ml_lock);
	return ret;
}

void sr_memlock_uncharge(uint64_t pages)
{
	pthread_mutex_lock(&ml_lock);
	ml_pages -= pages < ml_pages ? pages : ml_pages;
	pthread_mutex_unlock(&ml_lock);
}

void sr_memlock_atfork_child(void)
{
	pthread_mutex_init(&ml_lock, NULL);
	ml_pages = 0; /* a new mm pins nothing */
}

/* ---- key translation (the data path) ---- */

void *sr_mr_translate(struct sr_fabric *f, uint32_t key, pid_t pid,
		      uint32_t pd_id, unsigned need, uint64_t addr,
		      uint64_t len, uint32_t qpn)
{
	uint32_t slot = key >> 8;
	if (SR_UNLIKELY(slot >= SR_MAX_MRS || key == 0))
		return NULL;
	struct sr_mr_shm *m = sr_fabric_mr(f, slot);
	if (SR_UNLIKELY(atomic_load_explicit(&m->key, memory_order_acquire) != key))
		return NULL;
	if (SR_UNLIKELY(m->pid != pid || m->pd_id != pd_id ||
			(m->access & need) != need))
		return NULL;
	if (SR_UNLIKELY(addr < m->iova || len > m->length ||
			addr - m->iova > m->length - len))
		return NULL;
	if (SR_UNLIKELY(m->kind != SR_KEY_MR)) {
		/* A window: remote access only, while bound, through its QP
		 * (type 2), into an MR that is still registered. */
		if (!qpn || !atomic_load_explicit(&m->bound, memory_order_acquire) ||
		    (m->kind == SR_KEY_MW2 && m->mw_qpn != qpn))
			return NULL;
		struct sr_mr_shm *mr = sr_fabric_mr(f, m->mr_key >> 8);
		if (atomic_load_explicit(&mr->key, memory_order_acquire) != m->mr_key)
			return NULL;
	}
	return (void *)(uintptr_t)(m->addr + (addr - m->iova));
}

/* ---- memory regions ---- */

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
	uintptr_t first = (uintptr_t)addr & ~(uintptr_t)(SR_PAGE - 1);
	uint64_t pages = ((uintptr_t)addr + length - first + SR_PAGE - 1) / SR_PAGE;
	int e = sr_memlock_charge(pages);
	if (e) {
		errno = e;
		return NULL;
	}
	struct sr_mr *m = calloc(1, sizeof *m);
	uint32_t slot;
	if (!m || sr_fabric_alloc_slot(f, SR_SLOT_MR, &slot) < 0) {
		free(m);
		sr_memlock_uncharge(pages);
		errno = ENOMEM;
		return NULL;
	}
	struct sr_mr_shm *s = sr_fabric_mr(f, slot);
	s->gen = s->gen % 255 + 1; /* 1..255 */
	s->pd_id = p->id;
	s->pid = f->pid;
	s->access = access;
	s->addr = (uintptr_t)addr;
	s->length = length;
	s->iova = iova;
	s->kind = SR_KEY_MR;
	atomic_store(&s->bound, 0);
	uint32_t key = slot << 8 | s->gen;
	atomic_store_explicit(&s->key, key, memory_order_release);

	m->slot = slot;
	m->access = access;
	m->pages = pages;
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
	for (uint32_t i = 1; i < SR_MAX_MRS; i++) {
		struct sr_mr_shm *w = sr_fabric_mr(f, i);
		if (atomic_load(&w->key) && w->kind != SR_KEY_MR &&
		    atomic_load(&w->bound) && w->mr_key == mr->lkey && w->pid == f->pid)
			return EBUSY; /* a window is bound to it */
	}
	sr_fabric_free_slot(f, SR_SLOT_MR, m->slot);
	sr_memlock_uncharge(m->pages);
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

/* ---- memory windows ---- */

struct ibv_mw *sr_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct sr_fabric *f = sr_ctx(pd->context)->fab;
	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	struct sr_mw *w = calloc(1, sizeof *w);
	uint32_t slot;
	if (!w || sr_fabric_alloc_slot(f, SR_SLOT_MR, &slot) < 0) {
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	struct sr_mr_shm *s = sr_fabric_mr(f, slot);
	s->gen = s->gen % 255 + 1;
	s->pd_id = ((struct sr_pd *)pd)->id;
	s->pid = f->pid;
	s->access = 0;
	s->addr = s->length = s->iova = 0;
	s->kind = type == IBV_MW_TYPE_1 ? SR_KEY_MW1 : SR_KEY_MW2;
	s->mw_qpn = 0;
	s->mr_key = 0;
	atomic_store(&s->bound, 0);
	uint32_t key = slot << 8 | s->gen;
	atomic_store_explicit(&s->key, key, memory_order_release);
	w->slot = slot;
	w->mw.context = pd->context;
	w->mw.pd = pd;
	w->mw.rkey = key;
	w->mw.handle = key;
	w->mw.type = type;
	atomic_fetch_add(&((struct sr_pd *)pd)->refs, 1);
	return &w->mw;
}

int sr_dealloc_mw(struct ibv_mw *mw)
{
	struct sr_mw *w = (struct sr_mw *)mw;
	struct sr_fabric *f = sr_ctx(mw->context)->fab;
	sr_fabric_free_slot(f, SR_SLOT_MR, w->slot);
	atomic_fetch_sub(&((struct sr_pd *)mw->pd)->refs, 1);
	free(w);
	return 0;
}

#define SR_MW_ACCESS_OK \
	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ibv_bind_mw (type 1): posted as a bind WQE; the window's new rkey is
 * known at once. */
int sr_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr = {
		.wr_id = b->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = b->send_flags,
	};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = b->bind_info;
	struct ibv_send_wr *bad;
	int e = sr_post_send(qp, &wr, &bad);
	if (e)
		return e;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

/* Executes a bind WQE: an ibv_wc_status. */
int sr_mw_execute_bind(struct sr_qp *qp, struct sr_swqe *w)
{
	struct sr_fabric *f = qp->ctx->fab;
	struct sr_mw *mw = (struct sr_mw *)w->mw;
	struct sr_mr_shm *s = sr_fabric_mr(f, mw->slot);
	const struct ibv_mw_bind_info *b = &w->bind;
	if ((w->rkey >> 8) != mw->slot || s->pd_id != qp->pd->id)
		return IBV_WC_MW_BIND_ERR;
	if (s->kind == SR_KEY_MW2 && atomic_load(&s->bound))
		return IBV_WC_MW_BIND_ERR; /* bound: invalidate it first */
	if (!b->mr || b->length == 0) {
		/* An unbind (type 1 with a zero length). */
		atomic_store(&s->bound, 0);
		atomic_store_explicit(&s->key, w->rkey, memory_order_release);
		return IBV_WC_SUCCESS;
	}
	struct sr_mr *mr = (struct sr_mr *)b->mr;
	struct sr_mr_shm *ms = sr_fabric_mr(f, mr->slot);
	uint64_t iova = ms->iova;
	if (atomic_load(&ms->key) != b->mr->lkey || ms->pd_id != qp->pd->id ||
	    !(ms->access & IBV_ACCESS_MW_BIND) ||
	    ((b->mw_access_flags & IBV_ACCESS_REMOTE_WRITE) &&
	     !(ms->access & IBV_ACCESS_LOCAL_WRITE)) ||
	    b->addr < iova || b->length > ms->length ||
	    b->addr - iova > ms->length - b->length)
		return IBV_WC_MW_BIND_ERR;
	atomic_store(&s->bound, 0);
	s->access = b->mw_access_flags & SR_MW_ACCESS_OK;
	s->addr = ms->addr + (b->addr - iova);
	s->iova = b->addr;
	s->length = b->length;
	s->mr_key = b->mr->lkey;
	s->mw_qpn = qp->qp.qp_num;
	atomic_store_explicit(&s->bound, 1, memory_order_release);
	atomic_store_explicit(&s->key, w->rkey, memory_order_release);
	return IBV_WC_SUCCESS;
}

/* IBV_WR_LOCAL_INV of a type 2 window of the QP's PD. */
int sr_mw_execute_inv(struct sr_qp *qp, uint32_t rkey)
{
	struct sr_fabric *f = qp->ctx->fab;
	uint32_t slot = rkey >> 8;
	if (slot == 0 || slot >= SR_MAX_MRS)
		return IBV_WC_LOC_PROT_ERR;
	struct sr_mr_shm *s = sr_fabric_mr(f, slot);
	if (atomic_load(&s->key) != rkey || s->kind != SR_KEY_MW2 ||
	    s->pid != f->pid || s->pd_id != qp->pd->id ||
	    !atomic_load(&s->bound))
		return IBV_WC_LOC_PROT_ERR;
	atomic_store_explicit(&s->bound, 0, memory_order_release);
	return IBV_WC_SUCCESS;
}
