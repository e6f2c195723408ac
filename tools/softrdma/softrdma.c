/*
 * softrdma: tickbus's software RDMA device.
 *
 * What it is.  A replacement libibverbs.so.1, with the same exported symbols
 * and symbol versions as rdma-core's, that presents one RoCE device
 * ("softrdma0") whose queue pairs reach other processes on the same host.
 * Unmodified verbs programs pick it up through LD_LIBRARY_PATH.  The static
 * inline verbs of <infiniband/verbs.h> (ibv_post_send, ibv_poll_cq, ...)
 * dispatch through context->ops, and the newer ones through struct
 * verbs_context; ibv_open_device returns a full verbs_context whose unused
 * operations are NULL, so those inlines fail cleanly with EOPNOTSUPP.
 *
 * How data moves.  All objects a remote peer must reach live in one shared
 * memory "fabric" file per SOFTRDMA_FABRIC name (fabric.c): receive queues,
 * completion queues, the key table (MRs and windows: key -> owner pid,
 * address, length, access), and each process's port (state, link layer,
 * MTU, LID, GID table: port.c).  A send queue is process-local.
 * ibv_post_send only validates and queues the work request (inline data is
 * copied, other buffers referenced) and rings the process's send engine
 * (datapath.c), which runs it later, as a NIC would, on a progress thread
 * or inside ibv_poll_cq:
 *   - it checks its own lkeys and bounds, resolves the peer QP from the qpn
 *     in its RTR attributes, checks that the peer is connected back, that
 *     the packets reach the peer's port (GIDs or LIDs, port state, MTU) and
 *     come back, and that the PSN is the one the responder expects;
 *   - RDMA WRITE checks the rkey entry and copies with process_vm_writev()
 *     straight into the target process (memcpy when the target is itself),
 *     reading the source as it is then; RDMA READ's data lands with its
 *     response, on the engine's next pass;
 *   - SEND and WRITE-with-immediate take the target's posted receive from the
 *     shared receive ring and push the receive completion into the target's
 *     shared completion ring; the requester completion goes to its own CQ,
 *     in send-queue order.
 * Nothing waits for the target process to be scheduled.
 *
 * When the work cannot finish now (no receive posted: RNR; a lost packet or
 * a peer not ready: transport retry) the WQE stays at the head of the send
 * queue and the engine retries it on the timers the QP attributes give
 * (min_rnr_timer of the responder, timeout of the requester), up to
 * rnr_retry / retry_cnt, exactly where a NIC would retransmit.
 *
 * Concurrency.  Completion rings are multi-producer (any process) and
 * single-consumer (the owner's ibv_poll_cq), with a per-entry sequence word
 * published with release order.  A receive ring has one producer (the owner's
 * ibv_post_recv) and, at a time, one consumer (the connected requester or a
 * flush) behind a short spinlock that is never held across a system call.
 * Completion-channel and async events are datagrams to abstract unix sockets
 * (fabric.c), sent only when the CQ is armed.
 *
 * Files: fabric.c (shared memory), device.c (device, context, PD), port.c,
 * mr.c (MRs, windows, memlock), cq.c, qp.c (creation and the state
 * machine), qpex.c (ibv_wr_*), datapath.c (post and the send engine), ud.c,
 * async.c, ctl.c (softrdma-ctl), fault.c (SOFTRDMA_* settings and faults),
 * strings.c, compat.c (legacy and provider-private symbols), libibverbs.map.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <sched.h>
#include <time.h>

struct sr_qp *_Atomic sr_local_qp[SR_MAX_QPS];
struct sr_cq *_Atomic sr_local_cq[SR_MAX_CQS];
pthread_mutex_t sr_registry_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t sr_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Short critical sections only; yields after a bounded spin so a holder that
 * was preempted on a 2-core machine gets to run. */
void sr_spin_lock(_Atomic uint32_t *l)
{
	for (unsigned spins = 0;; spins++) {
		uint32_t z = 0;
		if (atomic_load_explicit(l, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_weak_explicit(
			    l, &z, 1, memory_order_acquire, memory_order_relaxed))
			return;
		if (spins >= 64)
			sched_yield();
		else
			__builtin_ia32_pause();
	}
}

void sr_spin_unlock(_Atomic uint32_t *l)
{
	atomic_store_explicit(l, 0, memory_order_release);
}

static void atfork_child(void)
{
	/* Objects of the parent are not usable in the child (as with a real
	 * NIC without ibv_fork_init); forget them so the child's own objects
	 * get clean registry entries. */
	for (int i = 0; i < SR_MAX_QPS; i++)
		atomic_store(&sr_local_qp[i], NULL);
	for (int i = 0; i < SR_MAX_CQS; i++)
		atomic_store(&sr_local_cq[i], NULL);
	pthread_mutex_init(&sr_registry_lock, NULL);
	sr_progress_atfork_child();
	sr_memlock_atfork_child();
}

__attribute__((constructor)) static void sr_init(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
	sr_fault_init();
	sr_progress_init();
}
